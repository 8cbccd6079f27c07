// det and slogdet of tpu tensors factor a contiguous A.
//
// CPU's _linalg_det / _linalg_slogdet factor A^T when A is contiguous (det(A^T) = det(A), and
// LAPACK wants column-major input) and A itself otherwise, and their backward formulas read
// A.is_contiguous() to know which factors they were given. The tpu lowerings see values, not
// strides, and always factor A^T; so the composite entry points hand them a contiguous A. The
// saved input then tells the backward the truth, and the copy's own gradient carries it back to
// a strided input. linalg_det and linalg_slogdet are CompositeImplicitAutograd: a kernel for
// AutogradPrivateUse1 replaces their decomposition for tpu tensors (det, slogdet and logdet go
// through them).
#include <ATen/core/Tensor.h>
#include <ATen/ops/linalg_det_native.h>
#include <ATen/ops/linalg_slogdet_native.h>
#include <torch/library.h>

#include <tuple>

namespace torch_tpu::aten {
namespace {

at::Tensor LinalgDet(const at::Tensor& a) { return at::native::linalg_det(a.contiguous()); }

std::tuple<at::Tensor, at::Tensor> LinalgSlogdet(const at::Tensor& a) {
  return at::native::linalg_slogdet(a.contiguous());
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("linalg_det", LinalgDet);
  m.impl("linalg_slogdet", LinalgSlogdet);
}

}  // namespace
}  // namespace torch_tpu::aten

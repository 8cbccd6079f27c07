// out= forms whose functional form is composite while CPU has an out= kernel of its own (so they
// would otherwise reach the CPU fallback): the functional result, computed on the device, goes
// into `out` after CPU's checks and resize.
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

namespace torch_tpu::aten {
namespace {

at::Tensor& MvlgammaOut(const at::Tensor& self, int64_t p, at::Tensor& out) {
  const at::Tensor result = at::mvlgamma(self, p);
  TORCH_CHECK(at::can_cast(result.scalar_type(), out.scalar_type()), "mvlgamma: result type ",
              self.scalar_type(), " can't be cast to the desired output type ",
              result.scalar_type());
  at::native::resize_output(out, result.sizes());
  return out.copy_(result);
}

at::Tensor& NarrowCopyOut(const at::Tensor& self, int64_t dim, c10::SymInt start_symbolic,
                          c10::SymInt length_symbolic, at::Tensor& out) {
  int64_t start = start_symbolic.guard_int(__FILE__, __LINE__);
  const int64_t length = length_symbolic.guard_int(__FILE__, __LINE__);
  TORCH_CHECK(self.dim() > 0, "narrow() cannot be applied to a 0-dim tensor.");
  TORCH_CHECK(self.dtype() == out.dtype());
  if (dim < 0) {
    dim = at::maybe_wrap_dim(dim, self.dim());
  } else {
    TORCH_CHECK(dim < self.dim());
  }
  const int64_t size = self.size(dim);
  TORCH_CHECK_INDEX(-size <= start && start <= size,
                    "start out of range (expected to be in range of [", -size, ", ", size,
                    "], but got ", start, ")");
  if (start < 0) start += size;
  TORCH_CHECK(length >= 0 && start <= size - length, "start (", start, ") + length (", length,
              ") exceeds dimension size (", size, ").");
  const at::Tensor slice = self.narrow(dim, start, length);
  at::native::resize_output(out, slice.sizes());
  return out.copy_(slice);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mvlgamma.out", MvlgammaOut);
  m.impl("narrow_copy.out", NarrowCopyOut);
}

}  // namespace
}  // namespace torch_tpu::aten

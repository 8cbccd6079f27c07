// Ops whose output size depends on tensor values (nonzero, masked_select): the host reads the
// count from the device (a sync point), then the device computes the values for that size.
#include <ATen/ops/all.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/sum.h>
#include <ATen/ExpandUtils.h>
#include <torch/library.h>

#include "exec/eager.h"
#include "lowering/registry.h"

namespace torch_tpu::aten {
namespace {

const lowering::LoweringFunction& Lowering(const char* name) {
  return lowering::LoweringRegistry::Get().Function(name);
}

int64_t CountNonzero(const at::Tensor& tensor) {
  return at::ne(tensor, 0).sum().item<int64_t>();
}

at::Tensor Nonzero(const at::Tensor& self) {
  const int64_t count = self.numel() == 0 ? 0 : CountNonzero(self);
  exec::EagerLaunch launch("aten::nonzero");
  launch.AddTensor(self);
  launch.AddStatic(count);
  return launch.Run(Lowering("torch_tpu::nonzero"))[0];
}

at::Tensor MaskedSelect(const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  const auto shape = at::infer_size(self.sizes(), mask.sizes());
  const int64_t count = CountNonzero(mask.expand(shape));
  exec::EagerLaunch launch("aten::masked_select");
  launch.AddTensor(self);
  launch.AddTensor(mask);
  launch.AddStatic(count);
  return launch.Run(Lowering("torch_tpu::masked_select"))[0];
}

// equal(self, other): same shape and the same values (a host answer, so a sync point).
bool Equal(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.device() == other.device(), "equal: expected both tensors on the same device, got ",
              self.device(), " and ", other.device());
  if (self.sizes() != other.sizes()) return false;
  if (self.numel() == 0) return true;
  return at::eq(self, other).all().item<bool>();
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("equal", Equal);
  m.impl("nonzero", Nonzero);
  m.impl("masked_select", MaskedSelect);
}

}  // namespace
}  // namespace torch_tpu::aten

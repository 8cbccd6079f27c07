// Ops whose output size depends on tensor values (nonzero, masked_select, unique,
// repeat_interleave): the host reads
// the count from the device (a sync point), then the device computes the values for that size.
#include <ATen/ops/all.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/min.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/sum.h>
#include <ATen/ExpandUtils.h>
#include <ATen/WrapDimUtils.h>
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

// repeat_interleave.Tensor(repeats, *, output_size=None): with output_size the host reads
// nothing and the device checks what CPU checks on the host (CPU reads the sum either way).
at::Tensor RepeatInterleave(const at::Tensor& repeats, std::optional<c10::SymInt> output_size) {
  TORCH_CHECK(repeats.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
  TORCH_CHECK_NOT_IMPLEMENTED(
      repeats.scalar_type() == at::kLong || repeats.scalar_type() == at::kInt,
      "aten::repeat_interleave.Tensor: \"repeat_interleave_cpu\" not implemented for '",
      c10::toString(repeats.scalar_type()), "'");
  if (repeats.numel() == 0) return at::empty({0}, repeats.options());
  int64_t total = 0;
  if (output_size.has_value()) {
    total = output_size->guard_int(__FILE__, __LINE__);
  } else {
    const at::Tensor read =
        at::stack({repeats.sum(at::kLong), repeats.min().to(at::kLong)}).cpu();
    TORCH_CHECK(read[1].item<int64_t>() >= 0, "repeats can not be negative");
    total = read[0].item<int64_t>();
  }
  exec::EagerLaunch launch("aten::repeat_interleave.Tensor");
  launch.AddTensor(repeats);
  launch.AddStatic(total);
  launch.AddStatic(output_size.has_value());
  return launch.Run(Lowering("torch_tpu::repeat_interleave"))[0];
}

using UniqueResult = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// The distinct elements of `self` (flattened when `dim` is empty, else its slices along dim),
// sorted unless `consecutive` (then only runs of equal neighbours merge), with the inverse
// indices and counts asked for.
UniqueResult UniqueOnDevice(const char* op_name, const at::Tensor& self, std::optional<int64_t> dim,
                            bool consecutive, bool return_inverse, bool return_counts) {
  TORCH_CHECK_NOT_IMPLEMENTED(!self.is_complex(), "\"unique\" not implemented for '",
                              self.scalar_type(), "'");
  if (dim) {
    *dim = at::maybe_wrap_dim(*dim, self.dim(), /*wrap_scalar=*/false);
    TORCH_CHECK(self.numel() > 0 || self.size(*dim) == 0,
                "There are 0 sized dimensions, and they aren't selected, so unique cannot be "
                "applied");
  }
  const c10::IValue dim_static = dim ? c10::IValue(*dim) : c10::IValue();
  exec::EagerLaunch count_launch(op_name);
  count_launch.AddTensor(self);
  count_launch.AddStatic(dim_static);
  count_launch.AddStatic(consecutive);
  const int64_t count =
      count_launch.Run(Lowering("torch_tpu::unique_count"))[0].item<int64_t>();
  exec::EagerLaunch launch(op_name);
  launch.AddTensor(self);
  launch.AddStatic(count);
  launch.AddStatic(dim_static);
  launch.AddStatic(consecutive);
  launch.AddStatic(return_inverse);
  launch.AddStatic(return_counts);
  auto results = launch.Run(Lowering("torch_tpu::unique"));
  return {results[0], results[1], results[2]};
}

// CPU always sorts, whatever `sorted` asks.
UniqueResult Unique2(const at::Tensor& self, bool /*sorted*/, bool return_inverse,
                     bool return_counts) {
  return UniqueOnDevice("aten::_unique2", self, std::nullopt, false, return_inverse,
                        return_counts);
}

std::tuple<at::Tensor, at::Tensor> UniqueFlat(const at::Tensor& self, bool /*sorted*/,
                                              bool return_inverse) {
  auto [values, inverse, counts] =
      UniqueOnDevice("aten::_unique", self, std::nullopt, false, return_inverse, false);
  return {values, inverse};
}

UniqueResult UniqueConsecutive(const at::Tensor& self, bool return_inverse, bool return_counts,
                               std::optional<int64_t> dim) {
  // Along a dim CPU computes inverse and counts whether asked or not.
  return UniqueOnDevice("aten::unique_consecutive", self, dim, true, return_inverse || dim,
                        return_counts || dim);
}

UniqueResult UniqueDim(const at::Tensor& self, int64_t dim, bool /*sorted*/,
                       bool /*return_inverse*/, bool /*return_counts*/) {
  return UniqueOnDevice("aten::unique_dim", self, dim, false, true, true);
}

UniqueResult UniqueDimConsecutive(const at::Tensor& self, int64_t dim, bool /*return_inverse*/,
                                  bool /*return_counts*/) {
  return UniqueOnDevice("aten::unique_dim_consecutive", self, dim, true, true, true);
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
  m.impl("repeat_interleave.Tensor", RepeatInterleave);
  m.impl("_unique2", Unique2);
  m.impl("_unique", UniqueFlat);
  m.impl("unique_consecutive", UniqueConsecutive);
  m.impl("unique_dim", UniqueDim);
  m.impl("unique_dim_consecutive", UniqueDimConsecutive);
}

}  // namespace
}  // namespace torch_tpu::aten

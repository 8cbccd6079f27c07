// Ops whose output size depends on tensor values (nonzero, masked_select, unique, bincount,
// repeat_interleave): the host reads the count from the device (a sync point), then the device
// computes the values for that size.
#include <ATen/ops/all.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/min.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>

#include "aten/write_checks.h"
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

// The result is laid out as CPU lays it out: column-major, strides (1, count), so each column
// of indices is contiguous; an `out` of the right shape keeps its own strides.
at::Tensor NonzeroInto(const at::Tensor& self, const at::Tensor* out) {
  const int64_t count = self.numel() == 0 ? 0 : CountNonzero(self);
  exec::EagerLaunch launch("aten::nonzero");
  launch.AddTensor(self);
  launch.AddStatic(count);
  at::Tensor result;
  if (out != nullptr) {
    if (at::native::resize_output(*out, {count, self.dim()})) {
      out->as_strided_({count, self.dim()}, {1, count});
    }
    result = *out;
  } else {
    result = at::empty_strided({count, self.dim()}, {1, count}, self.options().dtype(at::kLong));
  }
  launch.WriteResultTo(0, result);
  launch.Run(Lowering("torch_tpu::nonzero"));
  return result;
}

at::Tensor Nonzero(const at::Tensor& self) { return NonzeroInto(self, nullptr); }

// CPU's device-mismatch error for an out= kernel registered by hand (the boxed path checks it).
void CheckOutDevices(const char* name, std::vector<c10::IValue> arguments) {
  CheckWrites(c10::Dispatcher::singleton().findSchemaOrThrow(name, "out").schema(), arguments);
}

at::Tensor& NonzeroOut(const at::Tensor& self, at::Tensor& out) {
  CheckOutDevices("aten::nonzero", {self, out});
  TORCH_CHECK(out.scalar_type() == at::kLong,
              "nonzero: Expected out tensor to have scalar type Long but got scalar type",
              out.scalar_type());
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  NonzeroInto(self, &out);
  return out;
}

at::Tensor MaskedSelectInto(const at::Tensor& self, const at::Tensor& mask, const at::Tensor* out) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  const auto shape = at::infer_size(self.sizes(), mask.sizes());
  const int64_t count = CountNonzero(mask.expand(shape));
  exec::EagerLaunch launch("aten::masked_select");
  launch.AddTensor(self);
  launch.AddTensor(mask);
  launch.AddStatic(count);
  if (out != nullptr) {
    at::native::resize_output(*out, {count});
    launch.WriteResultTo(0, *out);
  }
  return launch.Run(Lowering("torch_tpu::masked_select"))[0];
}

at::Tensor MaskedSelect(const at::Tensor& self, const at::Tensor& mask) {
  return MaskedSelectInto(self, mask, nullptr);
}

at::Tensor& MaskedSelectOut(const at::Tensor& self, const at::Tensor& mask, at::Tensor& out) {
  CheckOutDevices("aten::masked_select", {self, mask, out});
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  TORCH_CHECK(self.scalar_type() == out.scalar_type(),
              "masked_select(): self and result must have the same scalar type");
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  at::assert_no_overlap(out, mask);
  MaskedSelectInto(self, mask, &out);
  return out;
}

// bincount(self, Tensor? weights, SymInt minlength): one bin per value up to the largest, which
// the host reads (with the smallest, for CPU's check) before the device sums into the bins.
at::Tensor Bincount(const at::Tensor& self, const std::optional<at::Tensor>& weights,
                    c10::SymInt minlength_symbolic) {
  const int64_t minlength = minlength_symbolic.guard_int(__FILE__, __LINE__);
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isIntegralType(self.scalar_type(), /*includeBool=*/false),
                              "\"bincount_cpu\" not implemented for '",
                              c10::toString(self.scalar_type()), "'");
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  if (self.dim() == 1 && self.numel() == 0) {
    return at::zeros({minlength}, self.options().dtype(at::kLong));
  }
  TORCH_CHECK(self.dim() == 1, "bincount only supports 1-d non-negative integral inputs.");
  const at::Tensor extremes = at::stack({self.min(), self.max()}).to(at::kLong).cpu();
  const int64_t lowest = extremes[0].item<int64_t>();
  const int64_t highest = extremes[1].item<int64_t>();
  TORCH_CHECK(lowest >= 0, "bincount only supports 1-d non-negative integral inputs.");
  TORCH_CHECK(highest < std::numeric_limits<int64_t>::max(),
              "maximum value of input overflowed, it should be < ",
              std::numeric_limits<int64_t>::max(), " but got ", highest);
  const bool has_weights = weights.has_value() && weights->defined();
  TORCH_CHECK(!has_weights || (weights->dim() == 1 && weights->size(0) == self.size(0)),
              "weights should be 1-d and have the same length as input");
  exec::EagerLaunch launch("aten::bincount");
  launch.AddTensor(self);
  launch.AddOptionalTensor(weights);
  launch.AddStatic(std::max(highest + 1, minlength));
  return launch.Run(Lowering("torch_tpu::bincount"))[0];
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
  m.impl("bincount", Bincount);
  m.impl("nonzero", Nonzero);
  m.impl("nonzero.out", NonzeroOut);
  m.impl("masked_select", MaskedSelect);
  m.impl("repeat_interleave.Tensor", RepeatInterleave);
  m.impl("masked_select.out", MaskedSelectOut);
  m.impl("_unique2", Unique2);
  m.impl("_unique", UniqueFlat);
  m.impl("unique_consecutive", UniqueConsecutive);
  m.impl("unique_dim", UniqueDim);
  m.impl("unique_dim_consecutive", UniqueDimConsecutive);
}

}  // namespace
}  // namespace torch_tpu::aten

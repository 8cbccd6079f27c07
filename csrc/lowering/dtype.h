// Mapping between PyTorch dtypes and StableHLO element types, and PyTorch's type promotion.
#pragma once

#include <c10/core/ScalarType.h>

#include <optional>
#include <span>

#include "stablehlo/element_type.h"

namespace torch_tpu::lowering {

// nullopt for dtypes the device does not support (complex32, quantized, bits, ...).
std::optional<stablehlo::ElementType> ToElementType(c10::ScalarType dtype);
// Throws c10::Error naming `op` and the dtype when the dtype is unsupported.
stablehlo::ElementType ToElementTypeOrThrow(c10::ScalarType dtype, const char* op);
c10::ScalarType ToScalarType(stablehlo::ElementType type);

// The dtype to compute in: float32 for half-precision inputs (rounded once at the end, as
// PyTorch's CPU kernels do), the dtype itself otherwise.
inline c10::ScalarType ComputeDtype(c10::ScalarType dtype) {
  return dtype == c10::kHalf || dtype == c10::kBFloat16 ? c10::kFloat : dtype;
}

// One participant in PyTorch's type promotion: a dimensioned tensor, a zero-dim tensor or a
// wrapped Python number, in decreasing priority.
struct PromotionInput {
  c10::ScalarType dtype;
  enum class Category { kDimensioned, kZeroDim, kWrappedNumber } category;
};

// The dtype PyTorch's TensorIterator would compute for these inputs (torch.result_type).
c10::ScalarType ResultType(std::span<const PromotionInput> inputs);

}  // namespace torch_tpu::lowering

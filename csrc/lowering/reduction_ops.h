// Reduction building blocks shared by reduction, normalization and loss lowerings.
#pragma once

#include <vector>

#include "lowering/context.h"

namespace torch_tpu::lowering {

enum class ReduceKind { kSum, kProduct, kMax, kMin, kAnd, kOr, kXor };

// The lowest and highest values of an integer or pred element type.
int64_t LowestOf(stablehlo::ElementType type);
uint64_t HighestOf(stablehlo::ElementType type);
// The scalar no element loses to in a max (min) reduction of `type`: -inf (inf) or the type's
// lowest (highest) value.
stablehlo::Value ExtremeIdentity(stablehlo::FunctionBuilder& builder, stablehlo::ElementType type,
                                 bool maximum);

// Reduces `input` over sorted `dims` (keepdim reshapes them to 1).
stablehlo::Value ReduceOver(LoweringContext& context, stablehlo::Value input,
                            const std::vector<int64_t>& dims, ReduceKind kind, bool keepdim);

// Sorted, wrapped, unique dims from an int[]? operand; all dims when None or empty.
std::vector<int64_t> ReductionDims(LoweringContext& context, const Operand& dims, int64_t rank);

// dims of `dims` with the reduced ones set to 1.
std::vector<int64_t> KeptDims(const std::vector<int64_t>& dims,
                              const std::vector<int64_t>& reduced);

}  // namespace torch_tpu::lowering

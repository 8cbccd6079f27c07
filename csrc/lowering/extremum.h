// Elementwise max/min with PyTorch's NaN rules. StableHLO leaves what maximum/minimum return for
// a NaN operand to the implementation, so the rules are spelled out with explicit selects.
#pragma once

#include "stablehlo/builder.h"

namespace torch_tpu::lowering {

enum class NanRule {
  kPropagate,  // torch.maximum/minimum, clamp, amax, max(): NaN when either is NaN
  kIgnore,     // torch.fmax/fmin: a NaN loses to a number
};

inline stablehlo::Value NanAwareExtremum(stablehlo::FunctionBuilder& builder, stablehlo::Value x,
                                         stablehlo::Value y, bool maximum, NanRule rule) {
  using Direction = stablehlo::FunctionBuilder::ComparisonDirection;
  stablehlo::Value extremum = maximum ? builder.Maximum(x, y) : builder.Minimum(x, y);
  if (!stablehlo::IsFloat(x.element_type())) return extremum;
  stablehlo::Value x_nan = builder.Compare(x, x, Direction::kNe);
  stablehlo::Value y_nan = builder.Compare(y, y, Direction::kNe);
  const bool propagate = rule == NanRule::kPropagate;
  return builder.Select(x_nan, propagate ? x : y,
                        builder.Select(y_nan, propagate ? y : x, extremum));
}

inline stablehlo::Value NanPropagatingExtremum(stablehlo::FunctionBuilder& builder,
                                               stablehlo::Value x, stablehlo::Value y,
                                               bool maximum) {
  return NanAwareExtremum(builder, x, y, maximum, NanRule::kPropagate);
}

}  // namespace torch_tpu::lowering

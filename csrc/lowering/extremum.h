// Elementwise max/min with PyTorch's NaN rules. StableHLO leaves what maximum/minimum return for
// a NaN operand to the implementation, so the rules are spelled out with explicit selects.
#pragma once

#include "stablehlo/builder.h"

namespace torch_tpu::lowering {

// max/min as torch.maximum/minimum, clamp, amax and max() compute it: NaN when either is NaN.
inline stablehlo::Value NanPropagatingExtremum(stablehlo::FunctionBuilder& builder,
                                               stablehlo::Value x, stablehlo::Value y,
                                               bool maximum) {
  using Direction = stablehlo::FunctionBuilder::ComparisonDirection;
  stablehlo::Value extremum = maximum ? builder.Maximum(x, y) : builder.Minimum(x, y);
  if (!stablehlo::IsFloat(x.element_type())) return extremum;
  stablehlo::Value x_nan = builder.Compare(x, x, Direction::kNe);
  stablehlo::Value y_nan = builder.Compare(y, y, Direction::kNe);
  return builder.Select(x_nan, x, builder.Select(y_nan, y, extremum));
}

// max/min as torch.fmax/fmin compute it: a NaN loses to a number.
inline stablehlo::Value NanIgnoringExtremum(stablehlo::FunctionBuilder& builder, stablehlo::Value x,
                                            stablehlo::Value y, bool maximum) {
  using Direction = stablehlo::FunctionBuilder::ComparisonDirection;
  stablehlo::Value extremum = maximum ? builder.Maximum(x, y) : builder.Minimum(x, y);
  if (!stablehlo::IsFloat(x.element_type())) return extremum;
  stablehlo::Value x_nan = builder.Compare(x, x, Direction::kNe);
  stablehlo::Value y_nan = builder.Compare(y, y, Direction::kNe);
  return builder.Select(x_nan, y, builder.Select(y_nan, x, extremum));
}

}  // namespace torch_tpu::lowering

// float8 on the device: conversions with PyTorch's rounding, and which ops take float8 tensors.
//
// Conversions are built from integer ops on the bit patterns (the rules are in
// stablehlo/float8.h) rather than XLA's convert, whose overflow and NaN handling for float8
// differs between backends and from PyTorch (saturation, NaN payloads, negative zero of the fnuz
// formats): every plugin then produces CPU's bits.
#pragma once

#include <string>

#include "lowering/registry.h"
#include "stablehlo/builder.h"

namespace torch_tpu::lowering {

// float32 `value` rounded to the float8 type `target`.
stablehlo::Value Float8FromFloat32(stablehlo::FunctionBuilder& builder, stablehlo::Value value,
                                   stablehlo::ElementType target);
// float8 `value` as float32 (exact).
stablehlo::Value Float32FromFloat8(stablehlo::FunctionBuilder& builder, stablehlo::Value value);

// `function`, the lowering of `functional` (an overload name), restricted to what PyTorch's CPU
// kernels do with float8 operands and results: data movement ops move their bit patterns; the
// arithmetic CPU implements (abs, mul, eq/ne, isnan, mm/addmm...) computes in float32 on the
// operands cast to the float8 result type, rounding the result once, as CPU does; every other
// op raises NotImplementedError naming the op and the dtype, as CPU's kernels do.
LoweringFunction WithFloat8Rules(const std::string& functional, LoweringFunction function);

}  // namespace torch_tpu::lowering

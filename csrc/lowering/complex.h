// Helpers for complex values shared by lowerings and the executor's view reads and writes.
#pragma once

#include "stablehlo/builder.h"

namespace torch_tpu::lowering {

// The complex conjugate; the identity for real values.
stablehlo::Value Conjugate(stablehlo::FunctionBuilder& builder, stablehlo::Value value);

// What a view with PyTorch's lazy conjugate / negative bits shows of `stored` (and, applied again,
// what it stores of shown values: both operations are involutions).
stablehlo::Value ApplyViewBits(stablehlo::FunctionBuilder& builder, stablehlo::Value stored,
                               bool conjugate, bool negative);

}  // namespace torch_tpu::lowering

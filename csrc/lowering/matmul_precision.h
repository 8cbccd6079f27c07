// The precision of matrix products and convolutions in the programs being built.
//
// torch.set_float32_matmul_precision (process-wide) chooses it, and torch.tpu.precision (a
// per-thread stack of overrides) replaces it inside a block. It becomes the StableHLO
// precision_config of every dot_general and convolution a user-level matmul or convolution op
// lowers to: "highest" -> HIGHEST, "high" -> HIGH, "medium" -> DEFAULT. Executors read it when
// they sign a launch (it is part of the program key) and lower under the value they signed
// (MatmulPrecisionScope), so a program built under one precision is never reused under another,
// even when an op recorded under one is lowered later (defer-and-fuse).
#pragma once

#include <c10/core/ScalarType.h>

#include "stablehlo/builder.h"

namespace torch_tpu::lowering {

using MatmulPrecision = stablehlo::FunctionBuilder::Precision;

// The calling thread's innermost override, else torch.get_float32_matmul_precision() mapped.
MatmulPrecision CurrentMatmulPrecision();

// Pushes an override for the calling thread (torch.tpu.precision, and executors lowering what
// they signed); PopMatmulPrecision removes the innermost one.
void PushMatmulPrecision(MatmulPrecision precision);
void PopMatmulPrecision();

class MatmulPrecisionScope {
 public:
  explicit MatmulPrecisionScope(MatmulPrecision precision) { PushMatmulPrecision(precision); }
  ~MatmulPrecisionScope() { PopMatmulPrecision(); }
  MatmulPrecisionScope(const MatmulPrecisionScope&) = delete;
  MatmulPrecisionScope& operator=(const MatmulPrecisionScope&) = delete;
};

// The precision a product of `dtype` operands gets: the current one for float32 and complex64
// (what PyTorch's setting governs: "float32 matmul precision"); HIGHEST for every other dtype,
// so half types keep their full mantissa on TPU (which would otherwise round float16 operands
// to bfloat16) and float64 is never reduced.
MatmulPrecision MatmulPrecisionFor(c10::ScalarType dtype);

// "default", "high", "highest".
const char* MatmulPrecisionName(MatmulPrecision precision);

}  // namespace torch_tpu::lowering

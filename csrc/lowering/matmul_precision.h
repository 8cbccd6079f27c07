// The precision of matrix products and convolutions in the programs being built.
//
// torch.set_float32_matmul_precision (process-wide) chooses it, and torch.tpu.precision (a
// per-thread stack of overrides) replaces it inside a block. It becomes the StableHLO
// precision_config of every dot_general and convolution a user-level matmul or convolution op
// lowers to: "highest" -> HIGHEST, "high" -> HIGH, "medium" -> DEFAULT. Executors read it when
// they sign a launch (it is part of the program key) and lower under the value they signed
// (MatmulPrecisionScope), so a program built under one precision is never reused under another,
// even when an op recorded under one is lowered later (defer-and-fuse).
//
// Reading torch's setting costs three hash-table lookups (at::Context checks the legacy and the
// per-backend settings against each other), which an eager launch would pay for every op. So a
// launch signs the precision only for lowerings known to read it (MatmulPrecisionToSign); the
// others sign "unsigned" and lower under an unsigned scope, where reading the precision throws
// UnsignedMatmulPrecisionRead: the launch then marks its lowering as a reader and starts again,
// signed. A program built unsigned never read the precision, so it is right under any.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <exception>

#include "stablehlo/builder.h"

namespace torch_tpu::lowering {

using MatmulPrecision = stablehlo::FunctionBuilder::Precision;

// What a launch signs in place of a precision it did not read.
constexpr int8_t kUnsignedMatmulPrecision = -1;

// The calling thread's innermost override, else torch.get_float32_matmul_precision() mapped.
// Under an unsigned scope: throws UnsignedMatmulPrecisionRead, or reads torch's setting inside
// UnsignedMatmulPrecisionReadsSetting.
MatmulPrecision CurrentMatmulPrecision();

// A lowering read the precision under a launch that did not sign it.
struct UnsignedMatmulPrecisionRead : std::exception {
  const char* what() const noexcept override {
    return "internal: a lowering read the matmul precision its launch did not sign";
  }
};

// The precision a launch of `lowering` (its function's address) signs: the current one when the
// lowering is known to read it or an override is active, else kUnsignedMatmulPrecision.
int8_t MatmulPrecisionToSign(const void* lowering);
// Marks `lowering` as reading the precision: its launches sign it from now on.
void MarkReadsMatmulPrecision(const void* lowering);

// Pushes an override for the calling thread (torch.tpu.precision, and executors lowering what
// they signed); PopMatmulPrecision removes the innermost one.
void PushMatmulPrecision(MatmulPrecision precision);
void PopMatmulPrecision();

class MatmulPrecisionScope {
 public:
  explicit MatmulPrecisionScope(MatmulPrecision precision) { PushMatmulPrecision(precision); }
  // A launch's signed value: a precision, or kUnsignedMatmulPrecision.
  explicit MatmulPrecisionScope(int8_t signed_precision);
  ~MatmulPrecisionScope() { PopMatmulPrecision(); }
  MatmulPrecisionScope(const MatmulPrecisionScope&) = delete;
  MatmulPrecisionScope& operator=(const MatmulPrecisionScope&) = delete;
};

// While one exists on a thread, a read under an unsigned scope reads torch's setting instead of
// throwing: for lowering ops recorded earlier (a deferred graph at its cut), which cannot start
// again. Their recording lowered the same signature without reading the precision, so this is a
// fallback that should not be reached.
class UnsignedMatmulPrecisionReadsSetting {
 public:
  UnsignedMatmulPrecisionReadsSetting();
  ~UnsignedMatmulPrecisionReadsSetting();
  UnsignedMatmulPrecisionReadsSetting(const UnsignedMatmulPrecisionReadsSetting&) = delete;
  UnsignedMatmulPrecisionReadsSetting& operator=(const UnsignedMatmulPrecisionReadsSetting&) =
      delete;
};

// The precision a product of `dtype` operands gets: the current one for float32 and complex64
// (what PyTorch's setting governs: "float32 matmul precision"); HIGHEST for every other dtype,
// so half types keep their full mantissa on TPU (which would otherwise round float16 operands
// to bfloat16) and float64 is never reduced.
MatmulPrecision MatmulPrecisionFor(c10::ScalarType dtype);

// "default", "high", "highest".
const char* MatmulPrecisionName(MatmulPrecision precision);

}  // namespace torch_tpu::lowering

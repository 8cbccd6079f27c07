// Element types of StableHLO tensors, restricted to the ones torch_tpu lowers today. Spellings
// follow MLIR's builtin types so they can be pasted into the module text.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace torch_tpu::stablehlo {

// Every validation failure of the builder surfaces as this type, so callers can tell "the graph
// I was asked to lower is malformed" apart from runtime failures further down the stack.
class BuilderError : public std::invalid_argument {
 public:
  explicit BuilderError(const std::string& message) : std::invalid_argument(message) {}
};

enum class ElementType {
  kPred,
  kS8,
  kS16,
  kS32,
  kS64,
  kU8,
  kU16,
  kU32,
  kU64,
  kBF16,
  kF16,
  kF32,
  kF64,
  kC64,   // complex<f32>
  kC128,  // complex<f64>
  // The float8 formats PyTorch has (torch.float8_e4m3fn, ...). They are storage formats: values
  // are converted with PyTorch's rounding (stablehlo/float8.h, lowering/float8.h), and only the
  // ops PyTorch's CPU kernels implement for them are lowered.
  kF8E4M3FN,
  kF8E5M2,
  kF8E4M3FNUZ,
  kF8E5M2FNUZ,
};

// One past the last ElementType, for loops over all of them.
inline constexpr int kElementTypeCount = static_cast<int>(ElementType::kF8E5M2FNUZ) + 1;

// MLIR spelling: "i1", "i8", ..., "ui64", "bf16", "f16", "f32", "f64", "complex<f32>", ...
std::string_view MlirName(ElementType type);

// Storage size of one element. pred occupies a full byte in every PJRT buffer layout.
int ByteWidth(ElementType type);

// Bits of the value representation (1 for pred, unlike ByteWidth).
int BitWidth(ElementType type);

// Real floating-point types only (float8 included): complex types are neither float nor integer.
bool IsFloat(ElementType type);
bool IsFloat8(ElementType type);
bool IsComplex(ElementType type);
// The type of the real and imaginary parts of a complex type (f32 for complex<f32>).
ElementType ComplexPartType(ElementType type);
// The complex type whose parts are `type` (f32 or f64).
ElementType ComplexTypeOf(ElementType part_type);
bool IsSignedInteger(ElementType type);
bool IsUnsignedInteger(ElementType type);
// pred is deliberately not an integer: StableHLO treats i1 as boolean in most op constraints.
bool IsInteger(ElementType type);
bool IsPred(ElementType type);

}  // namespace torch_tpu::stablehlo

#include "float8.h"

#include <bit>
#include <cmath>
#include <string>

namespace torch_tpu::stablehlo {

Float8Format Float8FormatOf(ElementType type) {
  using Overflow = Float8Format::Overflow;
  switch (type) {
    case ElementType::kF8E4M3FN: return {4, 3, 7, Overflow::kSaturate, false, 0x7E};
    case ElementType::kF8E5M2: return {5, 2, 15, Overflow::kInfinity, false, 0x7B};
    case ElementType::kF8E4M3FNUZ: return {4, 3, 8, Overflow::kNan, true, 0x7F};
    case ElementType::kF8E5M2FNUZ: return {5, 2, 16, Overflow::kNan, true, 0x7F};
    default: break;
  }
  throw BuilderError("Float8FormatOf: " + std::string(MlirName(type)) + " is not a float8 type");
}

uint8_t Float8FromFloatBits(uint32_t float_bits, ElementType type) {
  const Float8Format format = Float8FormatOf(type);
  const uint32_t sign = float_bits >> 31;
  const uint32_t magnitude = float_bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return format.fnuz ? 0x80 : static_cast<uint8_t>(0x7F | sign << 7);
  const int shift = 23 - format.mantissa_bits;
  const uint32_t min_normal = static_cast<uint32_t>(128 - format.bias) << 23;
  uint32_t code;
  if (magnitude >= min_normal) {
    // Rebias the exponent, then round the dropped mantissa bits to nearest even.
    const uint32_t rebiased = magnitude - (static_cast<uint32_t>(127 - format.bias) << 23);
    code = (rebiased + ((1u << (shift - 1)) - 1) + ((magnitude >> shift) & 1)) >> shift;
  } else {
    // Subnormal: a multiple of the smallest subnormal; the scaling by a power of two is exact.
    const float scaled = std::ldexp(std::bit_cast<float>(magnitude),
                                    format.bias - 1 + format.mantissa_bits);
    code = static_cast<uint32_t>(std::nearbyint(scaled));  // ties to even in the default mode
  }
  if (code > format.max_finite_code) {
    switch (format.overflow) {
      case Float8Format::Overflow::kSaturate: code = format.max_finite_code; break;
      case Float8Format::Overflow::kInfinity: code = format.max_finite_code + 1; break;
      case Float8Format::Overflow::kNan: return 0x80;
    }
  }
  if (format.fnuz && code == 0) return 0;
  return static_cast<uint8_t>(code | sign << 7);
}

uint32_t FloatBitsFromFloat8(uint8_t code, ElementType type) {
  const Float8Format format = Float8FormatOf(type);
  const uint32_t sign = static_cast<uint32_t>(code >> 7) << 31;
  const uint32_t exponent = (code >> format.mantissa_bits) & ((1u << format.exponent_bits) - 1);
  const uint32_t mantissa = code & ((1u << format.mantissa_bits) - 1);
  const int shift = 23 - format.mantissa_bits;
  if (format.fnuz && code == 0x80) return 0x7F800001u;
  if (!format.fnuz && (code & 0x7F) > format.max_finite_code) {
    if (format.overflow == Float8Format::Overflow::kInfinity && mantissa == 0) {
      return sign | 0x7F800000u;
    }
    return sign | 0x7FC00000u | mantissa << shift;  // quiet NaN keeping the payload bits
  }
  if (exponent == 0) {
    const float value =
        std::ldexp(static_cast<float>(mantissa), 1 - format.bias - format.mantissa_bits);
    return sign | std::bit_cast<uint32_t>(value);
  }
  return sign | (exponent + 127 - format.bias) << 23 | mantissa << shift;
}

}  // namespace torch_tpu::stablehlo

// The float8 formats and PyTorch's conversion rules for them, shared by host-side literals
// (stablehlo/literal.cc) and the device-side conversion the lowerings build (lowering/float8.cc),
// so a constant and a converted tensor round the same way.
//
// PyTorch converts every value to float8 through float32 (a double is rounded to float32 first),
// rounding to nearest, ties to even, with subnormals. What happens past the largest finite value
// differs per format, as PyTorch's CPU conversion does it:
//   e4m3fn    saturates to +-448 (infinities too); NaN keeps its sign (0x7F / 0xFF)
//   e5m2      IEEE: overflow rounds to +-inf; NaN keeps its sign
//   e4m3fnuz, e5m2fnuz   overflow and infinities become the one NaN (0x80); no negative zero
// Converting back is exact; NaN codes become the float32 NaNs PyTorch's conversion gives.
#pragma once

#include <cstdint>

#include "element_type.h"

namespace torch_tpu::stablehlo {

struct Float8Format {
  enum class Overflow { kSaturate, kInfinity, kNan };
  int exponent_bits;
  int mantissa_bits;
  int bias;
  Overflow overflow;
  bool fnuz;  // finite everywhere but 0x80, which is the only NaN; no negative zero
  // The largest code of a finite positive value (0x7E for e4m3fn: 0x7F is NaN).
  uint32_t max_finite_code;
};

// Throws BuilderError when `type` is not a float8 type.
Float8Format Float8FormatOf(ElementType type);

// The float8 code of float32 `value` (given as its bits), rounded as PyTorch does.
uint8_t Float8FromFloatBits(uint32_t float_bits, ElementType type);
// The float32 bits of float8 `code`.
uint32_t FloatBitsFromFloat8(uint8_t code, ElementType type);

}  // namespace torch_tpu::stablehlo

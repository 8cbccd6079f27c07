#include "literal.h"

#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "float8.h"

namespace torch_tpu::stablehlo::internal {
namespace {

struct FloatFormat {
  int exponent_bits;
  int mantissa_bits;
};

FloatFormat FormatOf(ElementType type) {
  switch (type) {
    case ElementType::kBF16: return {8, 7};
    case ElementType::kF16: return {5, 10};
    case ElementType::kF32: return {8, 23};
    default: return {11, 52};
  }
}

[[noreturn]] void Fail(std::string_view op, const std::string& what) {
  throw BuilderError(std::string(op) + ": " + what);
}

// Ties-to-even rounding written out so the result does not depend on the floating-point
// environment's current rounding mode.
double RoundHalfEven(double x) {
  double floor = std::floor(x);
  double diff = x - floor;
  if (diff > 0.5) return floor + 1;
  if (diff < 0.5) return floor;
  return std::fmod(floor, 2.0) == 0 ? floor : floor + 1;
}

std::string Hex(uint64_t bits, int total_bits) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "0x%0*llX", total_bits / 4,
                static_cast<unsigned long long>(bits));
  return buffer;
}

// MLIR only lexes a float literal when it contains a '.', so "1e+20" must become "1.0e+20".
std::string DecimalLiteral(double value) {
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, result.ptr);
  if (text.find('.') == std::string::npos) {
    size_t e = text.find('e');
    if (e == std::string::npos) {
      text += ".0";
    } else {
      text.insert(e, ".0");
    }
  }
  return text;
}

// Decimal when that is exact and unambiguous, hex bit pattern otherwise. The decimal text is the
// shortest one that round-trips through double; since the double holds exactly the rounded
// target value, MLIR's double-then-convert parsing reproduces the same bits.
std::string FloatLiteral(uint64_t bits, FloatFormat format) {
  int total_bits = 1 + format.exponent_bits + format.mantissa_bits;
  uint64_t mantissa = bits & ((uint64_t{1} << format.mantissa_bits) - 1);
  uint64_t exponent = (bits >> format.mantissa_bits) & ((uint64_t{1} << format.exponent_bits) - 1);
  bool negative = (bits >> (total_bits - 1)) & 1;
  uint64_t exponent_all_ones = (uint64_t{1} << format.exponent_bits) - 1;
  bool zero = exponent == 0 && mantissa == 0;
  if (exponent == exponent_all_ones || (zero && negative)) return Hex(bits, total_bits);
  int bias = (1 << (format.exponent_bits - 1)) - 1;
  double magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa), 1 - bias - format.mantissa_bits);
  } else {
    double significand = static_cast<double>((uint64_t{1} << format.mantissa_bits) | mantissa);
    magnitude = std::ldexp(significand, static_cast<int>(exponent) - bias - format.mantissa_bits);
  }
  return DecimalLiteral(negative ? -magnitude : magnitude);
}

std::string IntegerLiteral(ElementType type, int64_t value, std::string_view op) {
  int bits = BitWidth(type);
  if (IsSignedInteger(type)) {
    if (bits < 64) {
      int64_t limit = int64_t{1} << (bits - 1);
      if (value < -limit || value >= limit) {
        Fail(op, "value " + std::to_string(value) + " is out of range for " +
                     std::string(MlirName(type)));
      }
    }
    return std::to_string(value);
  }
  if (value < 0) {
    Fail(op, "negative value " + std::to_string(value) + " for unsigned type " +
                 std::string(MlirName(type)));
  }
  return FormatUnsignedElement(type, static_cast<uint64_t>(value), op);
}

}  // namespace

uint64_t RoundToFloatBits(double value, int exponent_bits, int mantissa_bits) {
  uint64_t sign = std::signbit(value) ? uint64_t{1} << (exponent_bits + mantissa_bits) : 0;
  uint64_t exponent_all_ones = ((uint64_t{1} << exponent_bits) - 1) << mantissa_bits;
  if (std::isnan(value)) return sign | exponent_all_ones | (uint64_t{1} << (mantissa_bits - 1));
  double magnitude = std::fabs(value);
  if (std::isinf(magnitude)) return sign | exponent_all_ones;
  if (magnitude == 0) return sign;
  int bias = (1 << (exponent_bits - 1)) - 1;
  int min_exponent = 1 - bias;
  int binary_exponent;
  std::frexp(magnitude, &binary_exponent);
  int exponent = binary_exponent - 1;  // magnitude is in [2^exponent, 2^(exponent + 1))
  if (exponent < min_exponent) exponent = min_exponent;  // subnormal range: fixed quantum
  // Scaling by a power of two is exact, so the only rounding happens here.
  double significand = RoundHalfEven(std::ldexp(magnitude, mantissa_bits - exponent));
  double hidden_bit = std::ldexp(1.0, mantissa_bits);
  if (significand >= 2 * hidden_bit) {  // rounded up into the next binade
    significand /= 2;
    ++exponent;
  }
  if (exponent > bias) return sign | exponent_all_ones;  // overflow rounds to infinity
  auto integer_significand = static_cast<uint64_t>(significand);
  if (significand < hidden_bit) return sign | integer_significand;  // subnormal or zero
  uint64_t biased = static_cast<uint64_t>(exponent + bias) << mantissa_bits;
  return sign | biased | (integer_significand - (uint64_t{1} << mantissa_bits));
}

std::string FormatElement(ElementType type, double value, std::string_view op) {
  if (IsPred(type)) return value != 0 ? "true" : "false";
  if (IsComplex(type)) {
    // A real number is the complex number with a zero imaginary part.
    const ElementType part = ComplexPartType(type);
    return "(" + FormatElement(part, value, op) + ", " + FormatElement(part, 0.0, op) + ")";
  }
  if (IsFloat8(type)) {
    // PyTorch converts a double to float8 through float32 (two roundings), as the device does.
    const auto float_bits = std::bit_cast<uint32_t>(static_cast<float>(value));
    return Hex(Float8FromFloatBits(float_bits, type), 8);
  }
  if (IsFloat(type)) {
    if (type == ElementType::kF64) return FloatLiteral(std::bit_cast<uint64_t>(value), {11, 52});
    FloatFormat format = FormatOf(type);
    return FloatLiteral(RoundToFloatBits(value, format.exponent_bits, format.mantissa_bits),
                        format);
  }
  if (!std::isfinite(value) || std::trunc(value) != value) {
    Fail(op, "value " + DecimalLiteral(value) + " is not an integer, but the element type is " +
                 std::string(MlirName(type)));
  }
  int bits = BitWidth(type);
  if (IsSignedInteger(type)) {
    double limit = std::ldexp(1.0, bits - 1);
    if (value < -limit || value >= limit) {
      Fail(op, "value " + DecimalLiteral(value) + " is out of range for " +
                   std::string(MlirName(type)));
    }
    return IntegerLiteral(type, static_cast<int64_t>(value), op);
  }
  if (value < 0 || value >= std::ldexp(1.0, bits)) {
    Fail(op, "value " + DecimalLiteral(value) + " is out of range for " +
                 std::string(MlirName(type)));
  }
  return FormatUnsignedElement(type, static_cast<uint64_t>(value), op);
}

std::string FormatElement(ElementType type, int64_t value, std::string_view op) {
  if (IsPred(type)) return value != 0 ? "true" : "false";
  if (IsFloat(type) || IsComplex(type)) {
    return FormatElement(type, static_cast<double>(value), op);
  }
  return IntegerLiteral(type, value, op);
}

std::string FormatUnsignedElement(ElementType type, uint64_t value, std::string_view op) {
  if (IsPred(type)) return value != 0 ? "true" : "false";
  if (IsFloat(type) || IsComplex(type)) {
    return FormatElement(type, static_cast<double>(value), op);
  }
  int bits = BitWidth(type);
  if (IsSignedInteger(type)) {
    if (value > (uint64_t{1} << (bits - 1)) - 1) {
      Fail(op, "value " + std::to_string(value) + " is out of range for " +
                   std::string(MlirName(type)));
    }
    return std::to_string(value);
  }
  if (bits < 64 && value >= (uint64_t{1} << bits)) {
    Fail(op, "value " + std::to_string(value) + " is out of range for " +
                 std::string(MlirName(type)));
  }
  return std::to_string(value);
}

}  // namespace torch_tpu::stablehlo::internal

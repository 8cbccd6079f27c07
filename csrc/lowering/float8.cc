#include "lowering/float8.h"

#include <bit>
#include <cmath>

#include "stablehlo/float8.h"

namespace torch_tpu::lowering {
namespace {

using stablehlo::ElementType;
using stablehlo::Float8Format;
using stablehlo::FunctionBuilder;
using stablehlo::Value;
using Direction = FunctionBuilder::ComparisonDirection;

Value U32(FunctionBuilder& b, uint64_t value, const Value& like) {
  return b.ConstantUnsigned(ElementType::kU32, value, like.dims());
}

Value F32(FunctionBuilder& b, double value, const Value& like) {
  return b.Constant(ElementType::kF32, value, like.dims());
}

}  // namespace

Value Float8FromFloat32(FunctionBuilder& b, Value value, ElementType target) {
  const Float8Format format = stablehlo::Float8FormatOf(target);
  const Value bits = b.BitcastConvert(value, ElementType::kU32);
  const Value sign = b.ShiftRightLogical(bits, U32(b, 31, bits));
  const Value magnitude = b.And(bits, U32(b, 0x7FFFFFFF, bits));
  const int shift = 23 - format.mantissa_bits;
  // Normal range: rebias the exponent and round the dropped mantissa bits to nearest even. For
  // magnitudes below the smallest normal the subtraction wraps, but then `subnormal` is chosen.
  const Value rebiased =
      b.Subtract(magnitude, U32(b, static_cast<uint64_t>(127 - format.bias) << 23, bits));
  const Value odd = b.And(b.ShiftRightLogical(magnitude, U32(b, shift, bits)), U32(b, 1, bits));
  const Value normal = b.ShiftRightLogical(
      b.Add(b.Add(rebiased, U32(b, (uint64_t{1} << (shift - 1)) - 1, bits)), odd),
      U32(b, shift, bits));
  // Subnormal range: a count of the smallest subnormal; scaling by a power of two is exact.
  const Value scaled = b.Multiply(b.BitcastConvert(magnitude, ElementType::kF32),
                                  F32(b, std::ldexp(1.0, format.bias - 1 + format.mantissa_bits),
                                      bits));
  // Magnitudes that take this branch give at most 2^mantissa_bits, so the conversion is exact.
  const Value subnormal = b.Convert(
      b.RoundNearestEven(b.Minimum(scaled, F32(b, 256.0, bits))), ElementType::kU32);
  const Value min_normal = U32(b, static_cast<uint64_t>(128 - format.bias) << 23, bits);
  Value code = b.Select(b.Compare(magnitude, min_normal, Direction::kGe), normal, subnormal);
  const Value overflows = b.Compare(code, U32(b, format.max_finite_code, bits), Direction::kGt);
  const Value is_nan = b.Compare(magnitude, U32(b, 0x7F800000, bits), Direction::kGt);
  const Value sign_bit = b.ShiftLeft(sign, U32(b, 7, bits));
  if (format.fnuz) {
    // One NaN (0x80) for NaN and overflow; zero has no sign.
    const Value nan = b.Or(is_nan, overflows);
    const Value is_zero = b.Compare(code, U32(b, 0, bits), Direction::kEq);
    code = b.Select(is_zero, code, b.Or(code, sign_bit));
    code = b.Select(nan, U32(b, 0x80, bits), code);
  } else {
    const uint64_t overflow_code = format.overflow == Float8Format::Overflow::kSaturate
                                       ? format.max_finite_code
                                       : format.max_finite_code + 1;  // infinity
    code = b.Select(overflows, U32(b, overflow_code, bits), code);
    code = b.Select(is_nan, U32(b, 0x7F, bits), code);
    code = b.Or(code, sign_bit);  // NaN keeps its sign, as PyTorch's conversion does
  }
  return b.BitcastConvert(b.Convert(code, ElementType::kU8), target);
}

Value Float32FromFloat8(FunctionBuilder& b, Value value) {
  const Float8Format format = stablehlo::Float8FormatOf(value.element_type());
  const Value code = b.Convert(b.BitcastConvert(value, ElementType::kU8), ElementType::kU32);
  const int shift = 23 - format.mantissa_bits;
  const Value sign = b.ShiftLeft(b.ShiftRightLogical(code, U32(b, 7, code)), U32(b, 31, code));
  const Value exponent =
      b.And(b.ShiftRightLogical(code, U32(b, format.mantissa_bits, code)),
            U32(b, (uint64_t{1} << format.exponent_bits) - 1, code));
  const Value mantissa = b.And(code, U32(b, (uint64_t{1} << format.mantissa_bits) - 1, code));
  const Value shifted_mantissa = b.ShiftLeft(mantissa, U32(b, shift, code));
  const Value normal = b.Or(
      sign, b.Or(b.ShiftLeft(b.Add(exponent, U32(b, 127 - format.bias, code)), U32(b, 23, code)),
                 shifted_mantissa));
  // Subnormals: mantissa times the smallest subnormal, exact in float32.
  const Value subnormal_value =
      b.Multiply(b.Convert(mantissa, ElementType::kF32),
                 F32(b, std::ldexp(1.0, 1 - format.bias - format.mantissa_bits), code));
  const Value subnormal = b.Or(sign, b.BitcastConvert(subnormal_value, ElementType::kU32));
  Value bits =
      b.Select(b.Compare(exponent, U32(b, 0, code), Direction::kEq), subnormal, normal);
  if (format.fnuz) {
    bits = b.Select(b.Compare(code, U32(b, 0x80, code), Direction::kEq),
                    U32(b, stablehlo::FloatBitsFromFloat8(0x80, value.element_type()), code),
                    bits);
  } else {
    const Value magnitude = b.And(code, U32(b, 0x7F, code));
    const Value special = b.Compare(magnitude, U32(b, format.max_finite_code, code), Direction::kGt);
    // A quiet NaN keeping the payload bits, as PyTorch's conversion gives.
    Value special_bits = b.Or(sign, b.Or(U32(b, 0x7FC00000, code), shifted_mantissa));
    if (format.overflow == Float8Format::Overflow::kInfinity) {
      special_bits = b.Select(b.Compare(mantissa, U32(b, 0, code), Direction::kEq),
                              b.Or(sign, U32(b, 0x7F800000, code)), special_bits);
    }
    bits = b.Select(special, special_bits, bits);
  }
  return b.BitcastConvert(bits, ElementType::kF32);
}

}  // namespace torch_tpu::lowering

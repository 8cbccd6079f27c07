#include "lowering/dtype.h"

#include <c10/core/DefaultDtype.h>
#include <c10/util/Exception.h>

namespace torch_tpu::lowering {

using stablehlo::ElementType;

std::optional<ElementType> ToElementType(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kBool: return ElementType::kPred;
    case c10::kChar: return ElementType::kS8;
    case c10::kShort: return ElementType::kS16;
    case c10::kInt: return ElementType::kS32;
    case c10::kLong: return ElementType::kS64;
    case c10::kByte: return ElementType::kU8;
    case c10::kUInt16: return ElementType::kU16;
    case c10::kUInt32: return ElementType::kU32;
    case c10::kUInt64: return ElementType::kU64;
    case c10::kBFloat16: return ElementType::kBF16;
    case c10::kHalf: return ElementType::kF16;
    case c10::kFloat: return ElementType::kF32;
    case c10::kDouble: return ElementType::kF64;
    case c10::kComplexFloat: return ElementType::kC64;
    case c10::kComplexDouble: return ElementType::kC128;
    case c10::kFloat8_e4m3fn: return ElementType::kF8E4M3FN;
    case c10::kFloat8_e5m2: return ElementType::kF8E5M2;
    case c10::kFloat8_e4m3fnuz: return ElementType::kF8E4M3FNUZ;
    case c10::kFloat8_e5m2fnuz: return ElementType::kF8E5M2FNUZ;
    default: return std::nullopt;
  }
}

ElementType ToElementTypeOrThrow(c10::ScalarType dtype, const char* op) {
  auto type = ToElementType(dtype);
  TORCH_CHECK_TYPE(type.has_value(), op, ": dtype ", dtype,
                   " is not supported on the tpu device");
  return *type;
}

c10::ScalarType ToScalarType(ElementType type) {
  switch (type) {
    case ElementType::kPred: return c10::kBool;
    case ElementType::kS8: return c10::kChar;
    case ElementType::kS16: return c10::kShort;
    case ElementType::kS32: return c10::kInt;
    case ElementType::kS64: return c10::kLong;
    case ElementType::kU8: return c10::kByte;
    case ElementType::kU16: return c10::kUInt16;
    case ElementType::kU32: return c10::kUInt32;
    case ElementType::kU64: return c10::kUInt64;
    case ElementType::kBF16: return c10::kBFloat16;
    case ElementType::kF16: return c10::kHalf;
    case ElementType::kF32: return c10::kFloat;
    case ElementType::kF64: return c10::kDouble;
    case ElementType::kC64: return c10::kComplexFloat;
    case ElementType::kC128: return c10::kComplexDouble;
    case ElementType::kF8E4M3FN: return c10::kFloat8_e4m3fn;
    case ElementType::kF8E5M2: return c10::kFloat8_e5m2;
    case ElementType::kF8E4M3FNUZ: return c10::kFloat8_e4m3fnuz;
    case ElementType::kF8E5M2FNUZ: return c10::kFloat8_e5m2fnuz;
  }
  return c10::kFloat;
}

namespace {

// A Python number only decides the dtype within its own category when no tensor is of that
// category or higher; a float number with integer tensors gives the default float dtype.
c10::ScalarType WrappedNumberDtype(c10::ScalarType dtype) {
  if (c10::isFloatingType(dtype)) return c10::get_default_dtype_as_scalartype();
  if (c10::isComplexType(dtype)) return c10::toComplexType(c10::get_default_dtype_as_scalartype());
  return dtype;
}

c10::ScalarType Combine(c10::ScalarType higher, c10::ScalarType lower) {
  if (higher == c10::ScalarType::Undefined) return lower;
  if (lower == c10::ScalarType::Undefined) return higher;
  return c10::promoteTypes(higher, lower);
}

int CategoryRank(c10::ScalarType dtype) {
  if (dtype == c10::kBool) return 0;
  if (c10::isIntegralType(dtype, /*includeBool=*/false)) return 1;
  if (c10::isFloatingType(dtype)) return 2;
  return 3;  // complex
}

}  // namespace

c10::ScalarType ResultType(std::span<const PromotionInput> inputs) {
  c10::ScalarType dimensioned = c10::ScalarType::Undefined;
  c10::ScalarType zero_dim = c10::ScalarType::Undefined;
  c10::ScalarType wrapped = c10::ScalarType::Undefined;
  for (const PromotionInput& input : inputs) {
    switch (input.category) {
      case PromotionInput::Category::kDimensioned:
        dimensioned = Combine(dimensioned, input.dtype);
        break;
      case PromotionInput::Category::kZeroDim:
        zero_dim = Combine(zero_dim, input.dtype);
        break;
      case PromotionInput::Category::kWrappedNumber:
        wrapped = Combine(wrapped, WrappedNumberDtype(input.dtype));
        break;
    }
  }
  // Lower-priority participants only matter when they are of a higher category.
  auto merge = [](c10::ScalarType high, c10::ScalarType low) {
    if (high == c10::ScalarType::Undefined) return low;
    if (low == c10::ScalarType::Undefined) return high;
    return CategoryRank(low) > CategoryRank(high) ? c10::promoteTypes(high, low) : high;
  };
  return merge(merge(dimensioned, zero_dim), wrapped);
}

}  // namespace torch_tpu::lowering

#include "element_type.h"

namespace torch_tpu::stablehlo {

std::string_view MlirName(ElementType type) {
  switch (type) {
    case ElementType::kPred: return "i1";
    case ElementType::kS8: return "i8";
    case ElementType::kS16: return "i16";
    case ElementType::kS32: return "i32";
    case ElementType::kS64: return "i64";
    case ElementType::kU8: return "ui8";
    case ElementType::kU16: return "ui16";
    case ElementType::kU32: return "ui32";
    case ElementType::kU64: return "ui64";
    case ElementType::kBF16: return "bf16";
    case ElementType::kF16: return "f16";
    case ElementType::kF32: return "f32";
    case ElementType::kF64: return "f64";
    case ElementType::kC64: return "complex<f32>";
    case ElementType::kC128: return "complex<f64>";
    case ElementType::kF8E4M3FN: return "f8E4M3FN";
    case ElementType::kF8E5M2: return "f8E5M2";
    case ElementType::kF8E4M3FNUZ: return "f8E4M3FNUZ";
    case ElementType::kF8E5M2FNUZ: return "f8E5M2FNUZ";
  }
  // Only reachable through a cast of an out-of-range integer to ElementType.
  throw BuilderError("MlirName: invalid ElementType value " +
                     std::to_string(static_cast<int>(type)));
}

int ByteWidth(ElementType type) {
  switch (type) {
    case ElementType::kPred:
    case ElementType::kS8:
    case ElementType::kU8:
    case ElementType::kF8E4M3FN:
    case ElementType::kF8E5M2:
    case ElementType::kF8E4M3FNUZ:
    case ElementType::kF8E5M2FNUZ: return 1;
    case ElementType::kS16:
    case ElementType::kU16:
    case ElementType::kBF16:
    case ElementType::kF16: return 2;
    case ElementType::kS32:
    case ElementType::kU32:
    case ElementType::kF32: return 4;
    case ElementType::kS64:
    case ElementType::kU64:
    case ElementType::kF64:
    case ElementType::kC64: return 8;
    case ElementType::kC128: return 16;
  }
  throw BuilderError("ByteWidth: invalid ElementType value " +
                     std::to_string(static_cast<int>(type)));
}

int BitWidth(ElementType type) { return type == ElementType::kPred ? 1 : 8 * ByteWidth(type); }

bool IsFloat(ElementType type) {
  return type == ElementType::kBF16 || type == ElementType::kF16 || type == ElementType::kF32 ||
         type == ElementType::kF64 || IsFloat8(type);
}

bool IsFloat8(ElementType type) {
  return type == ElementType::kF8E4M3FN || type == ElementType::kF8E5M2 ||
         type == ElementType::kF8E4M3FNUZ || type == ElementType::kF8E5M2FNUZ;
}

bool IsComplex(ElementType type) {
  return type == ElementType::kC64 || type == ElementType::kC128;
}

ElementType ComplexPartType(ElementType type) {
  if (type == ElementType::kC64) return ElementType::kF32;
  if (type == ElementType::kC128) return ElementType::kF64;
  throw BuilderError("ComplexPartType: " + std::string(MlirName(type)) + " is not complex");
}

ElementType ComplexTypeOf(ElementType part_type) {
  if (part_type == ElementType::kF32) return ElementType::kC64;
  if (part_type == ElementType::kF64) return ElementType::kC128;
  throw BuilderError("ComplexTypeOf: complex<" + std::string(MlirName(part_type)) +
                     "> is not supported (parts must be f32 or f64)");
}

bool IsSignedInteger(ElementType type) {
  return type == ElementType::kS8 || type == ElementType::kS16 || type == ElementType::kS32 ||
         type == ElementType::kS64;
}

bool IsUnsignedInteger(ElementType type) {
  return type == ElementType::kU8 || type == ElementType::kU16 || type == ElementType::kU32 ||
         type == ElementType::kU64;
}

bool IsInteger(ElementType type) { return IsSignedInteger(type) || IsUnsignedInteger(type); }

bool IsPred(ElementType type) { return type == ElementType::kPred; }

}  // namespace torch_tpu::stablehlo

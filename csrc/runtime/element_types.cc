#include "runtime/element_types.h"

namespace torch_tpu::runtime {

PJRT_Buffer_Type ToPjrtType(stablehlo::ElementType type) {
  using stablehlo::ElementType;
  switch (type) {
    case ElementType::kPred:
      return PJRT_Buffer_Type_PRED;
    case ElementType::kS8:
      return PJRT_Buffer_Type_S8;
    case ElementType::kS16:
      return PJRT_Buffer_Type_S16;
    case ElementType::kS32:
      return PJRT_Buffer_Type_S32;
    case ElementType::kS64:
      return PJRT_Buffer_Type_S64;
    case ElementType::kU8:
      return PJRT_Buffer_Type_U8;
    case ElementType::kU16:
      return PJRT_Buffer_Type_U16;
    case ElementType::kU32:
      return PJRT_Buffer_Type_U32;
    case ElementType::kU64:
      return PJRT_Buffer_Type_U64;
    case ElementType::kBF16:
      return PJRT_Buffer_Type_BF16;
    case ElementType::kF16:
      return PJRT_Buffer_Type_F16;
    case ElementType::kF32:
      return PJRT_Buffer_Type_F32;
    case ElementType::kF64:
      return PJRT_Buffer_Type_F64;
    case ElementType::kC64:
      return PJRT_Buffer_Type_C64;
    case ElementType::kC128:
      return PJRT_Buffer_Type_C128;
    case ElementType::kF8E4M3FN:
      return PJRT_Buffer_Type_F8E4M3FN;
    case ElementType::kF8E5M2:
      return PJRT_Buffer_Type_F8E5M2;
    case ElementType::kF8E4M3FNUZ:
      return PJRT_Buffer_Type_F8E4M3FNUZ;
    case ElementType::kF8E5M2FNUZ:
      return PJRT_Buffer_Type_F8E5M2FNUZ;
  }
  return PJRT_Buffer_Type_INVALID;
}

}  // namespace torch_tpu::runtime

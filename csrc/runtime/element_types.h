// StableHLO element type <-> PJRT buffer type.
#pragma once

#include "pjrt_c_api.h"
#include "stablehlo/element_type.h"

namespace torch_tpu::runtime {

PJRT_Buffer_Type ToPjrtType(stablehlo::ElementType type);

}  // namespace torch_tpu::runtime

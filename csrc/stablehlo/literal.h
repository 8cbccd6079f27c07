// Internal: formatting of dense-elements literals so that they parse back bit-exactly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "element_type.h"

namespace torch_tpu::stablehlo::internal {

// Rounds `value` to the nearest (ties to even) number of an IEEE-style binary format with the
// given field widths and returns its bit pattern. Handles subnormals, overflow to infinity and
// NaN (canonical quiet NaN with the input's sign).
uint64_t RoundToFloatBits(double value, int exponent_bits, int mantissa_bits);

// One element of a dense<...> literal of `type`. `op` names the caller in error messages.
// Integer types require an integral in-range value; pred maps 0 to false and the rest to true.
std::string FormatElement(ElementType type, double value, std::string_view op);
std::string FormatElement(ElementType type, int64_t value, std::string_view op);
std::string FormatUnsignedElement(ElementType type, uint64_t value, std::string_view op);

}  // namespace torch_tpu::stablehlo::internal

// Python numbers that CPU kernels convert to the dtype they compute in with c10's overflow check
// (`Scalar::to<T>`: "value cannot be converted to type int8_t without overflow"): fill values,
// masked_fill/index_fill values, clamp bounds, where's scalar branch, add/sub alpha. Lowerings take
// them as runtime arguments (a new value never recompiles), so the check runs at the call, on the
// value, before anything is written.
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace torch_tpu::aten {

struct ScalarConversion {
  size_t scalar;                 // index of the Scalar argument
  std::vector<size_t> operands;  // arguments whose result type is the dtype it converts to
  bool alpha = false;            // add/sub alpha, whose dtype CPU checks first
  bool negated = false;          // sub/rsub: -alpha must fit
  bool half_types_round = false;  // where: half and bfloat16 results are not checked
};

// The conversions of the op whose functional form is `functional_name` (none for most ops).
std::vector<ScalarConversion> ScalarConversionsOf(const std::string& functional_name,
                                                  const c10::FunctionSchema& schema);

// Raises CPU's error for a scalar in `arguments` that overflows its dtype.
void CheckScalarConversions(const std::vector<ScalarConversion>& conversions,
                            const std::vector<c10::IValue>& arguments);

}  // namespace torch_tpu::aten

// Counted loops over stablehlo.while: the shape iterative factorizations (LU, QR, Jacobi sweeps)
// take, with the trip counter kept out of the caller's carried values.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "builder.h"

namespace torch_tpu::stablehlo {

// One trip of a counted loop: gets the trip index (an s32 scalar) and the carried values, returns
// the next carried values (same types).
using ForLoopBody = std::function<std::vector<Value>(FunctionBuilder& body, Value index,
                                                     std::span<const Value> carried)>;

// for (index = start; index < limit; ++index) carried = body(index, carried); returns the final
// carried values. No trip (start >= limit) emits no loop. The body is built once, on the loop's
// region builder.
std::vector<Value> ForLoop(FunctionBuilder& builder, int64_t start, int64_t limit,
                           std::vector<Value> carried, const ForLoopBody& body);

}  // namespace torch_tpu::stablehlo

// Householder QR pieces (defined in linalg_qr.cc) that other decompositions build on: the SVD
// completes its left singular vectors to an orthonormal basis with them.
#pragma once

#include <cstdint>
#include <utility>

#include "stablehlo/builder.h"

namespace torch_tpu::lowering::linalg {

// geqrf of [B, m, n]: packed reflectors and R, and tau [B, min(m, n)] (LAPACK's conventions).
std::pair<stablehlo::Value, stablehlo::Value> Geqrf(stablehlo::FunctionBuilder& b,
                                                     stablehlo::Value a);
// Q = H_0 ... H_{k-1} restricted to its first `columns` columns: [B, m, columns].
stablehlo::Value HouseholderProduct(stablehlo::FunctionBuilder& b, stablehlo::Value reflectors,
                                    stablehlo::Value taus, int64_t columns);

}  // namespace torch_tpu::lowering::linalg

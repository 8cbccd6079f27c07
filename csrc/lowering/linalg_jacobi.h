// One-sided Jacobi (defined in linalg_eigh.cc), shared by the SVD and the least-squares solver:
// A V = W with V orthogonal and the columns of W orthogonal, their norms the singular values.
#pragma once

#include <utility>

#include "stablehlo/builder.h"

namespace torch_tpu::lowering::linalg {

// Rotates the column pairs of w [B, m, n] (m >= n) until they are orthogonal, accumulating the
// rotations in v [B, n, n]. Returns (w, v).
std::pair<stablehlo::Value, stablehlo::Value> OneSidedJacobi(stablehlo::FunctionBuilder& b,
                                                             stablehlo::Value w);

}  // namespace torch_tpu::lowering::linalg

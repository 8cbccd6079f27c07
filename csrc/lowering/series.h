// Polynomial evaluation shared by the special-function lowerings.
#pragma once

#include <span>

#include "lowering/context.h"

namespace torch_tpu::lowering {

// c[0] z^(n-1) + ... + c[n-1] by Horner's rule (highest power first, Cephes' polevl order);
// `reversed` reads the coefficients lowest power first.
inline Value Horner(FunctionBuilder& b, Value z, std::span<const double> c, bool reversed = false) {
  const size_t n = c.size();
  Value sum = FullLike(b, c[reversed ? n - 1 : 0], z);
  for (size_t i = 1; i < n; ++i) {
    sum = b.Add(b.Multiply(sum, z), FullLike(b, c[reversed ? n - 1 - i : i], z));
  }
  return sum;
}

}  // namespace torch_tpu::lowering

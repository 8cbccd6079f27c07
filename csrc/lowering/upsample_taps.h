// Where each output position of a separable resampling (F.interpolate and its anti-aliased
// variants) reads its input along one dim, and with which weights, computed on the host with
// CPU's formulas so the programs see them as constants.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace torch_tpu::lowering {

enum class ResampleMode {
  kNearest,
  kNearestExact,
  kLinear,
  kCubic,
  kLinearAntialias,
  kCubicAntialias,
};

// Output o along the dim is sum_k weights[k][o] * input[index[k][o]]: one tap for the nearest
// modes, two for linear, four for cubic, and as many as the widest support for anti-aliasing
// (with zero weights where an output's support is narrower).
struct Taps {
  std::vector<std::vector<int64_t>> index;
  std::vector<std::vector<double>> weights;
};

// The nearest modes copy one input position per output: no weights, and no align_corners argument
// in their schemas.
bool IsNearest(ResampleMode mode);

// The taps of `in` input positions resampled to `out`, with the caller's scale factor (if any),
// computed in the kernel's opmath type for `dtype` (double for double inputs, float otherwise) so
// the weights round as on CPU.
Taps ResampleTaps(ResampleMode mode, c10::ScalarType dtype, int64_t in, int64_t out,
                  bool align_corners, std::optional<double> scale);

// CPU's uint8 kernels resample one dim at a time in integers: the weights (computed in double) are
// scaled by 2^precision and rounded, each output is the rounded, clamped
// (sum of weight * input + 2^(precision - 1)) >> precision. precision is the largest that keeps
// the dim's largest weight within int16.
struct FixedPointTaps {
  Taps taps;  // weights are the integers
  int precision = 0;
};
FixedPointTaps ResampleTapsUint8(ResampleMode mode, int64_t in, int64_t out, bool align_corners,
                                 std::optional<double> scale);

}  // namespace torch_tpu::lowering

// CPU's index and weight formulas for F.interpolate (aten/src/ATen/native/UpSample.h and the
// separable anti-aliasing kernel), one dim at a time.
#include "lowering/upsample_taps.h"

#include <algorithm>
#include <cmath>

namespace torch_tpu::lowering {
namespace {

// CPU's compute_scales_value: 1 / scale_factor when the caller passed one, else in / out.
template <typename T>
T ScaleOf(std::optional<double> scale, int64_t in, int64_t out) {
  return scale.has_value() && *scale > 0.0 ? static_cast<T>(1.0 / *scale)
                                           : static_cast<T>(in) / static_cast<T>(out);
}

// CPU's area_pixel_compute_scale: with align_corners the corner pixels' centres map onto each
// other, otherwise the scale factor (or the size ratio) applies.
template <typename T>
T AreaPixelScale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) {
    return out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0);
  }
  return ScaleOf<T>(scale, in, out);
}

// PyTorch's nearest_idx / nearest_exact_idx: float arithmetic with floorf, clamped to the last
// input position.
Taps NearestTaps(ResampleMode mode, int64_t in, int64_t out, std::optional<double> scale) {
  Taps taps{{std::vector<int64_t>(out)}, {std::vector<double>(out, 1.0)}};
  const float ratio = ScaleOf<float>(scale, in, out);
  for (int64_t o = 0; o < out; ++o) {
    int64_t source;
    if (mode == ResampleMode::kNearestExact) {
      source = static_cast<int64_t>(
          std::floor(static_cast<float>((static_cast<double>(o) + 0.5) * ratio)));
    } else if (out == in) {
      source = o;
    } else if (out == 2 * in) {
      source = o >> 1;
    } else {
      source = static_cast<int64_t>(std::floor(static_cast<float>(o) * ratio));
    }
    taps.index[0][o] = std::min(source, in - 1);
  }
  return taps;
}

// PyTorch's compute_source_index_and_lambda.
template <typename T>
Taps LinearTaps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  Taps taps{{std::vector<int64_t>(out), std::vector<int64_t>(out)},
            {std::vector<double>(out), std::vector<double>(out)}};
  const T ratio = AreaPixelScale<T>(in, out, align_corners, scale);
  for (int64_t o = 0; o < out; ++o) {
    int64_t first = o;
    T lambda = 0;
    if (in != out) {
      T source = align_corners
                     ? ratio * static_cast<T>(o)
                     : ratio * (static_cast<T>(o) + static_cast<T>(0.5)) - static_cast<T>(0.5);
      if (!align_corners && source < 0) source = 0;
      first = std::min(static_cast<int64_t>(std::floor(source)), in - 1);
      lambda = std::min(std::max(source - static_cast<T>(first), T(0)), T(1));
    }
    taps.index[0][o] = first;
    taps.index[1][o] = first + (first < in - 1 ? 1 : 0);
    taps.weights[0][o] = static_cast<double>(T(1) - lambda);
    taps.weights[1][o] = static_cast<double>(lambda);
  }
  return taps;
}

// Keys' cubic convolution kernel with parameter a, for |x| < 1 and 1 <= |x| < 2.
template <typename T>
T CubicNear(T x, T a) {
  return ((a + 2) * x - (a + 3)) * x * x + 1;
}
template <typename T>
T CubicFar(T x, T a) {
  return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
}

// PyTorch's bicubic taps: four neighbours around the source position (which, unlike linear, is
// not clamped at 0), their positions clamped into the input, with a = -0.75.
template <typename T>
Taps CubicTaps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  Taps taps{std::vector<std::vector<int64_t>>(4, std::vector<int64_t>(out)),
            std::vector<std::vector<double>>(4, std::vector<double>(out))};
  const T ratio = AreaPixelScale<T>(in, out, align_corners, scale);
  const T a = static_cast<T>(-0.75);
  for (int64_t o = 0; o < out; ++o) {
    const T source = align_corners
                         ? ratio * static_cast<T>(o)
                         : ratio * (static_cast<T>(o) + static_cast<T>(0.5)) - static_cast<T>(0.5);
    const int64_t first = std::min(static_cast<int64_t>(std::floor(source)), in - 1);
    const T t = std::min(std::max(source - static_cast<T>(first), T(0)), T(1));
    const T weights[4] = {CubicFar<T>(t + 1, a), CubicNear<T>(t, a), CubicNear<T>(1 - t, a),
                          CubicFar<T>(2 - t, a)};
    for (int k = 0; k < 4; ++k) {
      taps.index[k][o] = std::clamp<int64_t>(first - 1 + k, 0, in - 1);
      taps.weights[k][o] = static_cast<double>(weights[k]);
    }
  }
  return taps;
}

bool IsLinear(ResampleMode mode) {
  return mode == ResampleMode::kLinear || mode == ResampleMode::kLinearAntialias;
}

// The filters as functions of distance: the triangle, and Keys' cubic with a = -0.5 when
// anti-aliasing (as PIL) and -0.75 otherwise (as the float bicubic taps).
template <typename T>
T AntialiasFilter(ResampleMode mode, T x) {
  x = std::abs(x);
  if (IsLinear(mode)) return x < 1 ? 1 - x : T(0);
  const T a = static_cast<T>(mode == ResampleMode::kCubic ? -0.75 : -0.5);
  if (x < 1) return CubicNear<T>(x, a);
  if (x < 2) return CubicFar<T>(x, a);
  return T(0);
}

// CPU's separable anti-aliased taps: when downsampling by `ratio` the filter widens by it, so
// each output averages every input its support covers, with weights normalised to sum to 1.
template <typename T>
Taps AntialiasTaps(ResampleMode mode, int64_t in, int64_t out, bool align_corners,
                   std::optional<double> scale) {
  const T ratio = AreaPixelScale<T>(in, out, align_corners, scale);
  const T half_width = mode == ResampleMode::kLinearAntialias ? T(1) : T(2);
  const T support = ratio >= 1 ? half_width * ratio : half_width;
  const int64_t width = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  const T inverse_ratio = ratio >= 1 ? 1 / ratio : T(1);
  Taps taps{std::vector<std::vector<int64_t>>(width, std::vector<int64_t>(out)),
            std::vector<std::vector<double>>(width, std::vector<double>(out))};
  std::vector<T> weights(width);
  for (int64_t o = 0; o < out; ++o) {
    const T center = ratio * (static_cast<T>(o) + static_cast<T>(0.5));
    // Truncation, not floor, as on CPU (center - support + 0.5 may be negative).
    const int64_t first =
        std::max(static_cast<int64_t>(center - support + static_cast<T>(0.5)), int64_t{0});
    const int64_t count = std::clamp(
        std::min(static_cast<int64_t>(center + support + static_cast<T>(0.5)), in) - first,
        int64_t{0}, width);
    T total = 0;
    for (int64_t k = 0; k < count; ++k) {
      weights[k] = AntialiasFilter<T>(
          mode, (static_cast<T>(k + first) - center + static_cast<T>(0.5)) * inverse_ratio);
      total += weights[k];
    }
    for (int64_t k = 0; k < width; ++k) {
      // Taps past the support read the first one with weight 0.
      taps.index[k][o] = k < count ? first + k : std::min(first, in - 1);
      taps.weights[k][o] = k < count && total != 0 ? static_cast<double>(weights[k] / total) : 0.0;
    }
  }
  return taps;
}

template <typename T>
Taps WeightedTaps(ResampleMode mode, int64_t in, int64_t out, bool align_corners,
                  std::optional<double> scale) {
  switch (mode) {
    case ResampleMode::kLinear:
      return LinearTaps<T>(in, out, align_corners, scale);
    case ResampleMode::kCubic:
      return CubicTaps<T>(in, out, align_corners, scale);
    default:
      return AntialiasTaps<T>(mode, in, out, align_corners, scale);
  }
}

// CPU's uint8 taps without anti-aliasing (_compute_indices_min_size_weights): the float path's
// two or four taps, with the weights of taps outside the input folded onto the border taps.
// `largest` gets the largest weight, partial sums of folded weights included, as CPU's precision
// choice sees it.
Taps BorderFoldedTaps(ResampleMode mode, int64_t in, int64_t out, bool align_corners,
                      std::optional<double> scale, double& largest) {
  const bool cubic = mode == ResampleMode::kCubic;
  const int64_t width = cubic ? 4 : 2, half = width / 2;
  const double ratio = AreaPixelScale<double>(in, out, align_corners, scale);
  Taps taps{std::vector<std::vector<int64_t>>(width, std::vector<int64_t>(out)),
            std::vector<std::vector<double>>(width, std::vector<double>(out))};
  std::vector<double> weights(width);
  for (int64_t o = 0; o < out; ++o) {
    double source = align_corners ? ratio * o : ratio * (o + 0.5) - 0.5;
    if (!cubic && !align_corners && source < 0) source = 0;
    // floorf, as CPU calls it on the double.
    const int64_t center =
        std::min(static_cast<int64_t>(std::floor(static_cast<float>(source))), in - 1);
    const double lambda = std::min(std::max(source - static_cast<double>(center), 0.0), 1.0);
    const int64_t unbounded_first = center - half + 1;
    const int64_t first = std::max(unbounded_first, int64_t{0});
    const int64_t count = std::clamp(std::min(center + half + 1, in) - first, int64_t{0}, width);
    std::fill(weights.begin(), weights.end(), 0.0);
    int64_t slot = 0;
    for (int64_t k = 0; k < width; ++k) {
      const double w = AntialiasFilter<double>(mode, static_cast<double>(k + 1 - half) - lambda);
      if (unbounded_first + k <= 0) {
        slot = 0;
      } else if (unbounded_first + k >= in - 1) {
        slot = count - 1;
      }
      weights[slot] += w;
      largest = std::max(largest, weights[slot]);
      ++slot;
    }
    for (int64_t k = 0; k < width; ++k) {
      taps.index[k][o] = k < count ? first + k : std::min(first, in - 1);
      taps.weights[k][o] = k < count ? weights[k] : 0.0;
    }
  }
  return taps;
}

}  // namespace

FixedPointTaps ResampleTapsUint8(ResampleMode mode, int64_t in, int64_t out, bool align_corners,
                                 std::optional<double> scale) {
  FixedPointTaps result;
  double largest = 0;
  if (mode == ResampleMode::kLinear || mode == ResampleMode::kCubic) {
    result.taps = BorderFoldedTaps(mode, in, out, align_corners, scale, largest);
  } else {
    result.taps = AntialiasTaps<double>(mode, in, out, align_corners, scale);
    for (const auto& weights : result.taps.weights) {
      for (double w : weights) largest = std::max(largest, w);
    }
  }
  while (result.precision < 22 &&
         static_cast<int>(0.5 + largest * (1 << (result.precision + 1))) < (1 << 15)) {
    ++result.precision;
  }
  for (auto& weights : result.taps.weights) {
    for (double& w : weights) {
      const double scaled = w * (1 << result.precision);
      w = scaled < 0 ? static_cast<int>(-0.5 + scaled) : static_cast<int>(0.5 + scaled);
    }
  }
  return result;
}

bool IsNearest(ResampleMode mode) {
  return mode == ResampleMode::kNearest || mode == ResampleMode::kNearestExact;
}

Taps ResampleTaps(ResampleMode mode, c10::ScalarType dtype, int64_t in, int64_t out,
                  bool align_corners, std::optional<double> scale) {
  if (IsNearest(mode)) return NearestTaps(mode, in, out, scale);
  return dtype == c10::kDouble ? WeightedTaps<double>(mode, in, out, align_corners, scale)
                               : WeightedTaps<float>(mode, in, out, align_corners, scale);
}

}  // namespace torch_tpu::lowering

// grid_sampler_2d / grid_sampler_3d (F.grid_sample) and their backward. Unlike F.interpolate the
// sampled positions are data (the grid), so each interpolation tap is a gather: the input is laid
// out as rows [N * spatial positions, C] and every output position gathers one row per tap; the
// backward scatter-adds the weighted gradient rows back to the same positions.
#include <c10/util/Exception.h>

#include <optional>
#include <vector>

#include "lowering/context.h"
#include "lowering/dtype.h"
#include "lowering/gather_rows.h"

namespace torch_tpu::lowering {
namespace {

enum class Interpolation { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum class Padding { kZeros = 0, kBorder = 1, kReflection = 2 };

// Keys' cubic convolution parameter CPU's bicubic grid sampling uses.
constexpr double kCubicA = -0.75;

struct Sampling {
  Interpolation interpolation;
  Padding padding;
  bool align_corners;
  std::vector<int64_t> batch_and_grid;  // [N, grid spatial dims...]
  std::vector<int64_t> in_sizes;        // input spatial dims, outermost first
  int64_t channels;
};

// Elementwise arithmetic on same-shaped float tensors with scalar constants, which keeps the
// coordinate formulas below readable. CPU's vectorized 2-D kernel computes half-precision inputs
// in their own type, rounding after every operation; with `rounding` set, so does this.
class Arith {
 public:
  Arith(FunctionBuilder& b, ElementType type, std::vector<int64_t> dims,
        std::optional<ElementType> rounding)
      : b_(b), type_(type), dims_(std::move(dims)), rounding_(rounding) {}
  Value c(double v) const { return b_.Constant(type_, v, dims_); }
  Value Round(Value x) const {
    return rounding_ ? b_.Convert(b_.Convert(x, *rounding_), x.element_type()) : x;
  }
  Value Add(Value x, double v) const { return Round(b_.Add(x, c(v))); }
  Value Mul(Value x, double v) const { return Round(b_.Multiply(x, c(v))); }
  Value Plus(Value x, Value y) const { return Round(b_.Add(x, y)); }
  Value Minus(Value x, Value y) const { return Round(b_.Subtract(x, y)); }
  Value Times(Value x, Value y) const { return Round(b_.Multiply(x, y)); }
  Value Over(Value x, Value y) const { return Round(b_.Divide(x, y)); }
  Value Clip(Value x, double high) const { return b_.Clamp(c(0), x, c(high)); }
  Value Less(Value x, double v) const { return b_.Compare(x, c(v), Direction::kLt); }
  Value Select(Value pred, double on_true, double on_false) const {
    return b_.Select(pred, c(on_true), c(on_false));
  }
  FunctionBuilder& b() const { return b_; }
  const std::vector<int64_t>& dims() const { return dims_; }

 private:
  FunctionBuilder& b_;
  ElementType type_;
  std::vector<int64_t> dims_;
  std::optional<ElementType> rounding_;
};

// A coordinate and its derivative with respect to the grid value it came from.
struct Coordinate {
  Value value, grad;
};

// CPU's grid_sampler_unnormalize: [-1, 1] to pixel positions, corner centres or corner edges.
Coordinate Unnormalize(const Arith& a, Value coord, int64_t size, bool align_corners) {
  const double factor = align_corners ? (size - 1) / 2.0 : size / 2.0;
  Value value = a.Mul(a.Add(coord, 1), factor);
  return {align_corners ? value : a.Add(value, -0.5), a.c(factor)};
}

// CPU's clip_coordinates: into [0, size - 1], with zero derivative where clipped.
Coordinate Clip(const Arith& a, Coordinate x, int64_t size) {
  auto& b = a.b();
  Value inside = b.And(b.Compare(x.value, a.c(0), Direction::kGt),
                       b.Compare(x.value, a.c(size - 1), Direction::kLt));
  return {a.Clip(x.value, size - 1), b.Select(inside, x.grad, a.c(0))};
}

// CPU's reflect_coordinates: folds x into [low, low + twice_span / 2] by reflecting at the
// bounds; every reflection flips the derivative's sign.
Coordinate Reflect(const Arith& a, Coordinate x, double low, double twice_span) {
  auto& b = a.b();
  if (twice_span == 0) return {a.c(0), a.c(0)};
  Value shifted = a.Add(x.value, -low);
  Value distance = b.Abs(shifted);
  Value flips = b.Floor(a.Over(distance, a.c(twice_span)));
  Value extra = a.Minus(distance, a.Mul(flips, twice_span));
  Value reflected = a.Minus(a.c(twice_span), extra);
  Value once_more = b.Compare(extra, reflected, Direction::kGt);
  Value flipped = b.Xor(once_more, a.Less(shifted, 0));
  return {a.Add(b.Select(once_more, reflected, extra), low),
          b.Multiply(x.grad, a.Select(flipped, -1, 1))};
}

// CPU's compute_coordinates: the padding mode applied to a pixel position.
Coordinate ApplyPadding(const Arith& a, Coordinate x, int64_t size, const Sampling& s) {
  if (s.padding == Padding::kBorder) return Clip(a, x, size);
  if (s.padding == Padding::kReflection) {
    x = s.align_corners ? Reflect(a, x, 0, 2.0 * (size - 1)) : Reflect(a, x, -0.5, 2.0 * size);
    return Clip(a, x, size);
  }
  return x;
}

// One interpolation tap: integer positions per spatial dim, its weight (the product of one
// factor per dim), and the weight's derivative with respect to each dim's (unpadded-for-bicubic)
// source position.
struct Tap {
  std::vector<Value> position;
  Value weight;
  std::vector<Value> factors;
  std::vector<Value> weight_grad;
};

// The four cubic coefficients at fractional offset t and their derivatives in t.
std::pair<std::vector<Value>, std::vector<Value>> CubicCoefficients(const Arith& a, Value t) {
  auto& b = a.b();
  // near(x) = (A+2)x^3 - (A+3)x^2 + 1 and far(x) = Ax^3 - 5Ax^2 + 8Ax - 4A, in Horner form.
  auto poly = [&](Value x, std::vector<double> c) {
    Value r = a.c(c[0]);
    for (size_t i = 1; i < c.size(); ++i) {
      r = a.Times(r, x);
      if (c[i] != 0) r = a.Add(r, c[i]);
    }
    return r;
  };
  const double A = kCubicA;
  const std::vector<double> near = {A + 2, -(A + 3), 0, 1}, far = {A, -5 * A, 8 * A, -4 * A};
  const std::vector<double> near_grad = {3 * (A + 2), -2 * (A + 3), 0},
                            far_grad = {3 * A, -10 * A, 8 * A};
  Value t1 = a.Add(t, 1), one_minus = a.Minus(a.c(1), t), two_minus = a.Minus(a.c(2), t);
  return {{poly(t1, far), poly(t, near), poly(one_minus, near), poly(two_minus, far)},
          {poly(t1, far_grad), poly(t, near_grad), b.Negate(poly(one_minus, near_grad)),
           b.Negate(poly(two_minus, far_grad))}};
}

// The taps of every output position; `source` holds the source positions per spatial dim (after
// padding, except for bicubic, whose taps are padded one by one).
std::vector<Tap> TapsOf(const Arith& a, const Sampling& s, const std::vector<Coordinate>& source) {
  auto& b = a.b();
  const size_t spatial = source.size();
  std::vector<Tap> taps;
  if (s.interpolation == Interpolation::kNearest) {
    Tap tap{{}, a.c(1), {}, std::vector<Value>(spatial, a.c(0))};
    for (const Coordinate& x : source) tap.position.push_back(b.RoundNearestEven(x.value));
    taps.push_back(tap);
    return taps;
  }
  std::vector<Value> floor(spatial), frac(spatial);
  for (size_t d = 0; d < spatial; ++d) {
    floor[d] = b.Floor(source[d].value);
    frac[d] = a.Minus(source[d].value, floor[d]);
  }
  // Per dim and per offset along it: the position, its 1-D weight and that weight's derivative.
  std::vector<std::vector<Value>> position(spatial), weight(spatial), weight_grad(spatial);
  for (size_t d = 0; d < spatial; ++d) {
    if (s.interpolation == Interpolation::kBilinear) {
      position[d] = {floor[d], a.Add(floor[d], 1)};
      weight[d] = {a.Minus(a.c(1), frac[d]), frac[d]};
      weight_grad[d] = {a.c(-1), a.c(1)};
      continue;
    }
    std::tie(weight[d], weight_grad[d]) = CubicCoefficients(a, frac[d]);
    for (int k = 0; k < 4; ++k) {
      Coordinate unpadded{a.Add(floor[d], k - 1), a.c(0)};
      position[d].push_back(ApplyPadding(a, unpadded, s.in_sizes[d], s).value);
    }
  }
  const size_t per_dim = position[0].size();
  size_t count = 1;
  for (size_t d = 0; d < spatial; ++d) count *= per_dim;
  for (size_t t = 0; t < count; ++t) {
    Tap tap{std::vector<Value>(spatial), {}, {}, std::vector<Value>(spatial)};
    size_t rest = t;
    std::vector<size_t> offset(spatial);
    for (size_t d = spatial; d-- > 0;) {
      offset[d] = rest % per_dim;
      rest /= per_dim;
    }
    for (size_t d = 0; d < spatial; ++d) {
      tap.position[d] = position[d][offset[d]];
      tap.factors.push_back(weight[d][offset[d]]);
      tap.weight = d == 0 ? weight[d][offset[d]] : a.Times(tap.weight, weight[d][offset[d]]);
      Value grad = weight_grad[d][offset[d]];
      for (size_t e = 0; e < spatial; ++e) {
        if (e != d) grad = b.Multiply(grad, weight[e][offset[e]]);
      }
      tap.weight_grad[d] = grad;
    }
    taps.push_back(tap);
  }
  return taps;
}

// Row of each tap in the [N * spatial positions, C] layout (clamped in range) and whether the tap
// lies inside the input (taps outside read zero).
std::pair<Value, Value> RowsOf(const Arith& a, const Sampling& s, const Tap& tap) {
  auto& b = a.b();
  const std::vector<int64_t>& dims = a.dims();
  int64_t plane = 1;
  for (int64_t size : s.in_sizes) plane *= size;
  Value inside = b.Constant(ElementType::kPred, 1, dims);
  Value row = b.Multiply(b.Iota(TensorType{ElementType::kS64, dims}, 0),
                         b.ConstantInt(ElementType::kS64, plane, dims));
  int64_t stride = plane;
  for (size_t d = 0; d < s.in_sizes.size(); ++d) {
    const int64_t size = s.in_sizes[d];
    stride /= size;
    inside = b.And(inside, b.And(b.Compare(tap.position[d], a.c(0), Direction::kGe),
                                 a.Less(tap.position[d], static_cast<double>(size))));
    Value index = b.Convert(a.Clip(tap.position[d], size - 1), ElementType::kS64);
    row = b.Add(row, b.Multiply(index, b.ConstantInt(ElementType::kS64, stride, dims)));
  }
  return {row, inside};
}

// Reads the op's arguments and checks them as CPU's check_grid_sampler_common does.
Sampling ReadSampling(LoweringContext& context, const Operand& input, const Operand& grid,
                      std::span<const Operand> modes, size_t spatial) {
  const auto& in = input.value.dims();
  const auto& g = grid.value.dims();
  TORCH_CHECK(input.dtype == grid.dtype, context.op_name(),
              ": expected input and grid to have same dtype, but input has ", input.dtype,
              " and grid has ", grid.dtype);
  TORCH_CHECK(in.size() == spatial + 2 && g.size() == spatial + 2, context.op_name(), ": expected ",
              spatial + 2, "D input and grid with same number of dimensions, ",
              "but got input with sizes ", c10::IntArrayRef(in), " and grid with sizes ",
              c10::IntArrayRef(g));
  TORCH_CHECK(in[0] == g[0], context.op_name(),
              ": expected grid and input to have same batch size, but got input with sizes ",
              c10::IntArrayRef(in), " and grid with sizes ", c10::IntArrayRef(g));
  TORCH_CHECK(g.back() == static_cast<int64_t>(spatial), context.op_name(),
              ": expected grid to have size ", spatial,
              " in last dimension, but got grid with sizes ", c10::IntArrayRef(g));
  for (size_t d = 2; d < in.size(); ++d) {
    TORCH_CHECK(in[d] > 0, context.op_name(), ": expected input to have non-empty spatial ",
                "dimensions, but input has sizes ", c10::IntArrayRef(in), " with dimension ", d,
                " being empty");
  }
  const int64_t interpolation = context.Int(modes[0]), padding = context.Int(modes[1]);
  TORCH_CHECK(spatial == 2 || interpolation != static_cast<int64_t>(Interpolation::kBicubic),
              context.op_name(), ": bicubic interpolation only supports 4D input");
  TORCH_CHECK(interpolation >= 0 && interpolation <= 2, context.op_name(),
              ": unsupported interpolation mode ", interpolation);
  TORCH_CHECK(padding >= 0 && padding <= 2, context.op_name(), ": unsupported padding mode ",
              padding);
  return {static_cast<Interpolation>(interpolation),
          static_cast<Padding>(padding),
          context.Bool(modes[2]),
          std::vector<int64_t>(g.begin(), g.end() - 1),
          std::vector<int64_t>(in.begin() + 2, in.end()),
          in[1]};
}

// Everything both directions need: the input as rows, the grid's source positions and the taps.
struct Plan {
  Sampling s;
  Arith a;
  std::vector<Coordinate> source;  // per spatial dim, outermost first
  std::vector<Tap> taps;
  Value rows_by_channel;  // [N * spatial positions, C]
};

// `forward`: whether to round half-precision arithmetic as CPU's vectorized 2-D forward does
// (CPU's 3-D kernel and the backward differ from it; those compute in float32 and round once).
Plan MakePlan(LoweringContext& context, std::span<const Operand> operands, size_t spatial,
              size_t first_mode, const Operand& input, const Operand& grid, bool forward) {
  auto& b = context.builder();
  Sampling s = ReadSampling(context, input, grid, operands.subspan(first_mode, 3), spatial);
  const c10::ScalarType compute = ComputeDtype(input.dtype);
  Value x = context.Convert(input.value, compute);
  Value g = context.Convert(grid.value, compute);
  const bool rounds = forward && spatial == 2 && compute != input.dtype;
  Arith a(b, x.element_type(), s.batch_and_grid,
          rounds ? std::optional<ElementType>(ToElementTypeOrThrow(input.dtype, "grid_sampler"))
                 : std::nullopt);
  std::vector<Coordinate> source(spatial);
  for (size_t d = 0; d < spatial; ++d) {
    // The grid's last dim lists x (innermost spatial dim) first.
    const int64_t component = static_cast<int64_t>(spatial - 1 - d);
    std::vector<int64_t> start(g.rank(), 0), limit = g.dims(), strides(g.rank(), 1);
    start.back() = component;
    limit.back() = component + 1;
    Value coord = b.Reshape(b.Slice(g, start, limit, strides), s.batch_and_grid);
    source[d] = Unnormalize(a, coord, s.in_sizes[d], s.align_corners);
    if (s.interpolation != Interpolation::kBicubic) {
      source[d] = ApplyPadding(a, source[d], s.in_sizes[d], s);
    }
  }
  std::vector<int64_t> to_channels_last = {0};
  for (size_t d = 0; d < spatial; ++d) to_channels_last.push_back(static_cast<int64_t>(2 + d));
  to_channels_last.push_back(1);
  int64_t rows = s.batch_and_grid[0];
  for (int64_t size : s.in_sizes) rows *= size;
  Value rows_by_channel = b.Reshape(b.Transpose(x, to_channels_last), {rows, s.channels});
  std::vector<Tap> taps = TapsOf(a, s, source);
  return {std::move(s), a, std::move(source), std::move(taps), rows_by_channel};
}

// [N, grid dims...] broadcast along a trailing channel dim.
Value AlongChannels(FunctionBuilder& b, Value v, int64_t channels) {
  std::vector<int64_t> dims = v.dims(), broadcast;
  for (int64_t d = 0; d < v.rank(); ++d) broadcast.push_back(d);
  dims.push_back(channels);
  return b.BroadcastInDim(v, dims, broadcast);
}

// Channels-last [N, grid dims..., C] to the op's [N, C, grid dims...] and back.
std::vector<int64_t> ChannelsFirst(int64_t rank) {
  std::vector<int64_t> permutation = {0, rank - 1};
  for (int64_t d = 1; d < rank - 1; ++d) permutation.push_back(d);
  return permutation;
}
std::vector<int64_t> ChannelsLast(int64_t rank) {
  std::vector<int64_t> permutation = {0};
  for (int64_t d = 2; d < rank; ++d) permutation.push_back(d);
  permutation.push_back(1);
  return permutation;
}

// Zero where the tap lies outside the input, the tap's weight otherwise.
Value MaskedWeight(const Arith& a, Value weight, Value inside) {
  return a.b().Select(inside, weight, a.c(0));
}

// grid_sampler_{2,3}d(input, grid, interpolation_mode, padding_mode, align_corners)
template <size_t kSpatial>
std::vector<Value> GridSampler(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const Plan p = MakePlan(context, operands, kSpatial, 2, operands[0], operands[1], true);
  const Arith& a = p.a;
  // Each tap's values, [N, grid dims..., C]; taps outside the input read zero.
  std::vector<Value> values;
  for (const Tap& tap : p.taps) {
    auto [rows, inside] = RowsOf(a, p.s, tap);
    Value gathered = GatherRows(b, p.rows_by_channel, rows);
    values.push_back(b.Select(AlongChannels(b, inside, p.s.channels), gathered,
                              b.Constant(gathered.element_type(), 0.0, gathered.dims())));
  }
  auto weighted = [&](Value weight, Value value) {
    return a.Times(AlongChannels(b, weight, p.s.channels), value);
  };
  Value sum;
  if (p.s.interpolation == Interpolation::kBicubic) {
    // CPU's order: each row of four along x first, then the four rows along y.
    for (size_t row = 0; row < 4; ++row) {
      Value along_x;
      for (size_t column = 0; column < 4; ++column) {
        const size_t t = row * 4 + column;
        Value term = weighted(p.taps[t].factors[1], values[t]);
        along_x = along_x.valid() ? a.Plus(along_x, term) : term;
      }
      Value term = weighted(p.taps[row * 4].factors[0], along_x);
      sum = sum.valid() ? a.Plus(sum, term) : term;
    }
  } else {
    for (size_t t = 0; t < p.taps.size(); ++t) {
      Value term = weighted(p.taps[t].weight, values[t]);
      sum = sum.valid() ? a.Plus(sum, term) : term;
    }
  }
  Value result = b.Transpose(sum, ChannelsFirst(sum.rank()));
  return {context.Convert(result, operands[0].dtype)};
}
TORCH_TPU_LOWERING(GridSampler<2>, "aten::grid_sampler_2d", "aten::grid_sampler_2d.out");
TORCH_TPU_LOWERING(GridSampler<3>, "aten::grid_sampler_3d", "aten::grid_sampler_3d.out");

// grid_sampler_{2,3}d_backward(grad_output, input, grid, interpolation_mode, padding_mode,
//   align_corners, bool[2] output_mask) -> (grad_input, grad_grid)
template <size_t kSpatial>
std::vector<Value> GridSamplerBackward(LoweringContext& context,
                                       std::span<const Operand> operands) {
  auto& b = context.builder();
  const Operand& input = operands[1];
  const Operand& grid = operands[2];
  const Plan p = MakePlan(context, operands, kSpatial, 3, input, grid, false);
  const auto mask = operands[6].ivalue.toBoolList().vec();
  Value grad = context.Convert(operands[0].value, ComputeDtype(input.dtype));
  Value grad_rows = b.Transpose(grad, ChannelsLast(grad.rank()));  // [N, grid dims..., C]
  std::vector<Value> grad_source(kSpatial);
  std::vector<Value> all_rows, all_updates;
  for (const Tap& tap : p.taps) {
    auto [rows, inside] = RowsOf(p.a, p.s, tap);
    if (mask[0]) {
      Value weight = AlongChannels(b, MaskedWeight(p.a, tap.weight, inside), p.s.channels);
      all_rows.push_back(b.Reshape(rows, {rows.type().NumElements()}));
      all_updates.push_back(
          b.Reshape(b.Multiply(grad_rows, weight), {rows.type().NumElements(), p.s.channels}));
    }
    if (mask[1] && p.s.interpolation != Interpolation::kNearest) {
      // d output / d source = sum over channels of grad * tap value * d weight / d source.
      Value values = b.Multiply(GatherRows(b, p.rows_by_channel, rows), grad_rows);
      Value per_position =
          b.Reduce({values}, {b.Constant(values.element_type(), 0.0)}, {values.rank() - 1},
                   [](FunctionBuilder& body, std::span<const Value> args) {
                     return std::vector<Value>{body.Add(args[0], args[1])};
                   })[0];
      per_position = MaskedWeight(p.a, per_position, inside);
      for (size_t d = 0; d < kSpatial; ++d) {
        Value term = b.Multiply(per_position, tap.weight_grad[d]);
        grad_source[d] = grad_source[d].valid() ? b.Add(grad_source[d], term) : term;
      }
    }
  }
  std::vector<Value> results;
  if (mask[0]) {
    Value rows = b.Concatenate(all_rows, 0);
    Value updates = b.Concatenate(all_updates, 0);
    FunctionBuilder::ScatterDimensions dimensions;
    dimensions.update_window_dims = {1};
    dimensions.inserted_window_dims = {0};
    dimensions.scatter_dims_to_operand_dims = {0};
    dimensions.index_vector_dim = 1;
    Value zeros = b.Constant(updates.element_type(), 0.0, p.rows_by_channel.dims());
    Value summed = b.Scatter({zeros}, rows, {updates}, dimensions,
                             [](FunctionBuilder& body, std::span<const Value> args) {
                               return std::vector<Value>{body.Add(args[0], args[1])};
                             })[0];
    std::vector<int64_t> channels_last = {p.s.batch_and_grid[0]};
    channels_last.insert(channels_last.end(), p.s.in_sizes.begin(), p.s.in_sizes.end());
    channels_last.push_back(p.s.channels);
    Value result = b.Transpose(b.Reshape(summed, channels_last), ChannelsFirst(kSpatial + 2));
    results.push_back(context.Convert(result, input.dtype));
  } else {
    results.push_back(context.Constant(0.0, input.dtype, {0}));
  }
  if (mask[1]) {
    // The grid's last dim lists the innermost spatial dim first.
    std::vector<Value> components;
    for (size_t d = kSpatial; d-- > 0;) {
      Value g = grad_source[d].valid() ? b.Multiply(grad_source[d], p.source[d].grad) : p.a.c(0);
      std::vector<int64_t> dims = g.dims();
      dims.push_back(1);
      components.push_back(b.Reshape(g, dims));
    }
    results.push_back(context.Convert(b.Concatenate(components, kSpatial + 1), grid.dtype));
  } else {
    results.push_back(context.Constant(0.0, grid.dtype, {0}));
  }
  return results;
}
TORCH_TPU_LOWERING(GridSamplerBackward<2>, "aten::grid_sampler_2d_backward",
                   "aten::grid_sampler_2d_backward.out");
TORCH_TPU_LOWERING(GridSamplerBackward<3>, "aten::grid_sampler_3d_backward",
                   "aten::grid_sampler_3d_backward.out");

}  // namespace
}  // namespace torch_tpu::lowering

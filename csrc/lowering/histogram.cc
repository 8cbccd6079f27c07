// Histograms: histc (counts in `bins` equal-width bins between min and max, the data's own
// extremes when min == max), histogram and histogramdd (bins given by count and range, or by
// their edges; optional weights and density), bincount (the device half; the host reads the
// largest element in aten/data_dependent_kernels.cc). Each element's bin is found on the device
// and the counts are a scatter-add into the bins.
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>

#include "lowering/context.h"
#include "lowering/opmath.h"
#include "lowering/registry.h"

namespace torch_tpu::lowering {
namespace {

Value ReduceAll(FunctionBuilder& b, Value x, double init, bool maximum) {
  std::vector<int64_t> dims(x.rank());
  for (int64_t d = 0; d < x.rank(); ++d) dims[d] = d;
  return b.Reduce({x}, {b.Constant(x.element_type(), init)}, dims,
                  [maximum](FunctionBuilder& body, std::span<const Value> args) {
                    return std::vector<Value>{maximum ? body.Maximum(args[0], args[1])
                                                      : body.Minimum(args[0], args[1])};
                  })[0];
}

// The sum of `weights` [n] falling in each of `bins` bins, bin[i] (s64[n]) being element i's;
// elements whose bin is outside [0, bins) are not counted.
Value BinTotals(FunctionBuilder& b, Value bin, Value weights, int64_t bins) {
  const int64_t n = bin.dims()[0];
  FunctionBuilder::ScatterDimensions dimensions;
  dimensions.inserted_window_dims = {0};
  dimensions.scatter_dims_to_operand_dims = {0};
  dimensions.index_vector_dim = 1;
  return b.Scatter({b.Constant(weights.element_type(), 0.0, {bins})}, b.Reshape(bin, {n, 1}),
                   {weights}, dimensions,
                   [](FunctionBuilder& body, std::span<const Value> args) {
                     return std::vector<Value>{body.Add(args[0], args[1])};
                   })[0];
}

// histc(self, bins=100, Scalar min=0, Scalar max=0). CPU computes the bin of x as
// int((x - min) * bins / (max - min)) in the input dtype (half types round every step), x == max
// falling in the last bin; elements outside [min, max] (and NaN) are not counted.
std::vector<Value> Histc(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[0].dtype;
  CheckKernelDtype(context, c10::isFloatingType(dtype), "histogram_cpu", dtype);
  const int64_t bins = context.Int(operands[1]);
  TORCH_CHECK(bins > 0, context.op_name(), ": torch.histogram(): bins must be > 0, but got ", bins,
              " for dimension 0");
  auto& b = context.builder();
  const c10::ScalarType compute = ComputeDtype(dtype);
  auto round = [&](Value v) { return RoundThrough(context, v, dtype); };
  int64_t n = 1;
  for (int64_t d : operands[0].value.dims()) n *= d;
  Value x = b.Reshape(context.Convert(operands[0].value, compute), {n});
  Value low = round(context.Convert(operands[2].value, compute));
  Value high = round(context.Convert(operands[3].value, compute));
  context.CheckNotViolated(b.Compare(low, high, Direction::kGt),
                           "torch.histc: max must be larger than min");
  // min == max: the data's extremes (NaN when any element is; the range check below fails),
  // widened by one on each side when they are equal too.
  Value use_data = b.Compare(low, high, Direction::kEq);
  if (n > 0) {
    // A NaN element makes both extremes NaN, as CPU's aminmax does.
    Value is_nan = b.Compare(x, x, Direction::kNe);
    Value data_low = ReduceAll(b, x, INFINITY, false);
    Value data_high = ReduceAll(b, x, -INFINITY, true);
    Value any_nan = b.Reduce({is_nan}, {b.Constant(ElementType::kPred, 0.0)}, {0},
                             [](FunctionBuilder& body, std::span<const Value> args) {
                               return std::vector<Value>{body.Or(args[0], args[1])};
                             })[0];
    Value nan_scalar = context.Constant(std::numeric_limits<double>::quiet_NaN(), compute);
    low = b.Select(use_data, b.Select(any_nan, nan_scalar, data_low), low);
    high = b.Select(use_data, b.Select(any_nan, nan_scalar, data_high), high);
  }
  Value equal = b.Compare(low, high, Direction::kEq);
  Value one = context.Constant(1.0, compute);
  low = b.Select(equal, round(b.Subtract(low, one)), low);
  high = b.Select(equal, round(b.Add(high, one)), high);
  Value finite = b.And(b.IsFinite(low), b.IsFinite(high));
  context.CheckNotViolated(b.Not(finite), "torch.histc: range of [min, max] is not finite");
  if (n == 0) return {context.Constant(0.0, dtype, {bins})};

  Value low_n = b.BroadcastInDim(low, {n}, {}), high_n = b.BroadcastInDim(high, {n}, {});
  Value scaled = round(b.Multiply(round(b.Subtract(x, low_n)),
                                  context.Constant(static_cast<double>(bins), compute, {n})));
  Value position = round(b.Divide(scaled, round(b.Subtract(high_n, low_n))));
  Value bin = b.Convert(position, ElementType::kS64);
  Value last = b.ConstantInt(ElementType::kS64, bins - 1, {n});
  bin = b.Select(b.Compare(bin, b.ConstantInt(ElementType::kS64, bins, {n}), Direction::kEq), last,
                 bin);
  Value inside =
      b.And(b.Compare(x, low_n, Direction::kGe), b.Compare(x, high_n, Direction::kLe));
  // Elements not counted go to index `bins`, outside the result: scatter skips them.
  bin = b.Select(inside, bin, b.ConstantInt(ElementType::kS64, bins, {n}));
  return {context.Convert(BinTotals(b, bin, context.Constant(1.0, c10::kFloat, {n}), bins), dtype)};
}
TORCH_TPU_LOWERING(Histc, "aten::histc", "aten::histc.out");

// The bin of each element `x` [n] among the ascending `edges` [E]: the last edge not above it
// (the last bin also takes the rightmost edge), or -1 outside [edges[0], edges[E-1]] and for NaN.
// CPU finds the same bin by binary search (edges given) or by interpolation corrected against
// the edges (edges from a range).
Value BinOfEdges(FunctionBuilder& b, Value x, Value edges) {
  const int64_t n = x.dims()[0], e = edges.dims()[0];
  Value x_grid = b.BroadcastInDim(x, {n, e}, {0});
  Value edges_grid = b.BroadcastInDim(edges, {n, e}, {1});
  Value not_above = b.Convert(b.Compare(edges_grid, x_grid, Direction::kLe), ElementType::kS64);
  Value bin = b.Subtract(b.Reduce({not_above}, {b.ConstantInt(ElementType::kS64, 0)}, {1},
                                  [](FunctionBuilder& body, std::span<const Value> args) {
                                    return std::vector<Value>{body.Add(args[0], args[1])};
                                  })[0],
                         b.ConstantInt(ElementType::kS64, 1, {n}));
  bin = b.Minimum(bin, b.ConstantInt(ElementType::kS64, e - 2, {n}));
  Value leftmost = b.BroadcastInDim(b.Reshape(b.Slice(edges, {0}, {1}, {1}), {}), {n}, {});
  Value rightmost = b.BroadcastInDim(b.Reshape(b.Slice(edges, {e - 1}, {e}, {1}), {}), {n}, {});
  Value inside = b.And(b.Compare(x, leftmost, Direction::kGe),
                       b.Compare(x, rightmost, Direction::kLe));
  return b.Select(inside, bin, b.ConstantInt(ElementType::kS64, -1, {n}));
}

// The histogram of the rows of `points` [n, D] over D dims with the given ascending edges per
// dim: weighted counts [bins_0, ..., bins_{D-1}] in the points' dtype, or with `density` each
// divided by the total and by its bin's widths, as CPU does.
Value HistogramOfEdges(LoweringContext& context, Value points, const std::vector<Value>& edges,
                       const Operand& weight, bool density) {
  auto& b = context.builder();
  const int64_t n = points.dims()[0], dims = points.dims()[1];
  std::vector<int64_t> shape;
  int64_t total = 1;
  for (const Value& edge : edges) {
    shape.push_back(edge.dims()[0] - 1);
    total *= shape.back();
  }
  Value weights =
      weight.is_none()
          ? b.Constant(points.element_type(), 1.0, {n})
          : b.Reshape(context.Convert(weight.value, context.DtypeOf(points)), {n});
  Value flat_bin = b.ConstantInt(ElementType::kS64, 0, {n});
  Value outside = b.ConstantInt(ElementType::kPred, 0, {n});
  for (int64_t d = 0; d < dims; ++d) {
    Value column = b.Reshape(b.Slice(points, {0, d}, {n, d + 1}, {1, 1}), {n});
    Value bin = BinOfEdges(b, column, edges[d]);
    outside =
        b.Or(outside, b.Compare(bin, b.ConstantInt(ElementType::kS64, 0, {n}), Direction::kLt));
    flat_bin = b.Add(b.Multiply(flat_bin, b.ConstantInt(ElementType::kS64, shape[d], {n})), bin);
  }
  flat_bin = b.Select(outside, b.ConstantInt(ElementType::kS64, total, {n}), flat_bin);
  Value hist = b.Reshape(BinTotals(b, flat_bin, weights, total), shape);
  if (!density) return hist;
  Value sum = b.Reduce({b.Reshape(hist, {total})}, {b.Constant(hist.element_type(), 0.0)}, {0},
                       [](FunctionBuilder& body, std::span<const Value> args) {
                         return std::vector<Value>{body.Add(args[0], args[1])};
                       })[0];
  hist = b.Divide(hist, b.BroadcastInDim(sum, shape, {}));
  for (int64_t d = 0; d < dims; ++d) {
    const int64_t bins = shape[d];
    Value widths = b.Subtract(b.Slice(edges[d], {1}, {bins + 1}, {1}),
                              b.Slice(edges[d], {0}, {bins}, {1}));
    hist = b.Divide(hist, b.BroadcastInDim(widths, shape, {d}));
  }
  return hist;
}

void CheckHistogramInput(LoweringContext& context, const Operand& self, const Operand& weight,
                         int64_t dims_of_point) {
  CheckKernelDtype(context, self.dtype == c10::kFloat || self.dtype == c10::kDouble,
                   "histogramdd", self.dtype);
  if (weight.is_none()) return;
  std::vector<int64_t> expected = self.value.dims();
  if (dims_of_point > 0) expected.pop_back();
  TORCH_CHECK(weight.value.dims() == expected, context.op_name(),
              ": torch.histogramdd: if weight tensor is provided it should have the same shape as "
              "the input tensor excluding its innermost dimension");
}

// `self` as points [n, D]: histogram flattens it (D = 1), histogramdd reads its last dim.
Value AsPoints(FunctionBuilder& b, Value self, bool flatten) {
  if (flatten) return b.Reshape(self, {self.type().NumElements(), 1});
  const int64_t dims = self.rank() == 0 ? 1 : self.dims().back();
  return b.Reshape(self, {self.type().NumElements() / std::max<int64_t>(dims, 1), dims});
}

// Equal-width edges per dim between the static `range` pairs or the data's extremes per dim
// (0 and 1 for no data), an empty range widened by 0.5 on each side, as CPU's
// histogramdd_bin_edges computes them (linspace, in f64, then the points' dtype).
std::vector<Value> LinearEdges(LoweringContext& context, Value points,
                               const std::vector<int64_t>& bins, const Operand& range) {
  auto& b = context.builder();
  const int64_t n = points.dims()[0], dims = points.dims()[1];
  const c10::ScalarType dtype = context.DtypeOf(points);
  std::vector<double> limits;
  if (!range.is_none()) {
    limits = range.ivalue.toDoubleVector();
    TORCH_CHECK(static_cast<int64_t>(limits.size()) == 2 * dims, context.op_name(),
                ": torch.histogramdd: for a ", dims, "-dimensional histogram, range should have ",
                2 * dims, " elements, but got ", limits.size());
  }
  std::vector<Value> edges;
  for (int64_t d = 0; d < dims; ++d) {
    TORCH_CHECK(bins[d] > 0, context.op_name(), ": torch.histogram(): bins must be > 0, but got ",
                bins[d], " for dimension ", d);
    Value low, high;
    if (!limits.empty()) {
      const double left = limits[2 * d], right = limits[2 * d + 1];
      TORCH_CHECK(std::isfinite(left) && std::isfinite(right), context.op_name(),
                  ": torch.histogramdd: dimension ", d, "'s range [", left, ", ", right,
                  "] is not finite");
      TORCH_CHECK(left <= right, context.op_name(),
                  ": torch.histogramdd: min should not exceed max, but got min ", left, " max ",
                  right, " for dimension ", d);
      low = context.Constant(left, c10::kDouble);
      high = context.Constant(right, c10::kDouble);
    } else if (n == 0) {
      low = context.Constant(0.0, c10::kDouble);
      high = context.Constant(1.0, c10::kDouble);
    } else {
      Value column = b.Reshape(b.Slice(points, {0, d}, {n, d + 1}, {1, 1}), {n});
      low = context.Convert(ReduceAll(b, column, INFINITY, false), c10::kDouble);
      high = context.Convert(ReduceAll(b, column, -INFINITY, true), c10::kDouble);
      // A NaN makes both extremes NaN (the finiteness check then fails), as CPU's aminmax does.
      Value any_nan = b.Compare(ReduceAll(b, b.Compare(column, column, Direction::kNe), 0, true),
                                b.ConstantInt(ElementType::kPred, 0), Direction::kNe);
      Value nan = context.Constant(std::numeric_limits<double>::quiet_NaN(), c10::kDouble);
      low = b.Select(any_nan, nan, low);
      high = b.Select(any_nan, nan, high);
      context.CheckNotViolated(b.Not(b.And(b.IsFinite(low), b.IsFinite(high))),
                               "torch.histogramdd: the data's range is not finite");
    }
    Value equal = b.Compare(low, high, Direction::kEq);
    Value half = context.Constant(0.5, c10::kDouble);
    low = b.Select(equal, b.Subtract(low, half), low);
    high = b.Select(equal, b.Add(high, half), high);
    std::vector<Operand> linspace(3);
    linspace[0].kind = linspace[1].kind = Operand::Kind::kScalar;
    linspace[0].value = low;
    linspace[1].value = high;
    linspace[0].dtype = linspace[1].dtype = c10::kDouble;
    linspace[2].ivalue = bins[d] + 1;
    Value edge = LoweringRegistry::Get().Function("torch_tpu::linspace")(context, linspace)[0];
    edges.push_back(context.Convert(edge, dtype));
  }
  return edges;
}

// histogram.bin_ct(self, int bins=100, *, float[]? range=None, Tensor? weight=None,
// bool density=False) -> (hist, bin_edges)
std::vector<Value> HistogramOfCount(LoweringContext& context, std::span<const Operand> operands) {
  CheckHistogramInput(context, operands[0], operands[3], 0);
  Value points = AsPoints(context.builder(), operands[0].value, true);
  std::vector<Value> edges = LinearEdges(context, points, {context.Int(operands[1])}, operands[2]);
  return {HistogramOfEdges(context, points, edges, operands[3], context.Bool(operands[4])),
          edges[0]};
}
TORCH_TPU_LOWERING(HistogramOfCount, "aten::histogram.bin_ct", "aten::histogram.bin_ct_out");

// histogram.bins_tensor(self, Tensor bins, *, Tensor? weight=None, bool density=False)
std::vector<Value> HistogramOfBins(LoweringContext& context, std::span<const Operand> operands) {
  CheckHistogramInput(context, operands[0], operands[2], 0);
  TORCH_CHECK(operands[1].value.rank() == 1 && operands[1].value.dims()[0] >= 2, context.op_name(),
              ": torch.histogramdd: bins tensor should have one dimension and at least 2 "
              "elements, but got ", operands[1].value.rank(), " dimensions and ",
              operands[1].value.type().NumElements(), " elements");
  Value points = AsPoints(context.builder(), operands[0].value, true);
  Value edges = context.Convert(operands[1].value, operands[0].dtype);
  return {HistogramOfEdges(context, points, {edges}, operands[2], context.Bool(operands[3])),
          edges};
}
TORCH_TPU_LOWERING(HistogramOfBins, "aten::histogram.bins_tensor",
                   "aten::histogram.bins_tensor_out");

// _histogramdd_bin_edges(self, int[] bins, *, float[]? range, Tensor? weight, bool density)
std::vector<Value> HistogramddBinEdges(LoweringContext& context,
                                       std::span<const Operand> operands) {
  CheckHistogramInput(context, operands[0], operands[3], 1);
  Value points = AsPoints(context.builder(), operands[0].value, false);
  return LinearEdges(context, points, context.IntList(operands[1]), operands[2]);
}
TORCH_TPU_LOWERING(HistogramddBinEdges, "aten::_histogramdd_bin_edges");

// _histogramdd_from_bin_cts(self, int[] bins, *, float[]? range, Tensor? weight, bool density)
std::vector<Value> HistogramddOfCounts(LoweringContext& context,
                                       std::span<const Operand> operands) {
  CheckHistogramInput(context, operands[0], operands[3], 1);
  Value points = AsPoints(context.builder(), operands[0].value, false);
  std::vector<Value> edges =
      LinearEdges(context, points, context.IntList(operands[1]), operands[2]);
  return {HistogramOfEdges(context, points, edges, operands[3], context.Bool(operands[4]))};
}
TORCH_TPU_LOWERING(HistogramddOfCounts, "aten::_histogramdd_from_bin_cts",
                   "aten::_histogramdd_from_bin_cts.out");

// _histogramdd_from_bin_tensors(self, Tensor[] bins, *, Tensor? weight, bool density)
std::vector<Value> HistogramddOfBins(LoweringContext& context, std::span<const Operand> operands) {
  CheckHistogramInput(context, operands[0], operands[2], 1);
  Value points = AsPoints(context.builder(), operands[0].value, false);
  std::vector<Value> edges;
  for (const Value& edge : operands[1].values) {
    edges.push_back(context.Convert(edge, operands[0].dtype));
  }
  return {HistogramOfEdges(context, points, edges, operands[2], context.Bool(operands[3]))};
}
TORCH_TPU_LOWERING(HistogramddOfBins, "aten::_histogramdd_from_bin_tensors",
                   "aten::_histogramdd_from_bin_tensors.out");

// (self, Tensor? weights, int bins): bincount once the host knows the bin count from the largest
// element. Counts are int64; weights sum in float32 when they are float32, else in float64, as
// on CPU.
std::vector<Value> Bincount(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const int64_t bins = context.Int(operands[2]);
  Value bin = context.Convert(operands[0].value, c10::kLong);
  Value weights;
  if (operands[1].is_none()) {
    weights = context.ConstantInt(1, c10::kLong, bin.dims());
  } else {
    const c10::ScalarType dtype = operands[1].dtype == c10::kFloat ? c10::kFloat : c10::kDouble;
    weights = context.Convert(operands[1].value, dtype);
  }
  return {BinTotals(b, bin, weights, bins)};
}
TORCH_TPU_LOWERING(Bincount, "torch_tpu::bincount");

}  // namespace
}  // namespace torch_tpu::lowering

// Pooling: max pooling with indices, adaptive max pooling (and their backward) and max_unpool as
// reduce_window / reduce / scatter; average and adaptive average pooling and their backward.
#include <c10/util/Exception.h>

#include <cmath>
#include <tuple>

#include "lowering/reduction_ops.h"

namespace torch_tpu::lowering {
namespace {

struct PoolGeometry {
  std::vector<int64_t> kernel, stride, padding, dilation, output;
  std::vector<std::pair<int64_t, int64_t>> pads;  // per spatial dim, (low, high)
};

// PyTorch's output size rule, including ceil_mode's "last window starts inside the input".
PoolGeometry Geometry(LoweringContext& context, std::span<const Operand> operands, size_t first,
                      const std::vector<int64_t>& spatial_sizes) {
  const size_t spatial = spatial_sizes.size();
  auto expand = [&](std::vector<int64_t> values, const std::vector<int64_t>& fallback) {
    if (values.empty()) return fallback;
    if (values.size() == 1) values.assign(spatial, values[0]);
    TORCH_CHECK(values.size() == spatial, context.op_name(), ": expected ", spatial,
                " pooling parameters, got ", values.size());
    return values;
  };
  PoolGeometry g;
  g.kernel = expand(context.IntList(operands[first]), {});
  g.stride = expand(context.IntList(operands[first + 1]), g.kernel);
  g.padding = expand(context.IntList(operands[first + 2]), std::vector<int64_t>(spatial, 0));
  g.dilation = expand(context.IntList(operands[first + 3]), std::vector<int64_t>(spatial, 1));
  const bool ceil_mode = context.Bool(operands[first + 4]);
  for (size_t i = 0; i < spatial; ++i) {
    TORCH_CHECK(g.padding[i] * 2 <= g.kernel[i], context.op_name(),
                ": pad should be at most half of effective kernel size, but got pad=", g.padding[i],
                ", kernel_size=", g.kernel[i]);
    const int64_t span = g.dilation[i] * (g.kernel[i] - 1) + 1;
    const int64_t numerator = spatial_sizes[i] + 2 * g.padding[i] - span;
    int64_t out =
        (ceil_mode ? (numerator + g.stride[i] - 1) / g.stride[i] : numerator / g.stride[i]) + 1;
    if (ceil_mode && (out - 1) * g.stride[i] >= spatial_sizes[i] + g.padding[i]) --out;
    TORCH_CHECK(out > 0, context.op_name(), ": output size is too small");
    g.output.push_back(out);
    const int64_t high = (out - 1) * g.stride[i] + span - spatial_sizes[i] - g.padding[i];
    g.pads.push_back({g.padding[i], std::max<int64_t>(high, 0)});
  }
  return g;
}

// Combiner of (value, flat index) pairs for max pooling: the larger value wins, NaN beats
// numbers, and a tie goes to the earlier element (CPU's scan order).
FunctionBuilder::RegionBody MaxWithIndex(bool is_float) {
  return [is_float](FunctionBuilder& body, std::span<const Value> args) {
    Value acc = args[0], acc_index = args[1], value = args[2], index = args[3];
    Value better = body.Compare(value, acc, Direction::kGt);
    Value equal = body.Compare(value, acc, Direction::kEq);
    if (is_float) {
      Value value_nan = body.Compare(value, value, Direction::kNe);
      Value acc_nan = body.Compare(acc, acc, Direction::kNe);
      better = body.Or(better, body.And(value_nan, body.Not(acc_nan)));
    }
    // Padding carries index -1 and never wins a tie against a real element.
    Value earlier = body.Or(
        body.Compare(acc_index, body.ConstantInt(ElementType::kS64, 0), Direction::kLt),
        body.And(body.Compare(index, body.ConstantInt(ElementType::kS64, 0), Direction::kGe),
                 body.Compare(index, acc_index, Direction::kLt)));
    Value take = body.Or(better, body.And(equal, earlier));
    return std::vector<Value>{body.Select(take, value, acc), body.Select(take, index, acc_index)};
  };
}

// The flat index of each element of x within its plane (the dims from `leading` on).
Value PlanePositions(LoweringContext& context, const Value& x, int64_t leading) {
  auto& b = context.builder();
  const std::vector<int64_t> sizes(x.dims().begin() + leading, x.dims().end());
  int64_t plane = 1;
  for (int64_t size : sizes) plane *= size;
  std::vector<int64_t> plane_shape(static_cast<size_t>(leading), 1);
  plane_shape.insert(plane_shape.end(), sizes.begin(), sizes.end());
  Value positions = b.Reshape(b.Iota(TensorType{ElementType::kS64, {plane}}, 0), plane_shape);
  return context.BroadcastTo(positions, x.dims());
}

// max_pool{1,2,3}d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode)
//   -> (output, indices); indices are flat positions within each input plane.
std::vector<Value> MaxPoolWithIndices(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value x = operands[0].value;
  const int64_t spatial = static_cast<int64_t>(context.IntList(operands[1]).size());
  const int64_t leading = x.rank() - spatial;
  TORCH_CHECK(leading == 1 || leading == 2, context.op_name(), ": expected ", spatial + 1, "-D or ",
              spatial + 2, "-D input, got ", x.rank(), "-D");
  const std::vector<int64_t> sizes(x.dims().begin() + leading, x.dims().end());
  const PoolGeometry g = Geometry(context, operands, 1, sizes);
  Value positions = PlanePositions(context, x, leading);
  std::vector<int64_t> window(static_cast<size_t>(leading), 1), strides(leading, 1),
      dilations(leading, 1);
  std::vector<std::pair<int64_t, int64_t>> padding(static_cast<size_t>(leading), {0, 0});
  window.insert(window.end(), g.kernel.begin(), g.kernel.end());
  strides.insert(strides.end(), g.stride.begin(), g.stride.end());
  dilations.insert(dilations.end(), g.dilation.begin(), g.dilation.end());
  padding.insert(padding.end(), g.pads.begin(), g.pads.end());
  const ElementType type = x.element_type();
  const bool is_float = stablehlo::IsFloat(type);
  Value init = is_float ? b.Constant(type, -INFINITY)
                        : b.ConstantInt(type, LowestOf(type));
  auto results = b.ReduceWindow({x, positions}, {init, b.ConstantInt(ElementType::kS64, -1)},
                                window, strides, {}, dilations, padding, MaxWithIndex(is_float));
  return {results[0], results[1]};
}
TORCH_TPU_LOWERING(MaxPoolWithIndices, "aten::max_pool2d_with_indices",
                   "aten::max_pool2d_with_indices.out");
TORCH_TPU_LOWERING(MaxPoolWithIndices, "aten::max_pool3d_with_indices",
                   "aten::max_pool3d_with_indices.out");

// Scatters values [planes, n] to the flat positions indices [planes, n] within zero planes
// [planes, plane_size], adding repeated positions (accumulate) or writing them.
Value ScatterIntoPlanes(LoweringContext& context, Value values, Value indices, int64_t plane_size,
                        bool accumulate) {
  auto& b = context.builder();
  const int64_t planes = values.dims()[0], n = values.dims()[1];
  Value rows = b.Reshape(b.Iota(TensorType{ElementType::kS64, {planes, n}}, 0), {planes, n, 1});
  Value coordinates = b.Concatenate({rows, b.Reshape(indices, {planes, n, 1})}, 2);
  FunctionBuilder::ScatterDimensions dimensions;
  dimensions.inserted_window_dims = {0, 1};
  dimensions.scatter_dims_to_operand_dims = {0, 1};
  dimensions.index_vector_dim = 2;
  Value zeros = b.Constant(values.element_type(), 0.0, {planes, plane_size});
  return b.Scatter({zeros}, coordinates, {values}, dimensions,
                   [accumulate](FunctionBuilder& body, std::span<const Value> args) {
                     return std::vector<Value>{accumulate ? body.Add(args[0], args[1]) : args[1]};
                   })[0];
}

// max_pool{2,3}d_with_indices_backward(grad_output, self, kernel_size, stride, padding,
//   dilation, ceil_mode, indices) and fractional_max_pool{2,3}d_backward(grad_output, self,
//   kernel_size, output_size, indices): scatter-add each output gradient to its argmax.
template <size_t kIndices>
std::vector<Value> MaxPoolBackward(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value grad = operands[0].value;
  Value x = operands[1].value;
  Value indices = context.Convert(operands[kIndices].value, c10::kLong);
  const int64_t spatial = static_cast<int64_t>(context.IntList(operands[2]).size());
  const int64_t leading = x.rank() - spatial;
  int64_t planes = 1, plane = 1, outputs = 1;
  for (int64_t d = 0; d < leading; ++d) planes *= x.dims()[d];
  for (int64_t d = leading; d < x.rank(); ++d) {
    plane *= x.dims()[d];
    outputs *= grad.dims()[d];
  }
  Value flat_grad = b.Reshape(context.Convert(grad, operands[1].dtype), {planes, outputs});
  Value result = ScatterIntoPlanes(context, flat_grad, b.Reshape(indices, {planes, outputs}), plane,
                                   /*accumulate=*/true);
  return {b.Reshape(result, x.dims())};
}
TORCH_TPU_LOWERING(MaxPoolBackward<7>, "aten::max_pool2d_with_indices_backward",
                   "aten::max_pool2d_with_indices_backward.grad_input");
TORCH_TPU_LOWERING(MaxPoolBackward<4>, "aten::fractional_max_pool2d_backward",
                   "aten::fractional_max_pool2d_backward.grad_input");
TORCH_TPU_LOWERING(MaxPoolBackward<4>, "aten::fractional_max_pool3d_backward",
                   "aten::fractional_max_pool3d_backward.grad_input");
TORCH_TPU_LOWERING(MaxPoolBackward<7>, "aten::max_pool3d_with_indices_backward",
                   "aten::max_pool3d_with_indices_backward.grad_input");

// Adaptive max along one dim: output cell o covers [floor(o * in / out), ceil((o + 1) * in / out)).
// Every cell sees the whole dim with the cells outside its window masked off, then reduces.
std::pair<Value, Value> AdaptiveMaxAlong(LoweringContext& context, Value x, Value positions,
                                         int64_t dim, int64_t out) {
  auto& b = context.builder();
  const int64_t in = x.dims()[dim];
  std::vector<int64_t> starts, ends;
  for (int64_t o = 0; o < out; ++o) {
    starts.push_back((o * in) / out);
    ends.push_back(((o + 1) * in + out - 1) / out);
  }
  std::vector<int64_t> expanded = x.dims();
  expanded[dim] = in;
  expanded.insert(expanded.begin() + dim, out);
  std::vector<int64_t> source_dims(x.rank());
  for (int64_t d = 0; d < x.rank(); ++d) source_dims[d] = d < dim ? d : d + 1;
  Value column = b.Iota(TensorType{ElementType::kS64, expanded}, dim + 1);
  auto cell_bounds = [&](const std::vector<int64_t>& bounds) {
    return b.BroadcastInDim(b.ConstantDenseInt(TensorType{ElementType::kS64, {out}}, bounds),
                            expanded, {dim});
  };
  Value inside = b.And(b.Compare(column, cell_bounds(starts), Direction::kGe),
                       b.Compare(column, cell_bounds(ends), Direction::kLt));
  const ElementType type = x.element_type();
  const bool is_float = stablehlo::IsFloat(type);
  Value lowest = is_float ? b.Constant(type, -INFINITY)
                          : b.ConstantInt(type, LowestOf(type));
  Value values = b.Select(inside, b.BroadcastInDim(x, expanded, source_dims),
                          b.BroadcastInDim(lowest, expanded, {}));
  Value indices = b.Select(inside, b.BroadcastInDim(positions, expanded, source_dims),
                           b.ConstantInt(ElementType::kS64, -1, expanded));
  auto reduced = b.Reduce({values, indices}, {lowest, b.ConstantInt(ElementType::kS64, -1)},
                          {dim + 1}, MaxWithIndex(is_float));
  return {reduced[0], reduced[1]};
}

// adaptive_max_pool{2,3}d(self, int[N] output_size) -> (output, indices): separable, one spatial
// dim at a time, carrying each winner's flat position in the input plane.
std::vector<Value> AdaptiveMaxPool(LoweringContext& context, std::span<const Operand> operands) {
  Value x = operands[0].value;
  const auto output = context.IntList(operands[1]);
  const int64_t spatial = static_cast<int64_t>(output.size());
  const int64_t leading = x.rank() - spatial;
  TORCH_CHECK(leading == 1 || leading == 2, context.op_name(), ": adaptive_max_pool", spatial,
              "d(): Expected ", spatial + 1, "D or ", spatial + 2, "D tensor, but got ",
              x.type().ToString());
  for (int64_t d = leading; d < x.rank(); ++d) {
    TORCH_CHECK(x.dims()[d] > 0, context.op_name(), ": adaptive_max_pool", spatial,
                "d(): Expected input to have non-zero size for non-batch dimensions, but input "
                "has sizes ",
                x.type().ToString(), " with dimension ", d, " being empty");
  }
  Value positions = PlanePositions(context, x, leading);
  for (int64_t i = spatial - 1; i >= 0; --i) {
    std::tie(x, positions) = AdaptiveMaxAlong(context, x, positions, leading + i, output[i]);
  }
  return {x, positions};
}
TORCH_TPU_LOWERING(AdaptiveMaxPool, "aten::adaptive_max_pool2d", "aten::adaptive_max_pool2d.out");
TORCH_TPU_LOWERING(AdaptiveMaxPool, "aten::adaptive_max_pool3d", "aten::adaptive_max_pool3d.out");

// adaptive_max_pool{2,3}d_backward(grad_output, self, indices): scatter-add to the winners.
template <int kSpatial>
std::vector<Value> AdaptiveMaxPoolBackward(LoweringContext& context,
                                           std::span<const Operand> operands) {
  auto& b = context.builder();
  Value grad = operands[0].value;
  const Value& x = operands[1].value;
  const int64_t leading = x.rank() - kSpatial;
  int64_t planes = 1, plane = 1, outputs = 1;
  for (int64_t d = 0; d < leading; ++d) planes *= x.dims()[d];
  for (int64_t d = leading; d < x.rank(); ++d) {
    plane *= x.dims()[d];
    outputs *= grad.dims()[d];
  }
  Value indices = b.Reshape(context.Convert(operands[2].value, c10::kLong), {planes, outputs});
  Value flat_grad = b.Reshape(context.Convert(grad, operands[1].dtype), {planes, outputs});
  return {b.Reshape(ScatterIntoPlanes(context, flat_grad, indices, plane, /*accumulate=*/true),
                    x.dims())};
}
TORCH_TPU_LOWERING(AdaptiveMaxPoolBackward<2>, "aten::adaptive_max_pool2d_backward",
                   "aten::adaptive_max_pool2d_backward.grad_input");
TORCH_TPU_LOWERING(AdaptiveMaxPoolBackward<3>, "aten::adaptive_max_pool3d_backward",
                   "aten::adaptive_max_pool3d_backward.grad_input");

// max_unpool2d(self, indices, SymInt[2] output_size) and
// max_unpool3d(self, indices, SymInt[3] output_size, int[3] stride, int[3] padding): each value
// goes to its flat index within an output plane of output_size; everything else is zero.
std::vector<Value> MaxUnpool(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value x = operands[0].value;
  const std::vector<int64_t> output_size = context.IntList(operands[2]);
  const int64_t spatial = static_cast<int64_t>(output_size.size());
  TORCH_CHECK(x.rank() == spatial + 1 || x.rank() == spatial + 2, context.op_name(),
              ": Input to max_unpooling", spatial, "d should be a ", spatial + 1, "d or ",
              spatial + 2, "d Tensor, but got a tensor with shape ", x.type().ToString());
  TORCH_CHECK(operands[1].value.dims() == x.dims(), context.op_name(),
              ": Expected shape of indices to be same as that of the input tensor (",
              x.type().ToString(),
              ") but got indices tensor with shape: ", operands[1].value.type().ToString());
  const int64_t leading = x.rank() - spatial;
  int64_t planes = 1, n = 1, plane = 1;
  for (int64_t d = 0; d < leading; ++d) planes *= x.dims()[d];
  for (int64_t d = leading; d < x.rank(); ++d) n *= x.dims()[d];
  for (int64_t size : output_size) plane *= size;
  Value indices = b.Reshape(context.Convert(operands[1].value, c10::kLong), {planes, n});
  context.CheckIndicesInRange(indices, plane, /*negative_wraps=*/false);
  Value result =
      ScatterIntoPlanes(context, b.Reshape(x, {planes, n}), indices, plane, /*accumulate=*/false);
  std::vector<int64_t> dims(x.dims().begin(), x.dims().begin() + leading);
  dims.insert(dims.end(), output_size.begin(), output_size.end());
  return {b.Reshape(result, dims)};
}
TORCH_TPU_LOWERING(MaxUnpool, "aten::max_unpool2d", "aten::max_unpool2d.out");
TORCH_TPU_LOWERING(MaxUnpool, "aten::max_unpool3d", "aten::max_unpool3d.out");

// The windows of avg_pool{2,3}d over x (compute dtype) and the divisor of each output element,
// from the arguments (kernel_size, stride, padding, ceil_mode, count_include_pad,
// divisor_override) starting at operands[first].
struct AvgPoolPlan {
  std::vector<int64_t> window, strides;
  std::vector<std::pair<int64_t, int64_t>> padding;
  Value divisor;
};

Value SumWindows(LoweringContext& context, Value input, const AvgPoolPlan& plan,
                 const std::vector<std::pair<int64_t, int64_t>>& padding) {
  auto& b = context.builder();
  return b.ReduceWindow({input}, {b.Constant(input.element_type(), 0.0)}, plan.window,
                        plan.strides, {}, {}, padding,
                        [](FunctionBuilder& body, std::span<const Value> args) {
                          return std::vector<Value>{body.Add(args[0], args[1])};
                        })[0];
}

AvgPoolPlan PlanAvgPool(LoweringContext& context, std::span<const Operand> operands, size_t first,
                        const Value& x, int64_t spatial) {
  auto& b = context.builder();
  const int64_t leading = x.rank() - spatial;
  TORCH_CHECK(leading == 1 || leading == 2, context.op_name(), ": expected ", spatial + 1,
              "D or ", spatial + 2, "D input");
  const std::vector<int64_t> sizes(x.dims().begin() + leading, x.dims().end());
  // Reuse the max-pool geometry with dilation 1: operands (kernel, stride, padding, ceil_mode).
  std::vector<Operand> geometry_operands = {operands[first], operands[first + 1],
                                            operands[first + 2], Operand{}, operands[first + 3]};
  geometry_operands[3].ivalue = c10::IValue(std::vector<int64_t>{1});
  const PoolGeometry g = Geometry(context, geometry_operands, 0, sizes);
  const bool count_include_pad = context.Bool(operands[first + 4]);
  AvgPoolPlan plan;
  plan.window.assign(leading, 1);
  plan.strides.assign(leading, 1);
  plan.padding.assign(leading, {0, 0});
  plan.window.insert(plan.window.end(), g.kernel.begin(), g.kernel.end());
  plan.strides.insert(plan.strides.end(), g.stride.begin(), g.stride.end());
  plan.padding.insert(plan.padding.end(), g.pads.begin(), g.pads.end());
  const c10::ScalarType compute = LoweringContext::DtypeOf(x);
  if (operands.size() > first + 5 && !operands[first + 5].is_none()) {
    const int64_t divisor = context.Int(operands[first + 5]);
    TORCH_CHECK(divisor != 0, context.op_name(), ": divisor must be not zero");
    std::vector<int64_t> output_dims(x.dims().begin(), x.dims().begin() + leading);
    output_dims.insert(output_dims.end(), g.output.begin(), g.output.end());
    plan.divisor = context.Constant(static_cast<double>(divisor), compute, output_dims);
    return plan;
  }
  // Count the elements each window covers: input elements, plus explicit padding when
  // count_include_pad (never the extra ceil_mode overhang).
  std::vector<std::pair<int64_t, int64_t>> counted = plan.padding;
  Value ones = context.Constant(1.0, compute, x.dims());
  if (count_include_pad) {
    std::vector<int64_t> low(x.rank(), 0), high(x.rank(), 0), interior(x.rank(), 0);
    for (size_t i = 0; i < g.padding.size(); ++i) {
      low[leading + i] = g.padding[i];
      high[leading + i] = g.padding[i];
    }
    ones = b.Pad(ones, context.Constant(1.0, compute), low, high, interior);
    for (size_t i = 0; i < g.padding.size(); ++i) {
      counted[leading + i] = {0, std::max<int64_t>(g.pads[i].second - g.padding[i], 0)};
    }
  }
  plan.divisor = SumWindows(context, ones, plan, counted);
  return plan;
}

// avg_pool{2,3}d(self, kernel_size, stride=[], padding=0, ceil_mode=False, count_include_pad=True,
//   int? divisor_override=None)
template <int kSpatial>
std::vector<Value> AvgPool(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[0].dtype;
  Value x = context.Convert(operands[0].value, ComputeDtype(dtype));
  const AvgPoolPlan plan = PlanAvgPool(context, operands, 1, x, kSpatial);
  Value sums = SumWindows(context, x, plan, plan.padding);
  return {context.Convert(context.builder().Divide(sums, plan.divisor), dtype)};
}
TORCH_TPU_LOWERING(AvgPool<2>, "aten::avg_pool2d", "aten::avg_pool2d.out");
TORCH_TPU_LOWERING(AvgPool<3>, "aten::avg_pool3d", "aten::avg_pool3d.out");

// avg_pool{2,3}d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
//   count_include_pad, divisor_override): each output's gradient over its divisor, spread back
// over its window. The transpose of a strided windowed sum is a stride-1 windowed sum over the
// cotangent dilated by the stride and padded so that every input position sees the windows
// that covered it.
template <int kSpatial>
std::vector<Value> AvgPoolBackward(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = operands[1].dtype;
  const c10::ScalarType compute = ComputeDtype(dtype);
  Value x = context.Convert(operands[1].value, compute);
  AvgPoolPlan plan = PlanAvgPool(context, operands, 2, x, kSpatial);
  Value grad = context.Convert(operands[0].value, compute);
  TORCH_CHECK(grad.dims() == plan.divisor.dims(), context.op_name(),
              ": expected grad_output of shape ", plan.divisor.type().ToString(), ", got ",
              grad.type().ToString());
  grad = b.Divide(grad, plan.divisor);
  std::vector<int64_t> low, high, interior;
  for (int64_t d = 0; d < x.rank(); ++d) {
    const int64_t window = plan.window[d], stride = plan.strides[d];
    const int64_t dilated = (grad.dims()[d] - 1) * stride + 1;
    low.push_back(window - 1 - plan.padding[d].first);
    high.push_back(x.dims()[d] + window - 1 - dilated - low.back());
    interior.push_back(stride - 1);
  }
  Value spread = b.Pad(grad, context.Constant(0.0, compute), low, high, interior);
  plan.strides.assign(x.rank(), 1);
  Value result = SumWindows(context, spread, plan, std::vector<std::pair<int64_t, int64_t>>(
                                                       x.rank(), {0, 0}));
  return {context.Convert(result, dtype)};
}
TORCH_TPU_LOWERING(AvgPoolBackward<2>, "aten::avg_pool2d_backward",
                   "aten::avg_pool2d_backward.grad_input");
TORCH_TPU_LOWERING(AvgPoolBackward<3>, "aten::avg_pool3d_backward",
                   "aten::avg_pool3d_backward.grad_input");

// Applies the adaptive averaging matrix of one spatial dim (out x in: cell o averages
// [floor(o*in/out), ceil((o+1)*in/out)), PyTorch's rule) to x along `dim`; `transposed` applies
// its transpose (in x out), which is the backward: each cell's gradient spreads over its window.
Value AdaptiveAverageAlong(LoweringContext& context, Value x, int64_t dim, int64_t in, int64_t out,
                           bool transposed) {
  auto& b = context.builder();
  std::vector<double> weights(static_cast<size_t>(out * in), 0.0);
  for (int64_t o = 0; o < out; ++o) {
    const int64_t start = (o * in) / out;
    const int64_t end = ((o + 1) * in + out - 1) / out;
    for (int64_t j = start; j < end; ++j) {
      weights[o * in + j] = 1.0 / static_cast<double>(end - start);
    }
  }
  Value matrix = b.ConstantDense(TensorType{x.element_type(), {out, in}}, weights);
  FunctionBuilder::DotDimensions dimensions;
  dimensions.lhs_contracting = {dim};
  dimensions.rhs_contracting = {transposed ? 0 : 1};
  Value product =
      b.DotGeneral(x, matrix, dimensions, std::nullopt, FunctionBuilder::Precision::kHighest);
  // dot_general puts the new dim last; move it back to `dim`.
  std::vector<int64_t> permutation;
  for (int64_t d = 0; d < x.rank() - 1; ++d) {
    if (d == dim) permutation.push_back(x.rank() - 1);
    permutation.push_back(d);
  }
  if (dim == x.rank() - 1) permutation.push_back(x.rank() - 1);
  return b.Transpose(product, permutation);
}

// _adaptive_avg_pool{2,3}d(self, output_size): separable, one averaging matrix per spatial dim.
template <int kSpatial>
std::vector<Value> AdaptiveAvgPool(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[0].dtype;
  Value x = context.Convert(operands[0].value, ComputeDtype(dtype));
  const auto output = context.IntList(operands[1]);
  TORCH_CHECK(output.size() == kSpatial && (x.rank() == kSpatial + 1 || x.rank() == kSpatial + 2),
              context.op_name(), ": expected ", kSpatial + 1, "D or ", kSpatial + 2,
              "D input and a ", kSpatial, "-element output_size, got input ", x.type().ToString());
  const int64_t leading = x.rank() - kSpatial;
  for (int64_t i = 0; i < kSpatial; ++i) {
    x = AdaptiveAverageAlong(context, x, leading + i, x.dims()[leading + i], output[i], false);
  }
  return {context.Convert(x, dtype)};
}
TORCH_TPU_LOWERING(AdaptiveAvgPool<2>, "aten::_adaptive_avg_pool2d",
                   "aten::_adaptive_avg_pool2d.out");
TORCH_TPU_LOWERING(AdaptiveAvgPool<3>, "aten::_adaptive_avg_pool3d",
                   "aten::_adaptive_avg_pool3d.out");

// _adaptive_avg_pool{2,3}d_backward(grad_output, self): the transposed matrices.
template <int kSpatial>
std::vector<Value> AdaptiveAvgPoolBackward(LoweringContext& context,
                                           std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[1].dtype;
  Value grad = context.Convert(operands[0].value, ComputeDtype(dtype));
  const Value& x = operands[1].value;
  const int64_t leading = x.rank() - kSpatial;
  for (int64_t i = 0; i < kSpatial; ++i) {
    const int64_t dim = leading + i;
    grad = AdaptiveAverageAlong(context, grad, dim, x.dims()[dim], grad.dims()[dim], true);
  }
  return {context.Convert(grad, dtype)};
}
TORCH_TPU_LOWERING(AdaptiveAvgPoolBackward<2>, "aten::_adaptive_avg_pool2d_backward",
                   "aten::_adaptive_avg_pool2d_backward.out");
TORCH_TPU_LOWERING(AdaptiveAvgPoolBackward<3>, "aten::_adaptive_avg_pool3d_backward",
                   "aten::_adaptive_avg_pool3d_backward.out");

}  // namespace

}  // namespace torch_tpu::lowering

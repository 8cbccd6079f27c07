// Max pooling with indices (and its backward) as reduce_window / scatter.
#include <c10/util/Exception.h>

#include <cmath>

#include "lowering/reduction_ops.h"

namespace torch_tpu::lowering {
namespace {

using stablehlo::ElementType;
using stablehlo::FunctionBuilder;
using stablehlo::TensorType;
using stablehlo::Value;
using Direction = FunctionBuilder::ComparisonDirection;

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
  // Flat index of each element within its plane.
  int64_t plane = 1;
  for (int64_t size : sizes) plane *= size;
  std::vector<int64_t> plane_shape(static_cast<size_t>(leading), 1);
  plane_shape.insert(plane_shape.end(), sizes.begin(), sizes.end());
  Value positions = b.Reshape(b.Iota(TensorType{ElementType::kS64, {plane}}, 0), plane_shape);
  positions = context.BroadcastTo(positions, x.dims());
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
                        : b.ConstantInt(type, INT64_MIN >> (64 - stablehlo::BitWidth(type)));
  auto results = b.ReduceWindow(
      {x, positions}, {init, b.ConstantInt(ElementType::kS64, -1)}, window, strides, {}, dilations,
      padding, [is_float](FunctionBuilder& body, std::span<const Value> args) {
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
        return std::vector<Value>{body.Select(take, value, acc),
                                  body.Select(take, index, acc_index)};
      });
  return {results[0], results[1]};
}
TORCH_TPU_LOWERING(MaxPoolWithIndices, "aten::max_pool2d_with_indices",
                   "aten::max_pool2d_with_indices.out");
TORCH_TPU_LOWERING(MaxPoolWithIndices, "aten::max_pool3d_with_indices",
                   "aten::max_pool3d_with_indices.out");

// max_pool{2,3}d_with_indices_backward(grad_output, self, kernel_size, stride, padding,
//   dilation, ceil_mode, indices): scatter-add each output gradient to its argmax.
std::vector<Value> MaxPoolBackward(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value grad = operands[0].value;
  Value x = operands[1].value;
  Value indices = context.Convert(operands[7].value, c10::kLong);
  const int64_t spatial = static_cast<int64_t>(context.IntList(operands[2]).size());
  const int64_t leading = x.rank() - spatial;
  int64_t planes = 1, plane = 1, outputs = 1;
  for (int64_t d = 0; d < leading; ++d) planes *= x.dims()[d];
  for (int64_t d = leading; d < x.rank(); ++d) {
    plane *= x.dims()[d];
    outputs *= grad.dims()[d];
  }
  Value flat_grad = b.Reshape(context.Convert(grad, operands[1].dtype), {planes, outputs});
  Value flat_indices = b.Reshape(indices, {planes, outputs, 1});
  Value rows =
      b.Reshape(b.Iota(TensorType{ElementType::kS64, {planes, outputs}}, 0), {planes, outputs, 1});
  Value coordinates = b.Concatenate({rows, flat_indices}, 2);
  FunctionBuilder::ScatterDimensions dimensions;
  dimensions.inserted_window_dims = {0, 1};
  dimensions.scatter_dims_to_operand_dims = {0, 1};
  dimensions.index_vector_dim = 2;
  Value zeros = context.Constant(0.0, operands[1].dtype, {planes, plane});
  Value result = b.Scatter({zeros}, coordinates, {flat_grad}, dimensions,
                           [](FunctionBuilder& body, std::span<const Value> args) {
                             return std::vector<Value>{body.Add(args[0], args[1])};
                           })[0];
  return {b.Reshape(result, x.dims())};
}
TORCH_TPU_LOWERING(MaxPoolBackward, "aten::max_pool2d_with_indices_backward",
                   "aten::max_pool2d_with_indices_backward.grad_input");
TORCH_TPU_LOWERING(MaxPoolBackward, "aten::max_pool3d_with_indices_backward",
                   "aten::max_pool3d_with_indices_backward.grad_input");

// avg_pool2d(self, kernel_size, stride=[], padding=0, ceil_mode=False, count_include_pad=True,
//   int? divisor_override=None)
std::vector<Value> AvgPool2d(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = operands[0].dtype;
  const c10::ScalarType compute = ComputeDtype(dtype);
  Value x = context.Convert(operands[0].value, compute);
  const int64_t leading = x.rank() - 2;
  TORCH_CHECK(leading == 1 || leading == 2, context.op_name(), ": expected 3D or 4D input");
  const std::vector<int64_t> sizes(x.dims().begin() + leading, x.dims().end());
  // Reuse the max-pool geometry with dilation 1: operands (kernel, stride, padding, ceil_mode).
  std::vector<Operand> geometry_operands = {operands[1], operands[2], operands[3], Operand{},
                                            operands[4]};
  geometry_operands[3].ivalue = c10::IValue(std::vector<int64_t>{1});
  const PoolGeometry g = Geometry(context, geometry_operands, 0, sizes);
  const bool count_include_pad = context.Bool(operands[5]);
  std::vector<int64_t> window(leading, 1), strides(leading, 1);
  std::vector<std::pair<int64_t, int64_t>> padding(leading, {0, 0});
  window.insert(window.end(), g.kernel.begin(), g.kernel.end());
  strides.insert(strides.end(), g.stride.begin(), g.stride.end());
  padding.insert(padding.end(), g.pads.begin(), g.pads.end());
  auto sum_window = [&](Value input) {
    return b.ReduceWindow({input}, {context.Constant(0.0, compute)}, window, strides, {}, {},
                          padding, [](FunctionBuilder& body, std::span<const Value> args) {
                            return std::vector<Value>{body.Add(args[0], args[1])};
                          })[0];
  };
  Value sums = sum_window(x);
  Value divisor;
  if (operands.size() > 6 && !operands[6].is_none()) {
    divisor = context.Constant(static_cast<double>(context.Int(operands[6])), compute, sums.dims());
  } else {
    // Count the elements each window covers: input elements, plus explicit padding when
    // count_include_pad (never the extra ceil_mode overhang).
    std::vector<int64_t> ones_dims = x.dims();
    std::vector<std::pair<int64_t, int64_t>> counted = padding;
    Value ones = context.Constant(1.0, compute, ones_dims);
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
    divisor = b.ReduceWindow({ones}, {context.Constant(0.0, compute)}, window, strides, {}, {},
                             counted, [](FunctionBuilder& body, std::span<const Value> args) {
                               return std::vector<Value>{body.Add(args[0], args[1])};
                             })[0];
  }
  return {context.Convert(b.Divide(sums, divisor), dtype)};
}
TORCH_TPU_LOWERING(AvgPool2d, "aten::avg_pool2d", "aten::avg_pool2d.out");

// _adaptive_avg_pool2d(self, output_size): PyTorch's start/end index rule per output cell,
// as an average over [floor(i*in/out), ceil((i+1)*in/out)) along each spatial dim.
std::vector<Value> AdaptiveAvgPool2d(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = operands[0].dtype;
  const c10::ScalarType compute = ComputeDtype(dtype);
  Value x = context.Convert(operands[0].value, compute);
  const auto output = context.IntList(operands[1]);
  TORCH_CHECK(output.size() == 2 && (x.rank() == 3 || x.rank() == 4), context.op_name(),
              ": expected 3D or 4D input and a 2-element output_size");
  const int64_t leading = x.rank() - 2;
  // Each spatial dim is an averaging matrix (out x in) applied with dot_general.
  for (int64_t i = 0; i < 2; ++i) {
    const int64_t dim = leading + i;
    const int64_t in = x.dims()[dim], out = output[i];
    std::vector<double> weights(static_cast<size_t>(out * in), 0.0);
    for (int64_t o = 0; o < out; ++o) {
      const int64_t start = (o * in) / out;
      const int64_t end = ((o + 1) * in + out - 1) / out;
      for (int64_t j = start; j < end; ++j)
        weights[o * in + j] = 1.0 / static_cast<double>(end - start);
    }
    Value matrix = b.ConstantDense(TensorType{x.element_type(), {out, in}}, weights);
    FunctionBuilder::DotDimensions dimensions;
    dimensions.lhs_contracting = {dim};
    dimensions.rhs_contracting = {1};
    Value product =
        b.DotGeneral(x, matrix, dimensions, std::nullopt, FunctionBuilder::Precision::kHighest);
    // dot_general puts the new dim last; move it back to `dim`.
    std::vector<int64_t> permutation;
    for (int64_t d = 0; d < x.rank() - 1; ++d) {
      if (d == dim) permutation.push_back(x.rank() - 1);
      permutation.push_back(d);
    }
    if (dim == x.rank() - 1) permutation.push_back(x.rank() - 1);
    x = b.Transpose(product, permutation);
  }
  return {context.Convert(x, dtype)};
}
TORCH_TPU_LOWERING(AdaptiveAvgPool2d, "aten::_adaptive_avg_pool2d",
                   "aten::_adaptive_avg_pool2d.out");

}  // namespace

}  // namespace torch_tpu::lowering

// Convolutions (1d/2d/3d, strided, padded, dilated, grouped, transposed) and their backward,
// for the PrivateUse1 convolution_overrideable entry points PyTorch routes tpu convolutions to.
// Tensors are in PyTorch's layouts: input N,C,spatial...; weight O,I/groups,spatial...
// (transposed: I,O/groups,spatial...).
#include <c10/util/Exception.h>

#include <optional>

#include "lowering/matmul_precision.h"
#include "lowering/reduction_ops.h"

namespace torch_tpu::lowering {
namespace {

using Dimensions = FunctionBuilder::ConvolutionDimensions;

struct ConvolutionParameters {
  std::vector<int64_t> stride, padding, dilation, output_padding;
  bool transposed;
  int64_t groups;
};

// Arguments (stride, padding, dilation, transposed, output_padding, groups) starting at `first`.
ConvolutionParameters Parameters(LoweringContext& context, std::span<const Operand> operands,
                                 size_t first, int64_t spatial) {
  ConvolutionParameters p;
  auto expand = [&](std::vector<int64_t> values, int64_t fill) {
    if (values.size() == 1 && spatial > 1) values.assign(spatial, values[0]);
    if (values.empty()) values.assign(spatial, fill);
    TORCH_CHECK(static_cast<int64_t>(values.size()) == spatial, context.op_name(), ": expected ",
                spatial, " values per spatial parameter, got ", values.size());
    return values;
  };
  p.stride = expand(context.IntList(operands[first]), 1);
  p.padding = expand(context.IntList(operands[first + 1]), 0);
  p.dilation = expand(context.IntList(operands[first + 2]), 1);
  p.transposed = context.Bool(operands[first + 3]);
  p.output_padding = expand(context.IntList(operands[first + 4]), 0);
  p.groups = context.Int(operands[first + 5]);
  return p;
}

Dimensions Layout(int64_t spatial) {
  Dimensions d;
  for (int64_t i = 0; i < spatial; ++i) {
    d.input_spatial.push_back(2 + i);
    d.kernel_spatial.push_back(2 + i);
    d.output_spatial.push_back(2 + i);
  }
  return d;
}

std::vector<int64_t> SpatialDims(int64_t spatial) {
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < spatial; ++i) dims.push_back(2 + i);
  return dims;
}

// Half types accumulate in f32, as CPU's kernels do; the op rounds its results once.
std::optional<ElementType> Accumulation(const Value& x) {
  const ElementType type = x.element_type();
  if (type == ElementType::kBF16 || type == ElementType::kF16) return ElementType::kF32;
  return std::nullopt;
}

Value Forward(LoweringContext& context, Value x, Value w, const ConvolutionParameters& p) {
  const int64_t spatial = x.rank() - 2;
  std::vector<std::pair<int64_t, int64_t>> padding;
  for (int64_t i = 0; i < spatial; ++i) padding.push_back({p.padding[i], p.padding[i]});
  return context.builder().Convolution(x, w, Layout(spatial), p.stride, padding, {}, p.dilation,
                                       p.groups, 1,
                                       MatmulPrecisionFor(LoweringContext::DtypeOf(x)),
                                       Accumulation(x));
}

// Transposed convolution of x (N, Cin, S) with w (Cin, Cout/g, K): a convolution of the
// stride-dilated input with the spatially flipped kernel regrouped to (Cout, Cin/g, K).
Value Transposed(LoweringContext& context, Value x, Value w, const ConvolutionParameters& p) {
  auto& b = context.builder();
  const int64_t spatial = x.rank() - 2;
  const auto& wd = w.dims();
  const int64_t g = p.groups, in = wd[0], out_per_group = wd[1];
  std::vector<int64_t> grouped = {g, in / g, out_per_group};
  grouped.insert(grouped.end(), wd.begin() + 2, wd.end());
  std::vector<int64_t> permutation = {0, 2, 1};
  for (int64_t i = 0; i < spatial; ++i) permutation.push_back(3 + i);
  std::vector<int64_t> regrouped = {g * out_per_group, in / g};
  regrouped.insert(regrouped.end(), wd.begin() + 2, wd.end());
  Value kernel = b.Reshape(b.Transpose(b.Reshape(w, grouped), permutation), regrouped);
  kernel = b.Reverse(kernel, SpatialDims(spatial));
  std::vector<std::pair<int64_t, int64_t>> padding;
  for (int64_t i = 0; i < spatial; ++i) {
    const int64_t reach = p.dilation[i] * (wd[2 + i] - 1);
    padding.push_back({reach - p.padding[i], reach - p.padding[i] + p.output_padding[i]});
  }
  return b.Convolution(x, kernel, Layout(spatial), {}, padding, p.stride, p.dilation, g, 1,
                       MatmulPrecisionFor(LoweringContext::DtypeOf(x)), Accumulation(x));
}

// Transposed convolution of f16 x (N, Cin, S) with w (Cin, Cout/g, K) as CPU's kernel rounds it
// (gemm then col2im): each kernel tap's products summed over input channels in f32 and rounded
// to f16 (the column buffer), then the taps added into the f16 output one at a time, in kernel
// index order, each addition rounded.
Value TransposedHalf(LoweringContext& context, Value x, Value w, const ConvolutionParameters& p) {
  auto& b = context.builder();
  const int64_t spatial = x.rank() - 2;
  const auto& xd = x.dims();
  const auto& wd = w.dims();
  const int64_t g = p.groups, n = xd[0], in_per_group = wd[0] / g, out_per_group = wd[1];
  std::vector<int64_t> grouped_x = {n, g, in_per_group}, grouped_w = {g, in_per_group,
                                                                      out_per_group};
  std::vector<int64_t> out_dims = {n, g * out_per_group};
  for (int64_t i = 0; i < spatial; ++i) {
    grouped_x.push_back(xd[2 + i]);
    grouped_w.push_back(wd[2 + i]);
    out_dims.push_back((xd[2 + i] - 1) * p.stride[i] - 2 * p.padding[i] +
                       p.dilation[i] * (wd[2 + i] - 1) + p.output_padding[i] + 1);
  }
  FunctionBuilder::DotDimensions dot;
  dot.lhs_batch = {0};
  dot.rhs_batch = {1};
  dot.lhs_contracting = {1};
  dot.rhs_contracting = {2};
  // (g, Cout/g, K..., N, S...), rounded to f16 like CPU's column buffer.
  Value columns = context.Convert(
      b.DotGeneral(b.Reshape(w, grouped_w), b.Reshape(x, grouped_x), dot, ElementType::kF32,
                   FunctionBuilder::Precision::kHighest),
      c10::kHalf);
  const int64_t rank = columns.rank();
  Value out = context.Constant(0.0, c10::kHalf, out_dims);
  Value zero = context.Constant(0.0, c10::kHalf);
  std::vector<int64_t> tap(spatial, 0);
  while (true) {
    std::vector<int64_t> start(rank, 0), limit = columns.dims(), steps(rank, 1);
    std::vector<int64_t> low(spatial + 2, 0), high(spatial + 2, 0), interior(spatial + 2, 0);
    for (int64_t i = 0; i < spatial; ++i) {
      start[2 + i] = tap[i];
      limit[2 + i] = tap[i] + 1;
      const int64_t length = xd[2 + i];
      low[2 + i] = tap[i] * p.dilation[i] - p.padding[i];
      interior[2 + i] = p.stride[i] - 1;
      high[2 + i] = out_dims[2 + i] - (low[2 + i] + (length - 1) * p.stride[i] + 1);
    }
    std::vector<int64_t> squeezed = {g, out_per_group, n};
    for (int64_t i = 0; i < spatial; ++i) squeezed.push_back(xd[2 + i]);
    Value slice = b.Reshape(b.Slice(columns, start, limit, steps), squeezed);
    std::vector<int64_t> permutation = {2, 0, 1};
    for (int64_t i = 0; i < spatial; ++i) permutation.push_back(3 + i);
    std::vector<int64_t> merged = {n, g * out_per_group};
    for (int64_t i = 0; i < spatial; ++i) merged.push_back(xd[2 + i]);
    Value placed = b.Pad(b.Reshape(b.Transpose(slice, permutation), merged), zero, low, high,
                         interior);
    out = context.Convert(b.Add(context.Convert(out, c10::kFloat),
                                context.Convert(placed, c10::kFloat)),
                          c10::kHalf);
    int64_t d = spatial - 1;
    while (d >= 0 && ++tap[d] == wd[2 + d]) tap[d--] = 0;
    if (d < 0) break;
  }
  return out;
}

// Gradient of a regular convolution's weight (O, C/g, K) from its input x (N, C, S) and output
// gradient dy (N, O, So): a convolution over the batch, grouped with batch_group_count.
Value WeightGradient(LoweringContext& context, Value x, Value dy, const ConvolutionParameters& p,
                     const std::vector<int64_t>& kernel_spatial) {
  const int64_t spatial = x.rank() - 2;
  Dimensions d;
  d.input_batch = 1;
  d.input_feature = 0;
  d.kernel_input_feature = 0;
  d.kernel_output_feature = 1;
  d.output_feature = 0;
  d.output_batch = 1;
  std::vector<std::pair<int64_t, int64_t>> padding;
  for (int64_t i = 0; i < spatial; ++i) {
    d.input_spatial.push_back(2 + i);
    d.kernel_spatial.push_back(2 + i);
    d.output_spatial.push_back(2 + i);
    const int64_t input = x.dims()[2 + i], output = dy.dims()[2 + i];
    const int64_t high = (kernel_spatial[i] - 1) * p.dilation[i] + (output - 1) * p.stride[i] + 1 -
                         input - p.padding[i];
    padding.push_back({p.padding[i], high});
  }
  return context.builder().Convolution(x, dy, d, p.dilation, padding, {}, p.stride, 1, p.groups,
                                       MatmulPrecisionFor(LoweringContext::DtypeOf(x)),
                                       Accumulation(x));
}

void CheckInputs(LoweringContext& context, const Operand& input, const Operand& weight) {
  TORCH_CHECK(input.dtype == weight.dtype, context.op_name(), ": Input type (", input.dtype,
              ") and weight type (", weight.dtype, ") should be the same");
  TORCH_CHECK(c10::isFloatingType(input.dtype), context.op_name(),
              ": convolution is only supported for floating point tensors, got ", input.dtype);
  TORCH_CHECK(input.value.rank() >= 3 && input.value.rank() <= 5 &&
                  weight.value.rank() == input.value.rank(),
              context.op_name(),
              ": expected 3-D, 4-D or 5-D input and a weight of the same "
              "rank, got input ",
              c10::IntArrayRef(input.value.dims()), " and weight ",
              c10::IntArrayRef(weight.value.dims()));
}

// convolution_overrideable(input, weight, Tensor? bias, int[] stride, int[] padding,
//   int[] dilation, bool transposed, int[] output_padding, int groups)
std::vector<Value> Convolution(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& input = operands[0];
  const Operand& weight = operands[1];
  CheckInputs(context, input, weight);
  const int64_t spatial = input.value.rank() - 2;
  const ConvolutionParameters p = Parameters(context, operands, 3, spatial);
  const int64_t channels = input.value.dims()[1];
  const int64_t expected =
      p.transposed ? weight.value.dims()[0] : weight.value.dims()[1] * p.groups;
  TORCH_CHECK(channels == expected, context.op_name(), ": Given groups=", p.groups,
              ", weight of size ", c10::IntArrayRef(weight.value.dims()), ", expected input",
              c10::IntArrayRef(input.value.dims()), " to have ", expected, " channels, but got ",
              channels, " channels instead");
  Value result;
  if (p.transposed && input.dtype == c10::kHalf) {
    result = TransposedHalf(context, input.value, weight.value, p);
  } else {
    result = p.transposed ? Transposed(context, input.value, weight.value, p)
                          : Forward(context, input.value, weight.value, p);
  }
  if (!operands[2].is_none()) {
    auto& b = context.builder();
    Value bias = context.Convert(context.Convert(operands[2].value, input.dtype),
                                 LoweringContext::DtypeOf(result));
    result = b.Add(result, b.BroadcastInDim(bias, result.dims(), {1}));
  }
  return {context.Convert(result, input.dtype)};
}
TORCH_TPU_LOWERING(Convolution, "aten::convolution_overrideable");

// convolution_backward_overrideable(grad_output, input, weight, int[] stride, int[] padding,
//   int[] dilation, bool transposed, int[] output_padding, int groups, bool[3] output_mask)
//   -> (grad_input, grad_weight, grad_bias)
std::vector<Value> ConvolutionBackward(LoweringContext& context,
                                       std::span<const Operand> operands) {
  Value dy = operands[0].value;
  const Operand& input = operands[1];
  const Operand& weight = operands[2];
  CheckInputs(context, input, weight);
  const int64_t spatial = input.value.rank() - 2;
  ConvolutionParameters p = Parameters(context, operands, 3, spatial);
  const auto mask = operands[9].ivalue.toBoolList().vec();
  std::vector<int64_t> kernel_spatial(weight.value.dims().begin() + 2, weight.value.dims().end());
  std::vector<Value> results;
  const c10::ScalarType dtype = input.dtype;
  if (mask[0]) {
    if (p.transposed) {
      // An output_padding of at least the stride (allowed below the dilation) adds output
      // positions no input position reaches: the regular convolution then covers more than the
      // input, and the excess is not part of the gradient.
      Value grad = Forward(context, dy, weight.value, p);
      if (grad.dims() != input.value.dims()) {
        grad = context.builder().Slice(grad, std::vector<int64_t>(grad.rank(), 0),
                                       input.value.dims(), std::vector<int64_t>(grad.rank(), 1));
      }
      results.push_back(context.Convert(grad, dtype));
    } else {
      ConvolutionParameters t = p;
      for (int64_t i = 0; i < spatial; ++i) {
        const int64_t covered = (dy.dims()[2 + i] - 1) * p.stride[i] - 2 * p.padding[i] +
                                p.dilation[i] * (kernel_spatial[i] - 1) + 1;
        t.output_padding[i] = input.value.dims()[2 + i] - covered;
      }
      results.push_back(context.Convert(Transposed(context, dy, weight.value, t), dtype));
    }
  } else {
    results.push_back(context.Constant(0.0, dtype, {0}));
  }
  if (mask[1]) {
    results.push_back(context.Convert(
        p.transposed ? WeightGradient(context, dy, input.value, p, kernel_spatial)
                     : WeightGradient(context, input.value, dy, p, kernel_spatial),
        dtype));
  } else {
    results.push_back(context.Constant(0.0, dtype, {0}));
  }
  if (mask[2]) {
    std::vector<int64_t> dims = {0};
    for (int64_t i = 0; i < spatial; ++i) dims.push_back(2 + i);
    results.push_back(ReduceOver(context, dy, dims, ReduceKind::kSum, false));
  } else {
    results.push_back(context.Constant(0.0, dtype, {0}));
  }
  return results;
}
TORCH_TPU_LOWERING(ConvolutionBackward, "aten::convolution_backward_overrideable");

}  // namespace

}  // namespace torch_tpu::lowering

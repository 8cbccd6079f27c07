// Batch normalization (training and eval, running statistics), group normalization, and their
// backward.
#include <c10/util/Exception.h>

#include "lowering/reduction_ops.h"

namespace torch_tpu::lowering {
namespace {

// Broadcasts a per-channel vector (C) to the input's shape (N, C, ...).
Value PerChannel(LoweringContext& context, Value vector, const std::vector<int64_t>& dims) {
  return context.builder().BroadcastInDim(vector, dims, {1});
}

std::vector<int64_t> NonChannelDims(int64_t rank) {
  std::vector<int64_t> dims = {0};
  for (int64_t d = 2; d < rank; ++d) dims.push_back(d);
  return dims;
}

// (input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool training,
//  float momentum, float eps) -> (out, save_mean, save_invstd, new_running_mean, new_running_var)
// The last two are what native_batch_norm writes into the running statistics in place.
std::vector<Value> BatchNorm(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const Operand& input = operands[0];
  const c10::ScalarType dtype = input.dtype;
  const c10::ScalarType compute = ComputeDtype(dtype);
  Value x = context.Convert(input.value, compute);
  TORCH_CHECK(x.rank() >= 2, context.op_name(), ": expected at least 2-D input, got ", x.rank(),
              "-D");
  const auto& dims = x.dims();
  const int64_t channels = dims[1];
  const bool training = context.Bool(operands[5]);
  const double momentum = context.Double(operands[6]);
  const double eps = context.Double(operands[7]);
  const bool has_running = !operands[3].is_none() && !operands[4].is_none();
  const auto reduce = NonChannelDims(x.rank());
  const int64_t count = x.type().NumElements() / std::max<int64_t>(channels, 1);
  Value mean, variance, new_running_mean, new_running_var;
  if (training) {
    TORCH_CHECK(count > 1, context.op_name(),
                ": Expected more than 1 value per channel when training, got input size ",
                c10::IntArrayRef(dims));
    Value n = context.Constant(static_cast<double>(count), compute, {channels});
    mean = b.Divide(ReduceOver(context, x, reduce, ReduceKind::kSum, false), n);
    Value centered = b.Subtract(x, PerChannel(context, mean, dims));
    variance = b.Divide(
        ReduceOver(context, b.Multiply(centered, centered), reduce, ReduceKind::kSum, false), n);
    if (has_running) {
      const c10::ScalarType stats = operands[3].dtype;
      Value unbiased = b.Multiply(
          variance,
          context.Constant(static_cast<double>(count) / (count - 1), compute, {channels}));
      Value keep = context.Constant(1.0 - momentum, compute, {channels});
      Value take = context.Constant(momentum, compute, {channels});
      new_running_mean =
          context.Convert(b.Add(b.Multiply(keep, context.Convert(operands[3].value, compute)),
                                b.Multiply(take, mean)),
                          stats);
      new_running_var =
          context.Convert(b.Add(b.Multiply(keep, context.Convert(operands[4].value, compute)),
                                b.Multiply(take, unbiased)),
                          stats);
    }
  } else {
    TORCH_CHECK(has_running, context.op_name(),
                ": running_mean and running_var must be defined in evaluation mode");
    mean = context.Convert(operands[3].value, compute);
    variance = context.Convert(operands[4].value, compute);
  }
  Value invstd = b.Rsqrt(b.Add(variance, context.Constant(eps, compute, {channels})));
  // In training, CPU normalizes half inputs with the batch mean and invstd rounded to the
  // parameters' dtype (it saves them in tensors of that dtype first): the input's, unless a
  // float32 weight, bias or running statistic makes the op mixed-precision.
  c10::ScalarType parameters = dtype;
  for (size_t i = 1; i <= 4; ++i) {
    if (!operands[i].is_none() && operands[i].dtype == c10::kFloat) parameters = c10::kFloat;
  }
  auto as_parameter = [&](Value value) {
    return context.Convert(context.Convert(value, parameters), compute);
  };
  if (training) {
    mean = as_parameter(mean);
    invstd = as_parameter(invstd);
  }
  Value out =
      b.Multiply(b.Subtract(x, PerChannel(context, mean, dims)), PerChannel(context, invstd, dims));
  if (!operands[1].is_none()) {
    out = b.Multiply(out, PerChannel(context, context.Convert(operands[1].value, compute), dims));
  }
  if (!operands[2].is_none()) {
    out = b.Add(out, PerChannel(context, context.Convert(operands[2].value, compute), dims));
  }
  Value empty = context.Constant(0.0, compute, {0});
  // Saved statistics come back in the input's dtype, as from PyTorch's CPU kernel.
  std::vector<Value> results = {context.Convert(out, dtype),
                                context.Convert(training ? mean : empty, dtype),
                                context.Convert(training ? invstd : empty, dtype)};
  results.push_back(new_running_mean.valid() ? new_running_mean : empty);
  results.push_back(new_running_var.valid() ? new_running_var : empty);
  return results;
}
TORCH_TPU_LOWERING(BatchNorm, "torch_tpu::batch_norm");

// native_batch_norm_backward(grad_out, input, Tensor? weight, Tensor? running_mean,
//   Tensor? running_var, Tensor? save_mean, Tensor? save_invstd, bool train, float eps,
//   bool[3] output_mask) -> (grad_input, grad_weight, grad_bias)
std::vector<Value> BatchNormBackward(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = operands[1].dtype;
  const c10::ScalarType compute = ComputeDtype(dtype);
  Value dy = context.Convert(operands[0].value, compute);
  Value x = context.Convert(operands[1].value, compute);
  const auto& dims = x.dims();
  const int64_t channels = dims[1];
  const bool training = context.Bool(operands[7]);
  const double eps = context.Double(operands[8]);
  const auto mask = operands[9].ivalue.toBoolList().vec();
  const auto reduce = NonChannelDims(x.rank());
  const int64_t count = x.type().NumElements() / std::max<int64_t>(channels, 1);
  Value mean, invstd;
  if (training) {
    mean = context.Convert(operands[5].value, compute);
    invstd = context.Convert(operands[6].value, compute);
  } else {
    mean = context.Convert(operands[3].value, compute);
    invstd = b.Rsqrt(b.Add(context.Convert(operands[4].value, compute),
                           context.Constant(eps, compute, {channels})));
  }
  Value gamma = operands[2].is_none() ? context.Constant(1.0, compute, {channels})
                                      : context.Convert(operands[2].value, compute);
  Value x_hat =
      b.Multiply(b.Subtract(x, PerChannel(context, mean, dims)), PerChannel(context, invstd, dims));
  Value grad_bias = ReduceOver(context, dy, reduce, ReduceKind::kSum, false);
  Value grad_weight = ReduceOver(context, b.Multiply(dy, x_hat), reduce, ReduceKind::kSum, false);
  std::vector<Value> results;
  if (mask[0]) {
    Value scale = PerChannel(context, b.Multiply(gamma, invstd), dims);
    Value grad_input;
    if (training) {
      Value n = context.Constant(static_cast<double>(count), compute, dims);
      Value centered =
          b.Subtract(b.Subtract(b.Multiply(n, dy), PerChannel(context, grad_bias, dims)),
                     b.Multiply(x_hat, PerChannel(context, grad_weight, dims)));
      grad_input = b.Divide(b.Multiply(scale, centered), n);
    } else {
      grad_input = b.Multiply(dy, scale);
    }
    results.push_back(context.Convert(grad_input, dtype));
  } else {
    results.push_back(context.Constant(0.0, dtype, {0}));
  }
  const c10::ScalarType parameter_dtype = operands[2].is_none() ? dtype : operands[2].dtype;
  results.push_back(mask[1] ? context.Convert(grad_weight, parameter_dtype)
                            : context.Constant(0.0, parameter_dtype, {0}));
  results.push_back(mask[2] ? context.Convert(grad_bias, parameter_dtype)
                            : context.Constant(0.0, parameter_dtype, {0}));
  return results;
}
TORCH_TPU_LOWERING(BatchNormBackward, "aten::native_batch_norm_backward");

// Group normalization views the input (N, C, *) as (N, group, C / group * HxW): statistics are
// per (sample, group), the affine parameters per channel. `Grouped` and `Ungrouped` convert
// between the two views.
Value Grouped(LoweringContext& context, Value x, int64_t n, int64_t group) {
  const int64_t numel = x.type().NumElements();
  return context.builder().Reshape(x, {n, group, group == 0 || n == 0 ? 0 : numel / (n * group)});
}

// A per-(sample, group) value (N, group) broadcast over each group's elements.
Value PerGroup(LoweringContext& context, Value statistic, const std::vector<int64_t>& grouped) {
  return context.builder().BroadcastInDim(statistic, grouped, {0, 1});
}

// A per-channel value (C) broadcast to the input's shape (N, C, *).
Value PerChannelOf(LoweringContext& context, const Operand& parameter, c10::ScalarType compute,
                   const std::vector<int64_t>& dims) {
  return PerChannel(context, context.Convert(parameter.value, compute), dims);
}

void CheckGroups(LoweringContext& context, const std::vector<int64_t>& dims, int64_t channels,
                 int64_t group) {
  TORCH_CHECK(group > 0 && channels % group == 0, context.op_name(),
              ": Expected number of channels in input to be divisible by num_groups, but got "
              "input of shape ",
              c10::IntArrayRef(dims), " and num_groups=", group);
  TORCH_CHECK(dims.size() >= 2 && dims[1] == channels, context.op_name(), ": Expected input with ",
              channels, " channels, but got input of shape ", c10::IntArrayRef(dims));
}

// CPU keeps the statistics in float when a float32 weight or bias meets a half input (mixed
// precision), else in the input's dtype.
c10::ScalarType StatisticsDtype(std::span<const Operand> parameters, c10::ScalarType input) {
  for (const Operand& parameter : parameters) {
    if (!parameter.is_none() && parameter.dtype == c10::kFloat) return c10::kFloat;
  }
  return input;
}

// native_group_norm(input, Tensor? weight, Tensor? bias, SymInt N, SymInt C, SymInt HxW,
//   int group, float eps) -> (out, mean, rstd); mean and rstd are (N, group).
std::vector<Value> GroupNorm(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = operands[0].dtype;
  const c10::ScalarType compute = ComputeDtype(dtype);
  Value input = context.Convert(operands[0].value, compute);
  const auto& dims = input.dims();
  const int64_t n = context.Int(operands[3]);
  const int64_t group = context.Int(operands[6]);
  CheckGroups(context, dims, context.Int(operands[4]), group);
  const double eps = context.Double(operands[7]);
  Value x = Grouped(context, input, n, group);
  const auto& grouped = x.dims();
  Value count =
      context.Constant(static_cast<double>(std::max<int64_t>(grouped[2], 1)), compute, {n, group});
  Value mean = b.Divide(ReduceOver(context, x, {2}, ReduceKind::kSum, false), count);
  Value centered = b.Subtract(x, PerGroup(context, mean, grouped));
  Value variance = b.Divide(
      ReduceOver(context, b.Multiply(centered, centered), {2}, ReduceKind::kSum, false), count);
  Value rstd = b.Rsqrt(b.Add(variance, context.Constant(eps, compute, {n, group})));
  Value out = b.Reshape(b.Multiply(centered, PerGroup(context, rstd, grouped)), dims);
  if (!operands[1].is_none())
    out = b.Multiply(out, PerChannelOf(context, operands[1], compute, dims));
  if (!operands[2].is_none()) out = b.Add(out, PerChannelOf(context, operands[2], compute, dims));
  const c10::ScalarType statistics = StatisticsDtype(operands.subspan(1, 2), dtype);
  return {context.Convert(out, dtype), context.Convert(mean, statistics),
          context.Convert(rstd, statistics)};
}
TORCH_TPU_LOWERING(GroupNorm, "aten::native_group_norm", "aten::native_group_norm.out");

// native_group_norm_backward(grad_out, input, mean, rstd, Tensor? weight, SymInt N, SymInt C,
//   SymInt HxW, int group, bool[3] output_mask) -> (grad_input, grad_weight, grad_bias)
// With x_hat = (x - mean) * rstd and g = grad_out * weight, per group:
//   grad_input = rstd * (g - mean(g) - x_hat * mean(g * x_hat)).
std::vector<Value> GroupNormBackward(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = operands[1].dtype;
  const c10::ScalarType compute = ComputeDtype(dtype);
  Value dy = context.Convert(operands[0].value, compute);
  Value input = context.Convert(operands[1].value, compute);
  const auto& dims = input.dims();
  TORCH_CHECK(operands[0].value.dims() == dims, context.op_name(),
              ": Expected grad_out to have the input's shape ", c10::IntArrayRef(dims),
              ", but got ", c10::IntArrayRef(operands[0].value.dims()));
  const int64_t n = context.Int(operands[5]);
  const int64_t channels = context.Int(operands[6]);
  const int64_t group = context.Int(operands[8]);
  CheckGroups(context, dims, channels, group);
  const auto mask = operands[9].ivalue.toBoolList().vec();
  const bool has_weight = !operands[4].is_none();
  const auto reduce = NonChannelDims(input.rank());
  Value x = Grouped(context, input, n, group);
  const auto& grouped = x.dims();
  Value mean = PerGroup(context, context.Convert(operands[2].value, compute), grouped);
  Value rstd = PerGroup(context, context.Convert(operands[3].value, compute), grouped);
  Value x_hat = b.Multiply(b.Subtract(x, mean), rstd);
  std::vector<Value> results;
  if (mask[0]) {
    Value g = has_weight ? b.Multiply(dy, PerChannelOf(context, operands[4], compute, dims)) : dy;
    g = Grouped(context, g, n, group);
    Value count = context.Constant(static_cast<double>(std::max<int64_t>(grouped[2], 1)), compute,
                                   {n, group});
    Value mean_g = b.Divide(ReduceOver(context, g, {2}, ReduceKind::kSum, false), count);
    Value mean_gx =
        b.Divide(ReduceOver(context, b.Multiply(g, x_hat), {2}, ReduceKind::kSum, false), count);
    Value grad_input =
        b.Multiply(rstd, b.Subtract(b.Subtract(g, PerGroup(context, mean_g, grouped)),
                                    b.Multiply(x_hat, PerGroup(context, mean_gx, grouped))));
    results.push_back(context.Convert(b.Reshape(grad_input, dims), dtype));
  } else {
    results.push_back(context.Constant(0.0, dtype, {0}));
  }
  const c10::ScalarType parameter_dtype = has_weight ? operands[4].dtype : dtype;
  Value normalized = b.Reshape(x_hat, dims);
  results.push_back(mask[1] ? context.Convert(ReduceOver(context, b.Multiply(dy, normalized),
                                                         reduce, ReduceKind::kSum, false),
                                              parameter_dtype)
                            : context.Constant(0.0, parameter_dtype, {0}));
  results.push_back(mask[2]
                        ? context.Convert(ReduceOver(context, dy, reduce, ReduceKind::kSum, false),
                                          parameter_dtype)
                        : context.Constant(0.0, parameter_dtype, {0}));
  return results;
}
TORCH_TPU_LOWERING(GroupNormBackward, "aten::native_group_norm_backward",
                   "aten::native_group_norm_backward.out");

}  // namespace

}  // namespace torch_tpu::lowering

// Batch normalization (training and eval, running statistics) and its backward.
#include <c10/util/Exception.h>

#include "lowering/reduction_ops.h"

namespace torch_tpu::lowering {
namespace {

using stablehlo::Value;

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

}  // namespace

}  // namespace torch_tpu::lowering

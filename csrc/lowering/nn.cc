// Neural-network ops that real training hits: softmax/log_softmax, layer norm, losses,
// embedding backward, dropout, and their backward formulas. Half-precision inputs are computed in
// f32 like PyTorch's kernels.
#include <c10/util/Exception.h>

#include <cmath>

#include "lowering/extremum.h"
#include "lowering/opmath.h"
#include "lowering/reduction_ops.h"

namespace torch_tpu::lowering {
namespace {

Value Broadcast(LoweringContext& context, Value value, const Value& like) {
  return context.BroadcastTo(value, like.dims());
}

// (log_)softmax of `x` (already in its compute type) along `dim`, shifted by the maximum.
template <bool kLog>
Value SoftmaxOver(LoweringContext& context, const Value& x, int64_t dim) {
  auto& b = context.builder();
  const std::vector<int64_t> dims = {dim};
  Value maximum = ReduceOver(context, x, dims, ReduceKind::kMax, true);
  Value shifted = b.Subtract(x, Broadcast(context, maximum, x));
  Value exponentials = b.Exp(shifted);
  Value sum = ReduceOver(context, exponentials, dims, ReduceKind::kSum, true);
  return kLog ? b.Subtract(shifted, Broadcast(context, b.Log(sum), x))
              : b.Divide(exponentials, Broadcast(context, sum, x));
}

// Softmax of `x` along `dim` with rows of only -inf (fully masked) as zeros.
Value SafeSoftmaxOver(LoweringContext& context, const Value& x, int64_t dim) {
  auto& b = context.builder();
  const c10::ScalarType dtype = LoweringContext::DtypeOf(x);
  Value masked = b.Compare(x, context.Constant(-INFINITY, dtype, x.dims()), Direction::kEq);
  Value masked_rows = ReduceOver(context, masked, {dim}, ReduceKind::kAnd, true);
  return b.Select(Broadcast(context, masked_rows, x), context.Constant(0.0, dtype, x.dims()),
                  SoftmaxOver<false>(context, x, dim));
}

// _softmax / _log_softmax(self, int dim, bool half_to_float)
template <bool kLog>
std::vector<Value> Softmax(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  auto& b = context.builder();
  const bool half_to_float = context.Bool(operands[2]);
  const c10::ScalarType result_dtype = half_to_float ? c10::kFloat : self.dtype;
  const c10::ScalarType compute = ComputeDtype(self.dtype);
  if (!c10::isFloatingType(self.dtype)) {
    // CPU names the kernel it lacks, which depends on the dimension.
    const bool last =
        self.value.rank() == 0 ||
        context.WrapDim(context.Int(operands[1]), self.value.rank()) == self.value.rank() - 1;
    const std::string kernel =
        std::string(kLog ? "log_" : "") + "softmax_" + (last ? "lastdim_" : "") + "kernel_impl";
    CheckKernelDtype(context, false, kernel.c_str(), self.dtype);
  }
  Value x = context.Convert(self.value, compute);
  if (x.rank() == 0) {  // a one-element row: 1 (log: 0), but NaN for a NaN or infinite input
    context.WrapDim(context.Int(operands[1]), 0);
    Value row = SoftmaxOver<kLog>(context, b.Reshape(x, {1}), 0);
    return {context.Convert(b.Reshape(row, {}), result_dtype)};
  }
  const int64_t dim = context.WrapDim(context.Int(operands[1]), x.rank());
  return {context.Convert(SoftmaxOver<kLog>(context, x, dim), result_dtype)};
}
TORCH_TPU_LOWERING(Softmax<false>, "aten::_softmax", "aten::_softmax.out");
TORCH_TPU_LOWERING(Softmax<true>, "aten::_log_softmax", "aten::_log_softmax.out");

// _safe_softmax(self, int dim, ScalarType? dtype): softmax whose rows of only -inf are zeros
// (SDPA's fully masked attention rows). ATen's composite is five programs per shape (softmax, eq,
// all, zeros, where), which a generation loop pays for every new key length.
std::vector<Value> SafeSoftmax(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  auto& b = context.builder();
  // softmax(self, dim, dtype) converts to `dtype` first, then runs _softmax in that type.
  const c10::ScalarType result_dtype = context.OptionalDtype(operands[2]).value_or(self.dtype);
  const bool last =
      self.value.rank() == 0 ||
      context.WrapDim(context.Int(operands[1]), self.value.rank()) == self.value.rank() - 1;
  CheckKernelDtype(context, c10::isFloatingType(result_dtype),
                   last ? "softmax_lastdim_kernel_impl" : "softmax_kernel_impl", result_dtype);
  const c10::ScalarType compute = ComputeDtype(result_dtype);
  Value x = context.Convert(context.Convert(self.value, result_dtype), compute);
  if (x.rank() == 0) {
    // A lone -inf is a fully masked row.
    Value masked = b.Compare(x, context.Constant(-INFINITY, compute), Direction::kEq);
    return {context.Convert(b.Select(masked, context.Constant(0.0, compute),
                                     context.Constant(1.0, compute)),
                            result_dtype)};
  }
  const int64_t dim = context.WrapDim(context.Int(operands[1]), x.rank());
  return {context.Convert(SafeSoftmaxOver(context, x, dim), result_dtype)};
}
TORCH_TPU_LOWERING(SafeSoftmax, "aten::_safe_softmax");

// _softmax_backward_data(grad_output, output, int dim, ScalarType input_dtype)
// _log_softmax_backward_data(grad_output, output, int dim, ScalarType input_dtype)
template <bool kLog>
std::vector<Value> SoftmaxBackward(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType input_dtype = static_cast<c10::ScalarType>(operands[3].ivalue.toInt());
  const c10::ScalarType compute = ComputeDtype(operands[0].dtype);
  Value grad = context.Convert(operands[0].value, compute);
  Value output = context.Convert(operands[1].value, compute);
  if (grad.rank() == 0)
    return {context.Convert(kLog ? grad : context.Constant(0.0, compute), input_dtype)};
  const std::vector<int64_t> dims = {context.WrapDim(context.Int(operands[2]), grad.rank())};
  Value result;
  if (kLog) {
    Value sum = ReduceOver(context, grad, dims, ReduceKind::kSum, true);
    result = b.Subtract(grad, b.Multiply(b.Exp(output), Broadcast(context, sum, grad)));
  } else {
    Value product = b.Multiply(grad, output);
    Value sum = ReduceOver(context, product, dims, ReduceKind::kSum, true);
    result = b.Subtract(product, b.Multiply(output, Broadcast(context, sum, grad)));
  }
  return {context.Convert(result, input_dtype)};
}
TORCH_TPU_LOWERING(SoftmaxBackward<false>, "aten::_softmax_backward_data",
                   "aten::_softmax_backward_data.out");
TORCH_TPU_LOWERING(SoftmaxBackward<true>, "aten::_log_softmax_backward_data",
                   "aten::_log_softmax_backward_data.out");

// CPU's 1 / sqrt(v), each step correctly rounded. XLA rewrites a division by a square root into
// rsqrt, which may differ by an ulp (a visible difference once the backward multiplies by
// rstd^3), so an f32 quotient is taken in f64, where rounding back to f32 is still exact.
Value ReciprocalSqrt(LoweringContext& context, Value v) {
  auto& b = context.builder();
  if (v.element_type() != ElementType::kF32) return b.Rsqrt(v);
  Value root = context.Convert(b.Sqrt(v), c10::kDouble);
  return context.Convert(b.Divide(FullLike(context, 1.0, root), root), c10::kFloat);
}

// native_layer_norm(input, int[] normalized_shape, Tensor? weight, Tensor? bias, float eps)
//   -> (out, mean, rstd); mean/rstd keep the normalized dims as size 1.
std::vector<Value> LayerNorm(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const Operand& input = operands[0];
  const auto normalized = context.IntList(operands[1]);
  const double eps = context.Double(operands[4]);
  const c10::ScalarType compute = ComputeDtype(input.dtype);
  Value x = context.Convert(input.value, compute);
  const int64_t rank = x.rank();
  const int64_t axis = rank - static_cast<int64_t>(normalized.size());
  TORCH_CHECK(axis >= 0, context.op_name(), ": normalized_shape has more dims than the input");
  std::vector<int64_t> dims;
  int64_t count = 1;
  for (int64_t d = axis; d < rank; ++d) {
    TORCH_CHECK(x.dims()[d] == normalized[d - axis], context.op_name(),
                ": Given normalized_shape=", c10::IntArrayRef(normalized),
                ", expected input with shape [*, ...] matching it, but got input of size ",
                c10::IntArrayRef(x.dims()));
    dims.push_back(d);
    count *= x.dims()[d];
  }
  Value n = context.Constant(static_cast<double>(count), compute, KeptDims(x.dims(), dims));
  Value mean = b.Divide(ReduceOver(context, x, dims, ReduceKind::kSum, true), n);
  Value centered = b.Subtract(x, Broadcast(context, mean, x));
  Value variance = b.Divide(
      ReduceOver(context, b.Multiply(centered, centered), dims, ReduceKind::kSum, true), n);
  Value rstd = ReciprocalSqrt(
      context, b.Add(variance, context.Constant(eps, compute, variance.dims())));
  Value out = b.Multiply(centered, Broadcast(context, rstd, x));
  if (!operands[2].is_none())
    out = b.Multiply(out, Broadcast(context, context.Convert(operands[2].value, compute), x));
  if (!operands[3].is_none())
    out = b.Add(out, Broadcast(context, context.Convert(operands[3].value, compute), x));
  const c10::ScalarType stats_dtype = input.dtype;
  return {context.Convert(out, input.dtype), context.Convert(mean, stats_dtype),
          context.Convert(rstd, stats_dtype)};
}
TORCH_TPU_LOWERING(LayerNorm, "aten::native_layer_norm");

// native_layer_norm_backward(grad_out, input, int[] normalized_shape, mean, rstd, Tensor? weight,
//   Tensor? bias, bool[3] output_mask) -> (grad_input, grad_weight, grad_bias)
std::vector<Value> LayerNormBackward(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = operands[1].dtype;
  const c10::ScalarType compute = ComputeDtype(dtype);
  Value grad = context.Convert(operands[0].value, compute);
  Value x = context.Convert(operands[1].value, compute);
  const auto normalized = context.IntList(operands[2]);
  Value mean = Broadcast(context, context.Convert(operands[3].value, compute), x);
  Value rstd = Broadcast(context, context.Convert(operands[4].value, compute), x);
  const bool has_weight = !operands[5].is_none();
  const bool has_bias = !operands[6].is_none();
  const auto mask = operands[7].ivalue.toBoolList().vec();
  const int64_t rank = x.rank();
  const int64_t axis = rank - static_cast<int64_t>(normalized.size());
  std::vector<int64_t> inner, outer;
  int64_t count = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (d >= axis) {
      inner.push_back(d);
      count *= x.dims()[d];
    } else {
      outer.push_back(d);
    }
  }
  // CPU's x_hat for the weight's gradient: rstd * x - rstd * mean.
  Value x_hat = b.Add(b.Multiply(rstd, x), b.Multiply(b.Negate(rstd), mean));
  Value weight;
  Value weighted = grad;
  if (has_weight) {
    weight = Broadcast(context, context.Convert(operands[5].value, compute), x);
    weighted = b.Multiply(grad, weight);
  }
  std::vector<Value> results;
  if (mask[0]) {
    // CPU's formula and order: dx = rstd * dy * w + p * x + q, p = (db * mean - ds) * rstd^3 / N,
    // q = -p * mean - db * rstd / N, with ds = sum(dy * x * w) and db = sum(dy * w). With few
    // normalized elements rstd is large and any other arrangement rounds visibly differently.
    Value scale = context.Constant(1.0 / static_cast<double>(count), compute, x.dims());
    auto row_sum = [&](Value v) {
      return Broadcast(context, ReduceOver(context, v, inner, ReduceKind::kSum, true), x);
    };
    Value ds = b.Multiply(grad, x);
    if (has_weight) ds = b.Multiply(ds, weight);
    ds = row_sum(ds);
    Value db = row_sum(weighted);
    Value p = b.Subtract(b.Multiply(db, mean), ds);
    for (int i = 0; i < 3; ++i) p = b.Multiply(p, rstd);
    p = b.Multiply(p, scale);
    Value q = b.Subtract(b.Multiply(b.Negate(p), mean), b.Multiply(b.Multiply(db, rstd), scale));
    Value direct = b.Multiply(rstd, grad);
    if (has_weight) direct = b.Multiply(direct, weight);
    Value grad_input = b.Add(b.Add(direct, b.Multiply(p, x)), q);
    results.push_back(context.Convert(grad_input, dtype));
  } else {
    results.push_back(context.Constant(0.0, dtype, {0}));
  }
  auto parameter_grad = [&](bool wanted, bool present, const Operand& parameter, Value term) {
    if (!wanted || !present) {
      results.push_back(context.Constant(0.0, dtype, {0}));
      return;
    }
    Value reduced =
        outer.empty() ? term : ReduceOver(context, term, outer, ReduceKind::kSum, false);
    results.push_back(context.Convert(b.Reshape(reduced, parameter.value.dims()), parameter.dtype));
  };
  parameter_grad(mask[1], has_weight, operands[5], b.Multiply(grad, x_hat));
  parameter_grad(mask[2], has_bias, operands[6], grad);
  return results;
}
TORCH_TPU_LOWERING(LayerNormBackward, "aten::native_layer_norm_backward");

int64_t ReductionOf(LoweringContext& context, const Operand& operand) {
  return context.Int(operand);  // 0 none, 1 mean, 2 sum (at::Reduction)
}

// nll_loss_forward(self, target, Tensor? weight, int reduction, SymInt ignore_index)
//   -> (output, total_weight)
std::vector<Value> NllLossForward(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const Operand& self = operands[0];
  const c10::ScalarType dtype = self.dtype;
  const c10::ScalarType compute = ComputeDtype(dtype);
  Value logits = context.Convert(self.value, compute);
  const bool batched = logits.rank() == 2;
  TORCH_CHECK(logits.rank() == 1 || batched, context.op_name(),
              ": input tensor should be 1D or 2D");
  if (!batched) logits = b.Reshape(logits, {1, logits.dims()[0]});
  Value target = context.Convert(operands[1].value, c10::kLong);
  if (target.rank() == 0) target = b.Reshape(target, {1});
  const int64_t n = logits.dims()[0], classes = logits.dims()[1];
  const int64_t ignore_index = context.Int(operands[4]);
  const int64_t reduction = ReductionOf(context, operands[3]);
  // Targets equal to ignore_index may lie outside [0, classes); every other one is a class.
  Value ignored = b.Compare(target, context.ConstantInt(ignore_index, c10::kLong, target.dims()),
                            Direction::kEq);
  context.CheckIndicesInRange(
      b.Select(ignored, context.ConstantInt(0, c10::kLong, target.dims()), target), classes, false);
  // One-hot selection instead of a gather: also correct for ignore_index outside [0, classes).
  Value class_ids = b.Iota(TensorType{ElementType::kS64, {n, classes}}, 1);
  Value picks = b.Compare(class_ids, context.BroadcastTo(b.Reshape(target, {n, 1}), {n, classes}),
                          Direction::kEq);
  Value weights = context.Constant(1.0, compute, {n, classes});
  if (!operands[2].is_none()) {
    weights = context.BroadcastTo(context.Convert(operands[2].value, compute), {n, classes});
  }
  Value kept =
      b.Compare(target, context.ConstantInt(ignore_index, c10::kLong, {n}), Direction::kNe);
  Value zero = context.Constant(0.0, compute, {n, classes});
  Value selected_weight = b.Select(picks, weights, zero);
  Value sample_weight = ReduceOver(context, selected_weight, {1}, ReduceKind::kSum, false);
  sample_weight = b.Select(kept, sample_weight, context.Constant(0.0, compute, {n}));
  Value picked = ReduceOver(context, b.Select(picks, logits, zero), {1}, ReduceKind::kSum, false);
  Value losses = b.Negate(b.Multiply(picked, sample_weight));
  Value total_weight = ReduceOver(context, sample_weight, {0}, ReduceKind::kSum, false);
  Value output;
  if (reduction == 0) {
    output = batched ? losses : b.Reshape(losses, {});
  } else {
    output = ReduceOver(context, losses, {0}, ReduceKind::kSum, false);
    if (reduction == 1) output = b.Divide(output, total_weight);
  }
  return {context.Convert(output, dtype), context.Convert(total_weight, dtype)};
}
TORCH_TPU_LOWERING(NllLossForward, "aten::nll_loss_forward");

// nll_loss_backward(grad_output, self, target, Tensor? weight, int reduction, SymInt
//   ignore_index, Tensor total_weight) -> grad_input
std::vector<Value> NllLossBackward(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const Operand& self = operands[1];
  const c10::ScalarType dtype = self.dtype;
  const c10::ScalarType compute = ComputeDtype(dtype);
  const bool batched = self.value.rank() == 2;
  const int64_t n = batched ? self.value.dims()[0] : 1;
  const int64_t classes = self.value.dims()[batched ? 1 : 0];
  Value target = context.Convert(operands[2].value, c10::kLong);
  target = b.Reshape(target, {n});
  const int64_t reduction = ReductionOf(context, operands[4]);
  const int64_t ignore_index = context.Int(operands[5]);
  Value class_ids = b.Iota(TensorType{ElementType::kS64, {n, classes}}, 1);
  Value picks = b.Compare(class_ids, context.BroadcastTo(b.Reshape(target, {n, 1}), {n, classes}),
                          Direction::kEq);
  Value kept = context.BroadcastTo(
      b.Reshape(
          b.Compare(target, context.ConstantInt(ignore_index, c10::kLong, {n}), Direction::kNe),
          {n, 1}),
      {n, classes});
  Value weights = context.Constant(1.0, compute, {n, classes});
  if (!operands[3].is_none()) {
    weights = context.BroadcastTo(context.Convert(operands[3].value, compute), {n, classes});
  }
  Value grad = context.Convert(operands[0].value, compute);
  if (reduction == 0 && batched) {
    grad = context.BroadcastTo(b.Reshape(grad, {n, 1}), {n, classes});
  } else {
    grad = context.BroadcastTo(b.Reshape(grad, {1, 1}), {n, classes});
    if (reduction == 1) {
      Value total = context.BroadcastTo(
          b.Reshape(context.Convert(operands[6].value, compute), {1, 1}), {n, classes});
      grad = b.Divide(grad, total);
    }
  }
  Value zero = context.Constant(0.0, compute, {n, classes});
  Value result = b.Select(b.And(picks, kept), b.Negate(b.Multiply(grad, weights)), zero);
  if (!batched) result = b.Reshape(result, {classes});
  return {context.Convert(result, dtype)};
}
TORCH_TPU_LOWERING(NllLossBackward, "aten::nll_loss_backward");

// channel_shuffle(self, SymInt groups): channels viewed as [groups, C / groups], transposed.
std::vector<Value> ChannelShuffle(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value x = operands[0].value;
  const int64_t groups = context.Int(operands[1]);
  TORCH_CHECK(x.rank() > 2, context.op_name(),
              ": channel_shuffle expects input to have more than 2 dimensions, but got input "
              "with sizes ",
              x.type().ToString());
  TORCH_CHECK(
      groups > 0, context.op_name(),
      ": Number of groups to divide channels in must be positive. Value of groups:", groups);
  const int64_t channels = x.dims()[1];
  TORCH_CHECK(channels % groups == 0, context.op_name(),
              ": Number of channels must be divisible by groups. Got ", channels, " channels and ",
              groups, " groups.");
  std::vector<int64_t> split = {x.dims()[0], groups, channels / groups};
  split.insert(split.end(), x.dims().begin() + 2, x.dims().end());
  std::vector<int64_t> permutation(split.size());
  for (size_t d = 0; d < split.size(); ++d) permutation[d] = static_cast<int64_t>(d);
  std::swap(permutation[1], permutation[2]);
  return {b.Reshape(b.Transpose(b.Reshape(x, split), permutation), x.dims())};
}
TORCH_TPU_LOWERING(ChannelShuffle, "aten::channel_shuffle", "aten::channel_shuffle.out");

// Reduces an elementwise loss (in the compute dtype) by `reduction` (0 none, 1 mean, 2 sum).
Value ReduceLoss(LoweringContext& context, Value loss, int64_t reduction) {
  if (reduction == 0 || loss.rank() == 0) return loss;
  std::vector<int64_t> all(loss.rank());
  for (int64_t d = 0; d < loss.rank(); ++d) all[d] = d;
  Value sum = ReduceOver(context, loss, all, ReduceKind::kSum, false);
  if (reduction != 1) return sum;
  return context.builder().Divide(sum,
                                  context.Constant(static_cast<double>(loss.type().NumElements()),
                                                   LoweringContext::DtypeOf(loss)));
}

// mse_loss(self, target, int reduction=Mean)
std::vector<Value> MseLoss(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = context.PromotedType(operands.subspan(0, 2));
  CheckKernelDtype(context, c10::isFloatingType(dtype), "mse_cpu", dtype);
  auto values = context.PromoteAndBroadcast(operands.subspan(0, 2), ComputeDtype(dtype));
  // CPU rounds the difference and its square to the input dtype (its elementwise kernel runs in
  // that dtype) and averages in f32; half types round the same way here.
  auto rounded = [&](Value value) { return RoundThrough(context, value, dtype); };
  Value difference = rounded(b.Subtract(values[0], values[1]));
  Value squared = rounded(b.Multiply(difference, difference));
  return {context.Convert(ReduceLoss(context, squared, ReductionOf(context, operands[2])), dtype)};
}
TORCH_TPU_LOWERING(MseLoss, "aten::mse_loss", "aten::mse_loss.out");

// The operands of a pointwise loss's backward (grad_output, self, target, int reduction, ...)
// in the compute dtype, broadcast to their common shape, and the mean reduction's 1 / count.
struct LossBackwardOperands {
  Value x, y, grad;
  double norm;
  std::vector<int64_t> shape;
};

LossBackwardOperands LossBackwardInputs(LoweringContext& context,
                                        std::span<const Operand> operands) {
  const c10::ScalarType compute = ComputeDtype(operands[1].dtype);
  std::vector<std::vector<int64_t>> shapes = {operands[1].value.dims(), operands[2].value.dims()};
  const auto shape = context.BroadcastShape(shapes);
  LossBackwardOperands result;
  result.shape = shape;
  result.x = context.BroadcastTo(context.Convert(operands[1].value, compute), shape);
  result.y = context.BroadcastTo(context.Convert(operands[2].value, compute), shape);
  result.grad = context.BroadcastTo(context.Convert(operands[0].value, compute), shape);
  result.norm = 1.0;
  if (ReductionOf(context, operands[3]) == 1) {
    int64_t count = 1;
    for (int64_t size : shape) count *= size;
    result.norm = 1.0 / static_cast<double>(std::max<int64_t>(count, 1));
  }
  return result;
}

// mse_loss_backward(grad_output, self, target, int reduction)
std::vector<Value> MseLossBackward(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = operands[1].dtype;
  const auto in = LossBackwardInputs(context, operands);
  Value scale = context.Constant(2.0 * in.norm, ComputeDtype(dtype), in.shape);
  return {context.Convert(b.Multiply(b.Multiply(scale, b.Subtract(in.x, in.y)), in.grad), dtype)};
}
TORCH_TPU_LOWERING(MseLossBackward, "aten::mse_loss_backward",
                   "aten::mse_loss_backward.grad_input");

// huber_loss(self, target, int reduction=Mean, float delta=1.0) and
// smooth_l1_loss(self, target, int reduction=Mean, float beta=1.0), which is huber / beta: both
// quadratic below the threshold and linear above it.
template <bool kHuber>
std::vector<Value> HuberLikeLoss(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = context.PromotedType(operands.subspan(0, 2));
  const double threshold = context.Double(operands[3]);
  TORCH_CHECK(kHuber ? threshold > 0 : threshold >= 0, context.op_name(),
              kHuber ? ": huber_loss does not support non-positive values for delta."
                     : ": smooth_l1_loss does not support negative values for beta.");
  auto values = context.PromoteAndBroadcast(operands.subspan(0, 2), ComputeDtype(dtype));
  // CPU's huber kernel runs in the input dtype (half types round after every step); its smooth
  // L1 kernel computes in f32 and rounds once.
  auto r = [&](Value value) { return kHuber ? RoundThrough(context, value, dtype) : value; };
  Value z = b.Abs(r(b.Subtract(values[0], values[1])));
  Value t = r(context.Constant(threshold, ComputeDtype(dtype), z.dims()));
  Value half = context.Constant(0.5, ComputeDtype(dtype), z.dims());
  Value quadratic = r(b.Multiply(r(b.Multiply(half, z)), z));
  Value linear = kHuber ? r(b.Multiply(t, r(b.Subtract(z, r(b.Multiply(half, t))))))
                        : r(b.Subtract(z, r(b.Multiply(half, t))));
  if (!kHuber) quadratic = r(b.Divide(quadratic, t));
  Value loss = b.Select(b.Compare(z, t, Direction::kLt), quadratic, linear);
  return {context.Convert(ReduceLoss(context, loss, ReductionOf(context, operands[2])), dtype)};
}
TORCH_TPU_LOWERING(HuberLikeLoss<true>, "aten::huber_loss", "aten::huber_loss.out");
TORCH_TPU_LOWERING(HuberLikeLoss<false>, "aten::smooth_l1_loss", "aten::smooth_l1_loss.out");

// huber_loss_backward / smooth_l1_loss_backward(grad_output, self, target, int reduction,
// float delta_or_beta): the derivative clipped at +-delta (huber) or +-1 (smooth L1).
template <bool kHuber>
std::vector<Value> HuberLikeLossBackward(LoweringContext& context,
                                         std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = operands[1].dtype;
  const c10::ScalarType compute = ComputeDtype(dtype);
  const auto in = LossBackwardInputs(context, operands);
  const auto& shape = in.shape;
  const double threshold = context.Double(operands[4]);
  Value d = b.Subtract(in.x, in.y);
  Value scaled_grad = b.Multiply(in.grad, context.Constant(in.norm, compute, shape));
  // The linear side's slope: delta for huber, 1 for smooth L1.
  Value slope = context.Constant(kHuber ? threshold : 1.0, compute, shape);
  Value t = context.Constant(threshold, compute, shape);
  Value inner = kHuber ? b.Multiply(scaled_grad, d) : b.Divide(b.Multiply(scaled_grad, d), t);
  // The same comparison order as CPU's kernel, which decides the point d == 0 when beta is 0.
  Value result =
      b.Select(b.Compare(d, b.Negate(t), Direction::kLe), b.Negate(b.Multiply(scaled_grad, slope)),
               b.Select(b.Compare(d, t, Direction::kGe), b.Multiply(scaled_grad, slope), inner));
  return {context.Convert(result, dtype)};
}
TORCH_TPU_LOWERING(HuberLikeLossBackward<true>, "aten::huber_loss_backward",
                   "aten::huber_loss_backward.out");
TORCH_TPU_LOWERING(HuberLikeLossBackward<false>, "aten::smooth_l1_loss_backward",
                   "aten::smooth_l1_loss_backward.grad_input");

// embedding_dense_backward(grad_output, indices, SymInt num_weights, SymInt padding_idx,
//   bool scale_grad_by_freq)
std::vector<Value> EmbeddingDenseBackward(LoweringContext& context,
                                          std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = operands[0].dtype;
  const c10::ScalarType compute = ComputeDtype(dtype);
  Value indices = context.Convert(operands[1].value, c10::kLong);
  const int64_t count = indices.type().NumElements();
  const int64_t num_weights = context.Int(operands[2]);
  const int64_t padding_idx = context.Int(operands[3]);
  TORCH_CHECK(!context.Bool(operands[4]), context.op_name(),
              ": scale_grad_by_freq is not supported on tpu yet");
  const int64_t width = operands[0].value.dims().back();
  Value grad = b.Reshape(context.Convert(operands[0].value, compute), {count, width});
  Value flat = b.Reshape(indices, {count});
  // Rows of padding_idx get no gradient (and padding_idx itself is not checked).
  Value keep =
      b.Compare(flat, context.ConstantInt(padding_idx, c10::kLong, {count}), Direction::kNe);
  context.CheckIndicesInRange(b.Select(keep, flat, context.ConstantInt(0, c10::kLong, {count})),
                              num_weights, false);
  grad = b.Select(context.BroadcastTo(b.Reshape(keep, {count, 1}), {count, width}), grad,
                  context.Constant(0.0, compute, {count, width}));
  FunctionBuilder::ScatterDimensions dimensions;
  dimensions.update_window_dims = {1};
  dimensions.inserted_window_dims = {0};
  dimensions.scatter_dims_to_operand_dims = {0};
  dimensions.index_vector_dim = 1;
  Value zeros = context.Constant(0.0, compute, {num_weights, width});
  Value result = b.Scatter({zeros}, flat, {grad}, dimensions,
                           [](FunctionBuilder& body, std::span<const Value> args) {
                             return std::vector<Value>{body.Add(args[0], args[1])};
                           })[0];
  return {context.Convert(result, dtype)};
}
TORCH_TPU_LOWERING(EmbeddingDenseBackward, "aten::embedding_dense_backward");

// native_dropout(input, float p, bool? train) -> (output, mask)
std::vector<Value> NativeDropout(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const Operand& input = operands[0];
  const double p = context.Double(operands[1]);
  const bool train = operands[2].is_none() || context.Bool(operands[2]);
  const auto& dims = input.value.dims();
  if (!train || p == 0.0) {
    return {input.value, b.Constant(ElementType::kPred, 1.0, dims)};
  }
  const c10::ScalarType compute = ComputeDtype(input.dtype);
  auto [state, bits] = b.RngBitGenerator(context.rng_state(0), TensorType{ElementType::kU32, dims},
                                         FunctionBuilder::RngAlgorithm::kThreeFry);
  (void)state;
  Value uniform =
      b.Multiply(b.Convert(b.ShiftRightLogical(bits, b.ConstantInt(ElementType::kU32, 8, dims)),
                           ElementType::kF32),
                 b.Constant(ElementType::kF32, std::ldexp(1.0, -24), dims));
  Value mask = b.Compare(uniform, b.Constant(ElementType::kF32, p, dims), Direction::kGe);
  Value x = context.Convert(input.value, compute);
  const double scale = p >= 1.0 ? 0.0 : 1.0 / (1.0 - p);
  Value output = b.Select(mask, b.Multiply(x, context.Constant(scale, compute, dims)),
                          context.Constant(0.0, compute, dims));
  return {context.Convert(output, input.dtype), mask};
}
TORCH_TPU_IMPLICIT_RANDOM_LOWERING(NativeDropout, "aten::native_dropout");

// native_dropout_backward(grad_output, mask, float scale): integer gradients promote to the
// default float, as multiplying by the float scale does on CPU.
std::vector<Value> NativeDropoutBackward(LoweringContext& context,
                                         std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = c10::isFloatingType(operands[0].dtype)
                                    ? operands[0].dtype
                                    : c10::get_default_dtype_as_scalartype();
  const c10::ScalarType compute = ComputeDtype(dtype);
  Value grad = context.Convert(operands[0].value, compute);
  Value mask = context.Convert(operands[1].value, compute);
  Value scale = context.Constant(context.Double(operands[2]), compute, grad.dims());
  return {context.Convert(b.Multiply(b.Multiply(grad, mask), scale), dtype)};
}
TORCH_TPU_LOWERING(NativeDropoutBackward, "aten::native_dropout_backward");

// binary_cross_entropy(self, target, Tensor? weight, int reduction)
std::vector<Value> BinaryCrossEntropy(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = operands[0].dtype;
  const c10::ScalarType compute = ComputeDtype(dtype);
  Value x = context.Convert(operands[0].value, compute);
  Value y = context.BroadcastTo(context.Convert(operands[1].value, compute), x.dims());
  // PyTorch clamps the logs at -100 so that 0 and 1 probabilities stay finite.
  Value floor = context.Constant(-100.0, compute, x.dims());
  Value one = context.Constant(1.0, compute, x.dims());
  Value log_x = NanPropagatingExtremum(b, b.Log(x), floor, true);
  Value log_1mx = NanPropagatingExtremum(b, b.Log(b.Subtract(one, x)), floor, true);
  Value loss = b.Negate(b.Add(b.Multiply(y, log_x), b.Multiply(b.Subtract(one, y), log_1mx)));
  if (!operands[2].is_none()) {
    loss = b.Multiply(loss,
                      context.BroadcastTo(context.Convert(operands[2].value, compute), x.dims()));
  }
  const int64_t reduction = ReductionOf(context, operands[3]);
  if (reduction == 0) return {context.Convert(loss, dtype)};
  std::vector<int64_t> all(loss.rank());
  for (int64_t d = 0; d < loss.rank(); ++d) all[d] = d;
  Value sum = loss.rank() == 0 ? loss : ReduceOver(context, loss, all, ReduceKind::kSum, false);
  if (reduction == 1) {
    sum = b.Divide(sum, context.Constant(static_cast<double>(loss.type().NumElements()), compute));
  }
  return {context.Convert(sum, dtype)};
}
TORCH_TPU_LOWERING(BinaryCrossEntropy, "aten::binary_cross_entropy",
                   "aten::binary_cross_entropy.out");

// cat(Tensor[] tensors, int dim=0): legacy 1-D empty tensors are skipped, dtypes promoted.
std::vector<Value> Cat(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& list = operands[0];
  TORCH_CHECK(!list.values.empty(), context.op_name(), ": expected a non-empty list of Tensors");
  std::vector<PromotionInput> promotion;
  for (auto dtype : list.dtypes)
    promotion.push_back({dtype, PromotionInput::Category::kDimensioned});
  const c10::ScalarType dtype = ResultType(promotion);
  std::vector<Value> inputs;
  int64_t rank = -1;
  for (const Value& value : list.values) {
    if (value.rank() == 1 && value.dims()[0] == 0) continue;
    rank = value.rank();
    inputs.push_back(context.Convert(value, dtype));
  }
  if (inputs.empty()) return {context.Constant(0.0, dtype, {0})};
  const int64_t dim = context.WrapDim(context.Int(operands[1]), rank);
  if (inputs.size() == 1) return {inputs[0]};
  return {context.builder().Concatenate(inputs, dim)};
}
TORCH_TPU_LOWERING(Cat, "aten::cat", "aten::cat.out");

// stack(Tensor[] tensors, int dim=0)
std::vector<Value> Stack(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& list = operands[0];
  TORCH_CHECK(!list.values.empty(), context.op_name(), ": stack expects a non-empty TensorList");
  std::vector<PromotionInput> promotion;
  for (auto dtype : list.dtypes)
    promotion.push_back({dtype, PromotionInput::Category::kDimensioned});
  const c10::ScalarType dtype = ResultType(promotion);
  const auto& shape = list.values[0].dims();
  const int64_t dim =
      context.WrapDim(context.Int(operands[1]), static_cast<int64_t>(shape.size()) + 1);
  std::vector<Value> inputs;
  for (const Value& value : list.values) {
    TORCH_CHECK(value.dims() == shape, context.op_name(),
                ": stack expects each tensor to be equal size, but got ", c10::IntArrayRef(shape),
                " and ", c10::IntArrayRef(value.dims()));
    std::vector<int64_t> expanded = shape;
    expanded.insert(expanded.begin() + dim, 1);
    inputs.push_back(context.builder().Reshape(context.Convert(value, dtype), expanded));
  }
  return {context.builder().Concatenate(inputs, dim)};
}
TORCH_TPU_LOWERING(Stack, "aten::stack", "aten::stack.out");

// tril / triu(self, int diagonal=0)
template <bool kLower>
std::vector<Value> Triangle(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value x = operands[0].value;
  TORCH_CHECK(x.rank() >= 2, context.op_name(), ": input tensor must have at least 2 dimensions");
  const int64_t diagonal = context.Int(operands[1]);
  const auto& dims = x.dims();
  Value rows = b.Iota(TensorType{ElementType::kS64, dims}, x.rank() - 2);
  Value columns = b.Iota(TensorType{ElementType::kS64, dims}, x.rank() - 1);
  Value offset = b.Add(rows, context.ConstantInt(diagonal, c10::kLong, dims));
  Value keep = b.Compare(columns, offset, kLower ? Direction::kLe : Direction::kGe);
  return {b.Select(keep, x, context.Constant(0.0, operands[0].dtype, dims))};
}
TORCH_TPU_LOWERING(Triangle<true>, "aten::tril", "aten::tril_", "aten::tril.out");
TORCH_TPU_LOWERING(Triangle<false>, "aten::triu", "aten::triu_", "aten::triu.out");

// flip(self, int[] dims)
std::vector<Value> Flip(LoweringContext& context, std::span<const Operand> operands) {
  Value x = operands[0].value;
  std::vector<int64_t> dims;
  for (int64_t dim : context.IntList(operands[1])) dims.push_back(context.WrapDim(dim, x.rank()));
  if (dims.empty() || x.rank() == 0) return {x};
  return {context.builder().Reverse(x, dims)};
}
TORCH_TPU_LOWERING(Flip, "aten::flip", "aten::flip.out");

// repeat(self, SymInt[] repeats): extra repeats add leading dims of size 1; result dim i is
// dim i tiled repeats[i] times. A broadcast to (r0, s0, r1, s1, ...) and one reshape.
std::vector<Value> Repeat(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value x = operands[0].value;
  const std::vector<int64_t> repeats = context.IntList(operands[1]);
  TORCH_CHECK(repeats.size() >= static_cast<size_t>(x.rank()), context.op_name(),
              ": Number of dimensions of repeat dims can not be smaller than number of dimensions "
              "of tensor");
  std::vector<int64_t> sizes(repeats.size() - x.rank(), 1);
  sizes.insert(sizes.end(), x.dims().begin(), x.dims().end());
  std::vector<int64_t> tiled, result, mapping;
  for (size_t d = 0; d < repeats.size(); ++d) {
    tiled.push_back(repeats[d]);
    tiled.push_back(sizes[d]);
    result.push_back(repeats[d] * sizes[d]);
    mapping.push_back(static_cast<int64_t>(2 * d + 1));
  }
  for (int64_t size : result) {
    TORCH_CHECK(size >= 0, context.op_name(), ": Trying to create tensor with negative dimension ",
                size, ": ", c10::IntArrayRef(result));
  }
  Value broadcast = b.BroadcastInDim(b.Reshape(x, sizes), tiled, mapping);
  return {b.Reshape(broadcast, result)};
}
TORCH_TPU_LOWERING(Repeat, "aten::repeat", "aten::repeat.out");

// roll(self, int[1] shifts, int[1] dims=[])
std::vector<Value> Roll(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value x = operands[0].value;
  const auto shifts = context.IntList(operands[1]);
  auto dims = context.IntList(operands[2]);
  if (dims.empty()) {
    TORCH_CHECK(shifts.size() == 1, context.op_name(), ": shifts and dimensions must align");
    const int64_t count = x.type().NumElements();
    Value flat = b.Reshape(x, {count});
    Value rolled = Roll(
        context, std::vector<Operand>{
                     Operand{Operand::Kind::kTensor, flat, {}, {}, operands[0].dtype}, operands[1],
                     Operand{Operand::Kind::kStatic,
                             {},
                             {},
                             {},
                             c10::ScalarType::Undefined,
                             false,
                             c10::IValue(std::vector<int64_t>{0})}})[0];
    return {b.Reshape(rolled, x.dims())};
  }
  TORCH_CHECK(shifts.size() == dims.size(), context.op_name(),
              ": shifts and dimensions must align");
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t dim = context.WrapExistingDim(dims[i], x.rank());
    const int64_t size = x.dims()[dim];
    if (size == 0) continue;
    const int64_t shift = ((shifts[i] % size) + size) % size;
    if (shift == 0) continue;
    std::vector<int64_t> start(x.rank(), 0), limit = x.dims(), steps(x.rank(), 1);
    start[dim] = size - shift;
    Value tail = b.Slice(x, start, limit, steps);
    start[dim] = 0;
    limit[dim] = size - shift;
    Value head = b.Slice(x, start, limit, steps);
    x = b.Concatenate({tail, head}, dim);
  }
  return {x};
}
TORCH_TPU_LOWERING(Roll, "aten::roll");

// Moves the class dim of an (N, C, d1, ...) tensor last and flattens to (N*d1*..., C).
Value ClassesLast(LoweringContext& context, Value x) {
  auto& b = context.builder();
  std::vector<int64_t> permutation = {0};
  for (int64_t d = 2; d < x.rank(); ++d) permutation.push_back(d);
  permutation.push_back(1);
  Value moved = b.Transpose(x, permutation);
  const int64_t classes = x.dims()[1];
  return b.Reshape(moved, {x.type().NumElements() / std::max<int64_t>(classes, 1), classes});
}

Operand WithValue(const Operand& like, Value value) {
  Operand operand = like;
  operand.value = value;
  return operand;
}

// nll_loss2d_forward(self (N,C,H,W), target (N,H,W), Tensor? weight, int reduction,
//   SymInt ignore_index): the 1-D loss over every pixel.
std::vector<Value> NllLoss2dForward(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value flat_target = b.Reshape(operands[1].value, {operands[1].value.type().NumElements()});
  std::vector<Operand> flat = {WithValue(operands[0], ClassesLast(context, operands[0].value)),
                               WithValue(operands[1], flat_target), operands[2], operands[3],
                               operands[4]};
  auto results = NllLossForward(context, flat);
  if (context.Int(operands[3]) == 0) results[0] = b.Reshape(results[0], operands[1].value.dims());
  return results;
}
TORCH_TPU_LOWERING(NllLoss2dForward, "aten::nll_loss2d_forward");

// nll_loss2d_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight)
std::vector<Value> NllLoss2dBackward(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value x = operands[1].value;
  Value grad = operands[0].value;
  if (context.Int(operands[4]) == 0) grad = b.Reshape(grad, {grad.type().NumElements()});
  Value flat_target = b.Reshape(operands[2].value, {operands[2].value.type().NumElements()});
  std::vector<Operand> flat = {WithValue(operands[0], grad),
                               WithValue(operands[1], ClassesLast(context, x)),
                               WithValue(operands[2], flat_target),
                               operands[3],
                               operands[4],
                               operands[5],
                               operands[6]};
  Value result = NllLossBackward(context, flat)[0];  // (N*H*W, C)
  std::vector<int64_t> moved_dims = {x.dims()[0]};
  for (int64_t d = 2; d < x.rank(); ++d) moved_dims.push_back(x.dims()[d]);
  moved_dims.push_back(x.dims()[1]);
  std::vector<int64_t> permutation = {0, x.rank() - 1};
  for (int64_t d = 1; d < x.rank() - 1; ++d) permutation.push_back(d);
  return {b.Transpose(b.Reshape(result, moved_dims), permutation)};
}
TORCH_TPU_LOWERING(NllLoss2dBackward, "aten::nll_loss2d_backward");

}  // namespace

}  // namespace torch_tpu::lowering

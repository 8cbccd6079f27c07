// Backward of the piecewise activations (hardswish, hardsigmoid, hard/soft shrink, glu, prelu)
// and of binary cross entropy: elementwise selections between the gradient and its scaled
// versions, in the compute dtype of CPU's kernels.
#include <c10/util/Exception.h>

#include "lowering/context.h"
#include "lowering/opmath.h"

namespace torch_tpu::lowering {
namespace {

// (grad, self) of a backward op in the compute dtype of `self`, broadcast to one shape.
std::pair<Value, Value> GradAndInput(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[1].dtype;
  auto values = OpmathOperands(context, operands.subspan(0, 2), dtype, HalfScalars::kFloat);
  return {values[0], values[1]};
}

// hardswish_backward(grad_output, self): 0 up to -3, grad * (x / 3 + 1/2) inside (-3, 3), grad
// from 3 on.
std::vector<Value> HardswishBackward(LoweringContext& context, std::span<const Operand> operands) {
  auto [grad, x] = GradAndInput(context, operands);
  auto& b = context.builder();
  Value ramp = b.Multiply(grad, b.Add(b.Divide(x, FullLike(context, 3.0, x)), FullLike(context, 0.5, x)));
  Value result = b.Select(b.Compare(x, FullLike(context, 3.0, x), Direction::kLt), ramp, grad);
  result = b.Select(b.Compare(x, FullLike(context, -3.0, x), Direction::kLe), FullLike(context, 0.0, x),
                    result);
  return {context.Convert(result, operands[1].dtype)};
}
TORCH_TPU_LOWERING(HardswishBackward, "aten::hardswish_backward", "aten::hardswish_backward.out");

// hardsigmoid_backward(grad_output, self): grad / 6 strictly inside (-3, 3), else 0.
std::vector<Value> HardsigmoidBackward(LoweringContext& context,
                                       std::span<const Operand> operands) {
  auto [grad, x] = GradAndInput(context, operands);
  auto& b = context.builder();
  Value inside = b.And(b.Compare(x, FullLike(context, -3.0, x), Direction::kGt),
                       b.Compare(x, FullLike(context, 3.0, x), Direction::kLt));
  Value result =
      b.Select(inside, b.Multiply(grad, FullLike(context, 1.0 / 6.0, x)), FullLike(context, 0.0, x));
  return {context.Convert(result, operands[1].dtype)};
}
TORCH_TPU_LOWERING(HardsigmoidBackward, "aten::hardsigmoid_backward",
                   "aten::hardsigmoid_backward.grad_input");

// {hard,soft}shrink_backward(grad, self, lambd): 0 inside [-lambd, lambd], grad outside (one CPU
// kernel serves both). lambd is rounded to the tensor dtype first, as CPU's kernel reads it.
std::vector<Value> ShrinkBackward(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[1].dtype;
  auto& b = context.builder();
  auto [grad, x] = GradAndInput(context, operands);
  Value lambd = OpmathScalar(context, operands[2], dtype, HalfScalars::kRoundedToDtype, x.dims());
  Value inside = b.And(b.Compare(x, b.Negate(lambd), Direction::kGe),
                       b.Compare(x, lambd, Direction::kLe));
  return {context.Convert(b.Select(inside, FullLike(context, 0.0, x), grad), dtype)};
}
TORCH_TPU_LOWERING(ShrinkBackward, "aten::hardshrink_backward",
                   "aten::hardshrink_backward.grad_input");
TORCH_TPU_LOWERING(ShrinkBackward, "aten::softshrink_backward",
                   "aten::softshrink_backward.grad_input");

// glu_backward(grad_output, self, dim): self = [a, b] along dim, glu = a * sigmoid(b);
// d/da = sigmoid(b), d/db = a * sigmoid(b) * (1 - sigmoid(b)).
std::vector<Value> GluBackward(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[1].dtype;
  const c10::ScalarType compute = ComputeDtype(dtype);
  auto& b = context.builder();
  Value grad = context.Convert(operands[0].value, compute);
  Value x = context.Convert(operands[1].value, compute);
  TORCH_CHECK(x.rank() > 0, context.op_name(), ": glu does not support 0-dimensional tensors");
  const int64_t dim = context.WrapDim(context.Int(operands[2]), x.rank());
  const int64_t half = x.dims()[dim] / 2;
  TORCH_CHECK(x.dims()[dim] % 2 == 0, context.op_name(),
              ": Halving dimension must be even, but dimension ", dim, " is size ",
              x.dims()[dim]);
  std::vector<int64_t> start(x.rank(), 0), limit = x.dims(), strides(x.rank(), 1);
  limit[dim] = half;
  Value first = b.Slice(x, start, limit, strides);
  start[dim] = half;
  limit[dim] = 2 * half;
  // CPU stores sigmoid(b) in the result's dtype before using it for both halves.
  Value gate = RoundThrough(context, b.Logistic(b.Slice(x, start, limit, strides)), dtype);
  Value grad_first = b.Multiply(grad, gate);
  Value grad_second = b.Multiply(
      b.Multiply(b.Multiply(b.Subtract(FullLike(context, 1.0, gate), gate), gate), first), grad);
  return {context.Convert(b.Concatenate({grad_first, grad_second}, dim), dtype)};
}
TORCH_TPU_LOWERING(GluBackward, "aten::glu_backward", "aten::glu_backward.grad_input");

// _prelu_kernel_backward(grad_output, self, weight) -> (grad_self, grad_weight), both of the
// broadcast shape (autograd reduces grad_weight to the weight's shape).
std::vector<Value> PreluKernelBackward(LoweringContext& context,
                                       std::span<const Operand> operands) {
  const c10::ScalarType dtype = context.PromotedType(operands.subspan(0, 3));
  auto values = OpmathOperands(context, operands.subspan(0, 3), dtype, HalfScalars::kFloat);
  auto& b = context.builder();
  const Value &grad = values[0], &x = values[1], &weight = values[2];
  Value positive = b.Compare(x, FullLike(context, 0.0, x), Direction::kGt);
  Value grad_self = b.Select(positive, grad, b.Multiply(weight, grad));
  Value grad_weight = b.Select(positive, FullLike(context, 0.0, x), b.Multiply(x, grad));
  return {context.Convert(grad_self, dtype), context.Convert(grad_weight, dtype)};
}
TORCH_TPU_LOWERING(PreluKernelBackward, "aten::_prelu_kernel_backward");

// binary_cross_entropy_backward(grad_output, self, target, weight=None, reduction=Mean):
// grad * (x - t) / max(x (1 - x), 1e-12), times weight, over numel for the mean. CPU computes
// half types in the half type itself, so each step rounds.
std::vector<Value> BinaryCrossEntropyBackward(LoweringContext& context,
                                              std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[1].dtype;
  auto& b = context.builder();
  const std::vector<int64_t>& dims = operands[1].value.dims();
  auto input = [&](size_t i) {
    return context.BroadcastTo(context.Convert(operands[i].value, ComputeDtype(dtype)), dims);
  };
  auto round = [&](Value v) { return RoundThrough(context, v, dtype); };
  Value grad = input(0), x = input(1), target = input(2);
  Value one = FullLike(context, 1.0, x);
  Value denominator =
      b.Maximum(round(b.Multiply(round(b.Subtract(one, x)), x)), FullLike(context, 1e-12, x));
  Value result =
      round(b.Divide(round(b.Multiply(grad, round(b.Subtract(x, target)))), denominator));
  if (operands.size() > 3 && !operands[3].is_none()) result = round(b.Multiply(result, input(3)));
  constexpr int64_t kMean = 1;
  if (context.Int(operands[4]) == kMean) {
    int64_t numel = 1;
    for (int64_t d : dims) numel *= d;
    result = round(b.Divide(result, FullLike(context, static_cast<double>(numel), x)));
  }
  return {context.Convert(result, dtype)};
}
TORCH_TPU_LOWERING(BinaryCrossEntropyBackward, "aten::binary_cross_entropy_backward",
                   "aten::binary_cross_entropy_backward.grad_input");

}  // namespace
}  // namespace torch_tpu::lowering

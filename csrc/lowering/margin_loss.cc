// multi_margin_loss and its backward: per sample, the hinge max(0, margin - x[y] + x[j]) (or its
// square) over the classes j other than the target y, scaled by weight[y], over the class count.
#include <c10/util/Exception.h>

#include "lowering/context.h"
#include "lowering/opmath.h"

namespace torch_tpu::lowering {
namespace {

constexpr int64_t kNone = 0, kMean = 1;

// The per-element terms of a multi margin loss over x [N, C] (compute dtype) and target [N]:
// z = margin - x[y] + x[j], whether each (i, j) is a non-target class with z > 0, the one-hot
// target mask, and weight[y] per row (ones without weight). p (1 or 2) is a run-time scalar.
struct MarginTerms {
  Value z, active, is_target, row_weight, p_is_one;
};

MarginTerms Terms(LoweringContext& context, Value x, const Operand& target, const Operand& p,
                  const Operand& margin, const Operand& weight) {
  auto& b = context.builder();
  const int64_t n = x.dims()[0], classes = x.dims()[1];
  const c10::ScalarType compute = LoweringContext::DtypeOf(x);
  Value labels = b.Reshape(context.Convert(target.value, c10::kLong), {n});
  context.CheckIndicesInRange(labels, classes, false);
  Value class_ids = b.Iota(TensorType{ElementType::kS64, {n, classes}}, 1);
  Value is_target =
      b.Compare(class_ids, b.BroadcastInDim(labels, {n, classes}, {0}), Direction::kEq);
  Value zeros = context.Constant(0.0, compute, {n, classes});
  Value x_target = b.Reduce({b.Select(is_target, x, zeros)}, {context.Constant(0.0, compute)},
                            {1}, [](FunctionBuilder& body, std::span<const Value> args) {
                              return std::vector<Value>{body.Add(args[0], args[1])};
                            })[0];
  Value margin_value = context.BroadcastTo(context.Convert(margin.value, compute), {n, classes});
  Value z = b.Add(b.Subtract(margin_value, b.BroadcastInDim(x_target, {n, classes}, {0})), x);
  Value active = b.And(b.Not(is_target), b.Compare(z, zeros, Direction::kGt));
  Value row_weight = context.Constant(1.0, compute, {n});
  if (!weight.is_none()) {
    Value w = context.Convert(weight.value, compute);
    row_weight = b.Gather1D(b.Reshape(w, {w.type().NumElements()}), labels);
  }
  Value p_value = context.Convert(p.value, compute);
  Value p_is_one = b.Compare(p_value, context.Constant(1.0, compute), Direction::kEq);
  Value p_is_two = b.Compare(p_value, context.Constant(2.0, compute), Direction::kEq);
  context.CheckNotViolated(b.Not(b.Or(p_is_one, p_is_two)), "only p == 1 and p == 2 supported");
  return {z, active, is_target, b.BroadcastInDim(row_weight, {n, classes}, {0}),
          b.BroadcastInDim(p_is_one, {n, classes}, {})};
}

// (x as [N, C] in the compute dtype, whether the input had no batch dim)
std::pair<Value, bool> Rows(LoweringContext& context, const Operand& self) {
  Value x = context.Convert(self.value, ComputeDtype(self.dtype));
  TORCH_CHECK(x.rank() <= 2 && (x.rank() == 0 || x.dims().back() > 0), context.op_name(),
              ": Expected non-empty vector or matrix with optional 0-dim batch size, but got: ",
              x.type().ToString());
  if (x.rank() == 2) return {x, false};
  return {context.builder().Reshape(x, {1, x.rank() == 0 ? 1 : x.dims()[0]}), true};
}

// multi_margin_loss(self, target, p=1, margin=1, weight=None, reduction=Mean)
std::vector<Value> MultiMarginLoss(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  auto [x, unbatched] = Rows(context, operands[0]);
  const int64_t n = x.dims()[0], classes = x.dims()[1];
  const MarginTerms t = Terms(context, x, operands[1], operands[2], operands[3], operands[4]);
  Value hinge = b.Select(t.p_is_one, t.z, b.Multiply(t.z, t.z));
  hinge = b.Select(t.active, b.Multiply(hinge, t.row_weight), b.Constant(x.element_type(), 0.0,
                                                                           x.dims()));
  Value per_sample = b.Reduce({hinge}, {b.Constant(x.element_type(), 0.0)}, {1},
                              [](FunctionBuilder& body, std::span<const Value> args) {
                                return std::vector<Value>{body.Add(args[0], args[1])};
                              })[0];
  per_sample = b.Divide(per_sample, b.Constant(x.element_type(), static_cast<double>(classes),
                                               {n}));
  const int64_t reduction = context.Int(operands[5]);
  const c10::ScalarType dtype = operands[0].dtype;
  if (reduction == kNone) {
    return {context.Convert(unbatched ? b.Reshape(per_sample, {}) : per_sample, dtype)};
  }
  Value total = b.Reduce({per_sample}, {b.Constant(x.element_type(), 0.0)}, {0},
                         [](FunctionBuilder& body, std::span<const Value> args) {
                           return std::vector<Value>{body.Add(args[0], args[1])};
                         })[0];
  if (reduction == kMean) {
    total = b.Divide(total, b.Constant(x.element_type(), static_cast<double>(n)));
  }
  return {context.Convert(total, dtype)};
}
TORCH_TPU_LOWERING(MultiMarginLoss, "aten::multi_margin_loss", "aten::multi_margin_loss.out");

// multi_margin_loss_backward(grad_output, self, target, p, margin, weight=None, reduction=Mean)
std::vector<Value> MultiMarginLossBackward(LoweringContext& context,
                                           std::span<const Operand> operands) {
  auto& b = context.builder();
  auto [x, unbatched] = Rows(context, operands[1]);
  const int64_t n = x.dims()[0], classes = x.dims()[1];
  const MarginTerms t = Terms(context, x, operands[2], operands[3], operands[4], operands[5]);
  const int64_t reduction = context.Int(operands[6]);
  const double scale = 1.0 / static_cast<double>(reduction == kMean ? n * classes : classes);
  Value g = b.Constant(x.element_type(), scale, x.dims());
  Value zeros = b.Constant(x.element_type(), 0.0, x.dims());
  Value h = b.Select(t.p_is_one, g,
                     b.Multiply(b.Multiply(b.Constant(x.element_type(), 2.0, x.dims()), g), t.z));
  h = b.Select(t.active, b.Multiply(h, t.row_weight), zeros);
  Value target_grad = b.Reduce({h}, {b.Constant(x.element_type(), 0.0)}, {1},
                               [](FunctionBuilder& body, std::span<const Value> args) {
                                 return std::vector<Value>{body.Add(args[0], args[1])};
                               })[0];
  Value grad = b.Select(t.is_target, b.Negate(b.BroadcastInDim(target_grad, x.dims(), {0})), h);
  Value grad_output = context.Convert(operands[0].value, LoweringContext::DtypeOf(x));
  if (reduction == kNone && grad_output.rank() > 0) {
    grad_output = b.BroadcastInDim(b.Reshape(grad_output, {n}), x.dims(), {0});
  } else {
    grad_output = b.BroadcastInDim(b.Reshape(grad_output, {}), x.dims(), {});
  }
  grad = b.Multiply(grad, grad_output);
  if (unbatched) grad = b.Reshape(grad, operands[1].value.dims());
  return {context.Convert(grad, operands[1].dtype)};
}
TORCH_TPU_LOWERING(MultiMarginLossBackward, "aten::multi_margin_loss_backward",
                   "aten::multi_margin_loss_backward.grad_input");

}  // namespace
}  // namespace torch_tpu::lowering

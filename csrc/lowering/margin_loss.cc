// multi_margin_loss and its backward: per sample, the hinge max(0, margin - x[y] + x[j]) (or its
// square) over the classes j other than the target y, scaled by weight[y], over the class count.
// multilabel_margin_loss and its backward: the same hinge (margin 1) for each of a sample's targets
// (the target row up to its first -1) against every class that is not a target.
#include <c10/util/Exception.h>

#include "lowering/context.h"
#include "lowering/opmath.h"
#include "lowering/reduction_ops.h"

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

// The input's gradient: `grad` [N, C] (per unit of loss) times the output's gradient (one per
// sample without reduction, else one), in the input's shape and dtype.
Value InputGradient(LoweringContext& context, Value grad, const Operand& grad_output,
                    const Operand& self, int64_t reduction, bool unbatched) {
  auto& b = context.builder();
  const auto& dims = grad.dims();
  Value scale = context.Convert(grad_output.value, LoweringContext::DtypeOf(grad));
  if (reduction == kNone && scale.rank() > 0) {
    scale = b.BroadcastInDim(b.Reshape(scale, {dims[0]}), dims, {0});
  } else {
    scale = b.BroadcastInDim(b.Reshape(scale, {}), dims, {});
  }
  grad = b.Multiply(grad, scale);
  if (unbatched) grad = b.Reshape(grad, self.value.dims());
  return context.Convert(grad, self.dtype);
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
  return {InputGradient(context, grad, operands[0], operands[1], reduction, unbatched)};
}
TORCH_TPU_LOWERING(MultiMarginLossBackward, "aten::multi_margin_loss_backward",
                   "aten::multi_margin_loss_backward.grad_input");

// The terms of a multilabel margin loss over x [N, C] (compute dtype) and target [N, C]:
// z[i, k, c] = 1 - x[i, target[i, k]] + x[i, c], whether each (i, k, c) counts (k a target before
// the row's first -1, c not among the row's targets, z > 0), and which (k, c) pairs name the
// same class for the valid targets k.
struct MultilabelTerms {
  Value z, active, target_is_class, is_target;
};

MultilabelTerms MultilabelTermsOf(LoweringContext& context, Value x, const Operand& target) {
  auto& b = context.builder();
  const int64_t n = x.dims()[0], classes = x.dims()[1];
  TORCH_CHECK(target.dtype == c10::kLong, context.op_name(),
              ": expected scalar type Long but found ", target.dtype);
  Value labels = b.Reshape(target.value, {n, classes});
  const std::vector<int64_t> grid = {n, classes, classes};  // (i, k, c)
  // Targets before the first -1: no -1 among the row's first k + 1 entries.
  Value terminators = b.Convert(
      b.Compare(labels, b.ConstantInt(ElementType::kS64, -1, {n, classes}), Direction::kEq),
      ElementType::kS64);
  Value seen = b.ReduceWindow({terminators}, {b.ConstantInt(ElementType::kS64, 0)}, {1, classes},
                              {}, {}, {}, {{0, 0}, {classes - 1, 0}},
                              [](FunctionBuilder& body, std::span<const Value> args) {
                                return std::vector<Value>{body.Add(args[0], args[1])};
                              })[0];
  Value valid = b.Compare(seen, b.ConstantInt(ElementType::kS64, 0, {n, classes}), Direction::kEq);
  Value out_of_range =
      b.Or(b.Compare(labels, b.ConstantInt(ElementType::kS64, 0, {n, classes}), Direction::kLt),
           b.Compare(labels, b.ConstantInt(ElementType::kS64, classes, {n, classes}),
                     Direction::kGe));
  context.CheckNotViolated(
      ReduceOver(context, b.And(valid, out_of_range), {0, 1}, ReduceKind::kOr, false),
      "argument #2 'target' is out of range");
  Value class_ids = b.Iota(TensorType{ElementType::kS64, grid}, 2);
  Value target_is_class =
      b.And(b.BroadcastInDim(valid, grid, {0, 1}),
            b.Compare(b.BroadcastInDim(labels, grid, {0, 1}), class_ids, Direction::kEq));
  Value is_target = ReduceOver(context, target_is_class, {1}, ReduceKind::kOr, false);  // [N, C]
  const c10::ScalarType compute = LoweringContext::DtypeOf(x);
  Value x_target = ReduceOver(
      context,
      b.Select(target_is_class, b.BroadcastInDim(x, grid, {0, 2}),
               context.Constant(0.0, compute, grid)),
      {2}, ReduceKind::kSum, false);  // [N, K]: x at target k (0 for invalid k)
  Value z = b.Add(b.Subtract(context.Constant(1.0, compute, grid),
                             b.BroadcastInDim(x_target, grid, {0, 1})),
                  b.BroadcastInDim(x, grid, {0, 2}));
  Value active = b.And(b.And(b.BroadcastInDim(valid, grid, {0, 1}),
                             b.Not(b.BroadcastInDim(is_target, grid, {0, 2}))),
                       b.Compare(z, context.Constant(0.0, compute, grid), Direction::kGt));
  return {z, active, target_is_class, is_target};
}

// The checked input as rows (compute dtype), whether it had no batch dim, and its loss terms;
// `kernel` names CPU's kernel in its dtype error.
struct MultilabelInput {
  Value x;
  bool unbatched;
  MultilabelTerms terms;
};

MultilabelInput MultilabelInputOf(LoweringContext& context, const Operand& self,
                                  const Operand& target, const char* kernel) {
  CheckKernelDtype(context, self.dtype == c10::kFloat || self.dtype == c10::kDouble, kernel,
                   self.dtype);
  TORCH_CHECK(target.value.dims() == self.value.dims(), context.op_name(),
              ": inconsistent target size: ", c10::IntArrayRef(target.value.dims()),
              " for input of size: ", c10::IntArrayRef(self.value.dims()));
  auto [x, unbatched] = Rows(context, self);
  return {x, unbatched, MultilabelTermsOf(context, x, target)};
}

// multilabel_margin_loss_forward(self, target, int reduction) -> (output, is_target)
std::vector<Value> MultilabelMarginLoss(LoweringContext& context,
                                        std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = operands[0].dtype;
  const MultilabelInput input = MultilabelInputOf(context, operands[0], operands[1],
                                                  "multilabel_margin_loss_forward_out_frame");
  const Value& x = input.x;
  const MultilabelTerms& t = input.terms;
  const bool unbatched = input.unbatched;
  const int64_t n = x.dims()[0], classes = x.dims()[1];
  const std::vector<int64_t> grid = t.z.dims();
  Value hinge = b.Select(t.active, t.z, b.Constant(x.element_type(), 0.0, grid));
  Value per_sample = b.Divide(ReduceOver(context, hinge, {1, 2}, ReduceKind::kSum, false),
                              b.Constant(x.element_type(), static_cast<double>(classes), {n}));
  Value is_target = context.Convert(
      unbatched ? b.Reshape(t.is_target, operands[0].value.dims()) : t.is_target, dtype);
  const int64_t reduction = context.Int(operands[2]);
  if (reduction == kNone) {
    return {context.Convert(unbatched ? b.Reshape(per_sample, {}) : per_sample, dtype), is_target};
  }
  Value total = ReduceOver(context, per_sample, {0}, ReduceKind::kSum, false);
  if (reduction == kMean) {
    total = b.Divide(total, b.Constant(x.element_type(), static_cast<double>(n)));
  }
  return {context.Convert(total, dtype), is_target};
}
TORCH_TPU_LOWERING(MultilabelMarginLoss, "aten::multilabel_margin_loss_forward",
                   "aten::multilabel_margin_loss_forward.output");

// multilabel_margin_loss_backward(grad_output, self, target, int reduction, is_target): each
// counted (k, c) adds g to class c and subtracts it from target k's class, g being 1/C (1/(N C)
// for the mean) times the sample's output gradient.
std::vector<Value> MultilabelMarginLossBackward(LoweringContext& context,
                                                std::span<const Operand> operands) {
  auto& b = context.builder();
  const MultilabelInput input = MultilabelInputOf(context, operands[1], operands[2],
                                                  "multilabel_margin_loss_backward_out_frame");
  const Value& x = input.x;
  const MultilabelTerms& t = input.terms;
  const int64_t n = x.dims()[0], classes = x.dims()[1];
  const std::vector<int64_t> grid = t.z.dims();
  Value zeros = b.Constant(x.element_type(), 0.0, grid);
  Value counted = b.Select(t.active, b.Constant(x.element_type(), 1.0, grid), zeros);
  Value pushed_up = ReduceOver(context, counted, {1}, ReduceKind::kSum, false);  // [N, C]
  Value per_target = ReduceOver(context, counted, {2}, ReduceKind::kSum, false);  // [N, K]
  Value pushed_down = ReduceOver(
      context, b.Select(t.target_is_class, b.BroadcastInDim(per_target, grid, {0, 1}), zeros), {1},
      ReduceKind::kSum, false);
  const int64_t reduction = context.Int(operands[3]);
  const double scale = 1.0 / static_cast<double>(reduction == kMean ? n * classes : classes);
  Value grad = b.Multiply(b.Subtract(pushed_up, pushed_down),
                          b.Constant(x.element_type(), scale, x.dims()));
  return {InputGradient(context, grad, operands[0], operands[1], reduction, input.unbatched)};
}
TORCH_TPU_LOWERING(MultilabelMarginLossBackward, "aten::multilabel_margin_loss_backward",
                   "aten::multilabel_margin_loss_backward.grad_input");

}  // namespace
}  // namespace torch_tpu::lowering

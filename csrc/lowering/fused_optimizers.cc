// One parameter's step of torch.optim's fused optimizers (Adam/AdamW, SGD, Adagrad with
// fused=True), which call _fused_adam_ & co. on every device the optimizers list as fused-capable,
// tpu included. aten/fused_optimizer_kernels.cc launches one program for the whole parameter list
// (ForEachParameter); hyper-parameters are runtime scalars (a schedule changing lr never
// recompiles). The math is CUDA's and CPU's fused
// kernels': half parameters compute in f32; a grad_scale unscales the gradient and stores the
// unscaled gradient back; a nonzero found_inf leaves every tensor as it was, without a host sync.
//
// Operand layouts of one parameter's step (None for an absent tensor), results in order of the
// tensors they replace:
//   adam:    param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, lr, beta1, beta2,
//            weight_decay, eps, amsgrad, maximize, decoupled_weight_decay, grad_scale, found_inf
//            -> param, exp_avg, exp_avg_sq, [max_exp_avg_sq if amsgrad], [grad if grad_scale]
//   sgd:     param, grad, momentum_buffer, weight_decay, momentum, lr, dampening, nesterov,
//            maximize, is_first_step, grad_scale, found_inf
//            -> param, [momentum_buffer if present], [grad if grad_scale]
//   adagrad: param, grad, state_sum, step, lr, lr_decay, weight_decay, eps, maximize, grad_scale,
//            found_inf -> param, state_sum, [grad if grad_scale]
#include "lowering/context.h"
#include "lowering/dtype.h"
#include "lowering/registry.h"

namespace torch_tpu::lowering {
namespace {

// The parameter's compute dtype and shape, and conversions into them.
class StepMath {
 public:
  StepMath(LoweringContext& context, const Operand& param)
      : context_(context),
        dtype_(param.dtype),
        compute_(ComputeDtype(param.dtype)),
        dims_(param.value.dims()) {}

  FunctionBuilder& b() { return context_.builder(); }
  // A tensor or scalar operand in the compute dtype, broadcast to the parameter's shape.
  Value operator()(const Operand& operand) {
    return context_.BroadcastTo(context_.Convert(operand.value, compute_), dims_);
  }
  Value constant(double value) { return context_.Constant(value, compute_, dims_); }
  Value Axpy(Value a, Value x, Value y) { return b().Add(b().Multiply(a, x), y); }
  // `value` - rate * decay * param where decay is nonzero (as the fused kernels test it, so an
  // inf parameter with no weight decay stays inf rather than becoming 0 * inf).
  Value Decayed(Value decay, Value rate, Value param, Value value) {
    Value decayed = b().Subtract(value, b().Multiply(b().Multiply(rate, decay), param));
    return b().Select(b().Compare(decay, constant(0.0), Direction::kNe), decayed, value);
  }

  // The parameter and the gradient as the update sees them (unscaled, negated to maximize,
  // with `l2_decay` * param added when given), and the unscaled gradient to store back.
  struct Prepared {
    Value param, grad;
    std::optional<Value> stored_grad;
  };
  Prepared Prepare(std::span<const Operand> operands, const Operand& grad_scale, bool maximize,
                   std::optional<Value> l2_decay) {
    Prepared prepared{(*this)(operands[0]), (*this)(operands[1]), std::nullopt};
    if (!grad_scale.is_none()) {
      prepared.grad = b().Divide(prepared.grad, (*this)(grad_scale));
      prepared.stored_grad = prepared.grad;
    }
    if (maximize) prepared.grad = b().Negate(prepared.grad);
    if (l2_decay) {
      prepared.grad = Decayed(*l2_decay, constant(-1.0), prepared.param, prepared.grad);
    }
    return prepared;
  }

  // `updated` (new values of `originals`, in order) rounded to their dtypes, or the originals
  // where found_inf is nonzero.
  std::vector<Value> Finish(std::vector<std::pair<Value, const Operand*>> updated,
                            const Prepared& prepared, const Operand& grad,
                            const Operand& found_inf) {
    if (prepared.stored_grad) updated.push_back({*prepared.stored_grad, &grad});
    std::vector<Value> results;
    for (auto& [value, original] : updated) {
      Value rounded = context_.Convert(value, original->dtype);
      if (!found_inf.is_none()) {
        Value skip = b().Compare((*this)(found_inf), constant(0.0), Direction::kNe);
        rounded = b().Select(skip, original->value, rounded);
      }
      results.push_back(rounded);
    }
    return results;
  }

 private:
  LoweringContext& context_;
  c10::ScalarType dtype_, compute_;
  std::vector<int64_t> dims_;
};

std::vector<Value> FusedAdamStep(LoweringContext& context, std::span<const Operand> operands) {
  StepMath math(context, operands[0]);
  auto& b = math.b();
  const bool amsgrad = context.Bool(operands[11]);
  const bool decoupled = context.Bool(operands[13]);
  Value lr = math(operands[6]), beta1 = math(operands[7]), beta2 = math(operands[8]);
  Value weight_decay = math(operands[9]), one = math.constant(1.0);
  StepMath::Prepared prepared =
      math.Prepare(operands, operands[14], context.Bool(operands[12]),
                   decoupled ? std::nullopt : std::optional<Value>(weight_decay));
  Value param = prepared.param, grad = prepared.grad;
  if (decoupled) param = math.Decayed(weight_decay, lr, param, param);
  Value exp_avg = b.Add(b.Multiply(beta1, math(operands[2])),
                        b.Multiply(b.Subtract(one, beta1), grad));
  Value exp_avg_sq = b.Add(b.Multiply(beta2, math(operands[3])),
                           b.Multiply(b.Multiply(b.Subtract(one, beta2), grad), grad));
  Value step = math(operands[5]);
  Value step_size = b.Divide(lr, b.Subtract(one, b.Power(beta1, step)));
  Value correction2_sqrt = b.Sqrt(b.Subtract(one, b.Power(beta2, step)));
  Value max_exp_avg_sq = amsgrad ? b.Maximum(math(operands[4]), exp_avg_sq) : exp_avg_sq;
  Value denominator =
      b.Add(b.Divide(b.Sqrt(max_exp_avg_sq), correction2_sqrt), math(operands[10]));
  param = b.Subtract(param, b.Multiply(step_size, b.Divide(exp_avg, denominator)));
  std::vector<std::pair<Value, const Operand*>> updated = {
      {param, &operands[0]}, {exp_avg, &operands[2]}, {exp_avg_sq, &operands[3]}};
  if (amsgrad) updated.push_back({max_exp_avg_sq, &operands[4]});
  return math.Finish(std::move(updated), prepared, operands[1], operands[15]);
}

std::vector<Value> FusedAdagradStep(LoweringContext& context, std::span<const Operand> operands) {
  StepMath math(context, operands[0]);
  const auto prepared =
      math.Prepare(operands, operands[9], context.Bool(operands[8]), math(operands[6]));
  Value grad = prepared.grad, one = math.constant(1.0);
  auto& b = math.b();
  // clr = lr / (1 + (step - 1) * lr_decay)
  Value clr = b.Divide(math(operands[4]),
                       math.Axpy(b.Subtract(math(operands[3]), one), math(operands[5]), one));
  Value state_sum = math.Axpy(grad, grad, math(operands[2]));
  Value denominator = b.Add(b.Sqrt(state_sum), math(operands[7]));
  Value param = b.Subtract(prepared.param, b.Multiply(clr, b.Divide(grad, denominator)));
  return math.Finish({{param, &operands[0]}, {state_sum, &operands[2]}}, prepared, operands[1],
                     operands[10]);
}

std::vector<Value> FusedSgdStep(LoweringContext& context, std::span<const Operand> operands) {
  StepMath math(context, operands[0]);
  auto& b = math.b();
  StepMath::Prepared prepared =
      math.Prepare(operands, operands[10], context.Bool(operands[8]), math(operands[3]));
  Value grad = prepared.grad;
  const bool has_buffer = !operands[2].is_none();
  Value buffer;
  if (has_buffer) {
    Value momentum = math(operands[4]);
    buffer = context.Bool(operands[9])
                 ? grad
                 : math.Axpy(momentum, math(operands[2]),
                             b.Multiply(b.Subtract(math.constant(1.0), math(operands[6])), grad));
    grad = context.Bool(operands[7]) ? math.Axpy(momentum, buffer, grad) : buffer;
  }
  Value param = b.Subtract(prepared.param, b.Multiply(math(operands[5]), grad));
  std::vector<std::pair<Value, const Operand*>> updated = {{param, &operands[0]}};
  if (has_buffer) updated.push_back({buffer, &operands[2]});
  return math.Finish(std::move(updated), prepared, operands[1], operands[11]);
}

// Every parameter's step in one program: the layouts above with each per-parameter tensor given
// as a list over the parameters (an empty list where the tensor is absent); the results are the
// first parameter's, then the second's, and so on.
template <std::vector<Value> (*kStep)(LoweringContext&, std::span<const Operand>)>
std::vector<Value> ForEachParameter(LoweringContext& context, std::span<const Operand> operands) {
  std::vector<Value> results;
  for (size_t i = 0; i < operands[0].values.size(); ++i) {
    std::vector<Operand> parameter(operands.begin(), operands.end());
    for (Operand& operand : parameter) {
      if (operand.kind != Operand::Kind::kTensorList) continue;
      Operand element;  // None, for an empty list
      if (!operand.values.empty()) {
        element.kind = Operand::Kind::kTensor;
        element.value = operand.values.at(i);
        element.dtype = operand.dtypes.at(i);
      }
      operand = std::move(element);
    }
    for (Value& result : kStep(context, parameter)) results.push_back(std::move(result));
  }
  return results;
}
TORCH_TPU_LOWERING(ForEachParameter<FusedAdamStep>, "torch_tpu::fused_adam_steps");
TORCH_TPU_LOWERING(ForEachParameter<FusedAdagradStep>, "torch_tpu::fused_adagrad_steps");
TORCH_TPU_LOWERING(ForEachParameter<FusedSgdStep>, "torch_tpu::fused_sgd_steps");

}  // namespace
}  // namespace torch_tpu::lowering

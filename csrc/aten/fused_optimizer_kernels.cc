// torch.optim's fused=True steps (_fused_adam_, _fused_adamw_, _fused_sgd_, _fused_adagrad_): one
// device program per parameter (lowering/fused_optimizers.cc), which writes the parameter, its
// optimizer state and (with a grad_scale) the unscaled gradient in place.
#include <torch/library.h>

#include "exec/eager.h"
#include "lowering/registry.h"

namespace torch_tpu::aten {
namespace {

using TensorList = at::TensorList;

const lowering::LoweringFunction& Lowering(const char* name) {
  return lowering::LoweringRegistry::Get().Function(name);
}

// The i-th tensor of `list`, or None when the list is empty (an unused state list).
c10::IValue At(TensorList list, size_t i) { return list.empty() ? c10::IValue() : list[i]; }

void AddOptional(exec::EagerLaunch& launch, const c10::IValue& tensor) {
  if (tensor.isTensor()) {
    launch.AddTensor(tensor.toTensor());
  } else {
    launch.AddStatic(c10::IValue());
  }
}

void CheckLengths(const char* op, TensorList params, std::initializer_list<TensorList> lists) {
  for (TensorList list : lists) {
    TORCH_CHECK(list.empty() || list.size() == params.size(), op,
                ": all tensor lists must have the same length as params (", params.size(),
                "), got one of length ", list.size());
  }
}

// Launches `lowering` over `operands` (tensors, None, scalars in its layout) and writes its
// results into `destinations`, in order.
void Step(const char* op, const char* lowering, const std::vector<c10::IValue>& operands,
          const std::vector<size_t>& scalar_positions, const std::vector<at::Tensor>& destinations) {
  exec::EagerLaunch launch(op);
  launch.SetPointwise();
  for (size_t i = 0; i < operands.size(); ++i) {
    const bool scalar =
        std::find(scalar_positions.begin(), scalar_positions.end(), i) != scalar_positions.end();
    if (scalar && operands[i].isScalar()) {
      launch.AddScalar(operands[i].toScalar());
    } else if (operands[i].isTensor() || operands[i].isNone()) {
      AddOptional(launch, operands[i]);
    } else {
      launch.AddStatic(operands[i]);
    }
  }
  for (size_t r = 0; r < destinations.size(); ++r) launch.WriteResultTo(r, destinations[r]);
  launch.Run(Lowering(lowering));
}

c10::IValue Optional(const std::optional<at::Tensor>& tensor) {
  return tensor.has_value() ? c10::IValue(*tensor) : c10::IValue();
}

void AdamImpl(const char* op, bool decoupled, TensorList params, TensorList grads,
              TensorList exp_avgs, TensorList exp_avg_sqs, TensorList max_exp_avg_sqs,
              TensorList steps, const c10::IValue& lr, double beta1, double beta2,
              double weight_decay, double eps, bool amsgrad, bool maximize,
              const std::optional<at::Tensor>& grad_scale,
              const std::optional<at::Tensor>& found_inf) {
  CheckLengths(op, params, {grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps});
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<at::Tensor> written = {params[i], exp_avgs[i], exp_avg_sqs[i]};
    if (amsgrad) written.push_back(max_exp_avg_sqs[i]);
    if (grad_scale.has_value()) written.push_back(grads[i]);
    Step(op, "torch_tpu::fused_adam_step",
         {params[i], grads[i], exp_avgs[i], exp_avg_sqs[i], At(max_exp_avg_sqs, i), steps[i], lr,
          beta1, beta2, weight_decay, eps, amsgrad, maximize, decoupled, Optional(grad_scale),
          Optional(found_inf)},
         {6, 7, 8, 9, 10}, written);
  }
}

template <bool kDecoupled>
void Adam(TensorList params, TensorList grads, TensorList exp_avgs, TensorList exp_avg_sqs,
          TensorList max_exp_avg_sqs, TensorList steps, double lr, double beta1, double beta2,
          double weight_decay, double eps, bool amsgrad, bool maximize,
          const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  AdamImpl(kDecoupled ? "aten::_fused_adamw_" : "aten::_fused_adam_", kDecoupled, params, grads,
           exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, c10::Scalar(lr), beta1, beta2,
           weight_decay, eps, amsgrad, maximize, grad_scale, found_inf);
}

template <bool kDecoupled>
void AdamTensorLr(TensorList params, TensorList grads, TensorList exp_avgs,
                  TensorList exp_avg_sqs, TensorList max_exp_avg_sqs, TensorList steps,
                  const at::Tensor& lr, double beta1, double beta2, double weight_decay,
                  double eps, bool amsgrad, bool maximize,
                  const std::optional<at::Tensor>& grad_scale,
                  const std::optional<at::Tensor>& found_inf) {
  AdamImpl(kDecoupled ? "aten::_fused_adamw_" : "aten::_fused_adam_", kDecoupled, params, grads,
           exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr, beta1, beta2, weight_decay, eps,
           amsgrad, maximize, grad_scale, found_inf);
}

void SgdImpl(TensorList params, TensorList grads, TensorList buffers, double weight_decay,
             double momentum, const c10::IValue& lr, double dampening, bool nesterov,
             bool maximize, bool is_first_step, const std::optional<at::Tensor>& grad_scale,
             const std::optional<at::Tensor>& found_inf) {
  CheckLengths("aten::_fused_sgd_", params, {grads, buffers});
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<at::Tensor> written = {params[i]};
    if (!buffers.empty()) written.push_back(buffers[i]);
    if (grad_scale.has_value()) written.push_back(grads[i]);
    Step("aten::_fused_sgd_", "torch_tpu::fused_sgd_step",
         {params[i], grads[i], At(buffers, i), weight_decay, momentum, lr, dampening, nesterov,
          maximize, is_first_step, Optional(grad_scale), Optional(found_inf)},
         {3, 4, 5, 6}, written);
  }
}

void Sgd(TensorList params, TensorList grads, TensorList buffers, double weight_decay,
         double momentum, double lr, double dampening, bool nesterov, bool maximize,
         bool is_first_step, const std::optional<at::Tensor>& grad_scale,
         const std::optional<at::Tensor>& found_inf) {
  SgdImpl(params, grads, buffers, weight_decay, momentum, c10::Scalar(lr), dampening, nesterov,
          maximize, is_first_step, grad_scale, found_inf);
}

void SgdTensorLr(TensorList params, TensorList grads, TensorList buffers, double weight_decay,
                 double momentum, const at::Tensor& lr, double dampening, bool nesterov,
                 bool maximize, bool is_first_step, const std::optional<at::Tensor>& grad_scale,
                 const std::optional<at::Tensor>& found_inf) {
  SgdImpl(params, grads, buffers, weight_decay, momentum, lr, dampening, nesterov, maximize,
          is_first_step, grad_scale, found_inf);
}

void AdagradImpl(TensorList params, TensorList grads, TensorList state_sums, TensorList steps,
                 const c10::IValue& lr, double lr_decay, double weight_decay, double eps,
                 bool maximize, const std::optional<at::Tensor>& grad_scale,
                 const std::optional<at::Tensor>& found_inf) {
  CheckLengths("aten::_fused_adagrad_", params, {grads, state_sums, steps});
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<at::Tensor> written = {params[i], state_sums[i]};
    if (grad_scale.has_value()) written.push_back(grads[i]);
    Step("aten::_fused_adagrad_", "torch_tpu::fused_adagrad_step",
         {params[i], grads[i], state_sums[i], steps[i], lr, lr_decay, weight_decay, eps, maximize,
          Optional(grad_scale), Optional(found_inf)},
         {4, 5, 6, 7}, written);
  }
}

void Adagrad(TensorList params, TensorList grads, TensorList state_sums, TensorList steps,
             double lr, double lr_decay, double weight_decay, double eps, bool maximize,
             const std::optional<at::Tensor>& grad_scale,
             const std::optional<at::Tensor>& found_inf) {
  AdagradImpl(params, grads, state_sums, steps, c10::Scalar(lr), lr_decay, weight_decay, eps,
              maximize, grad_scale, found_inf);
}

void AdagradTensorLr(TensorList params, TensorList grads, TensorList state_sums, TensorList steps,
                     const at::Tensor& lr, double lr_decay, double weight_decay, double eps,
                     bool maximize, const std::optional<at::Tensor>& grad_scale,
                     const std::optional<at::Tensor>& found_inf) {
  AdagradImpl(params, grads, state_sums, steps, lr, lr_decay, weight_decay, eps, maximize,
              grad_scale, found_inf);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_adam_", Adam<false>);
  m.impl("_fused_adam_.tensor_lr", AdamTensorLr<false>);
  m.impl("_fused_adamw_", Adam<true>);
  m.impl("_fused_adamw_.tensor_lr", AdamTensorLr<true>);
  m.impl("_fused_sgd_", Sgd);
  m.impl("_fused_sgd_.tensor_lr", SgdTensorLr);
  m.impl("_fused_adagrad_", Adagrad);
  m.impl("_fused_adagrad_.tensor_lr", AdagradTensorLr);
}

}  // namespace
}  // namespace torch_tpu::aten

// torch.optim's fused=True steps (_fused_adam_, _fused_adamw_, _fused_sgd_, _fused_adagrad_): one
// device program for the whole parameter list (lowering/fused_optimizers.cc), which writes each
// parameter, its optimizer state and (with a grad_scale) the unscaled gradient in place.
#include <torch/library.h>

#include <algorithm>
#include <unordered_set>
#include <variant>

#include "exec/eager.h"
#include "lowering/registry.h"

namespace torch_tpu::aten {
namespace {

using TensorList = at::TensorList;

void CheckLengths(const char* op, TensorList params, std::initializer_list<TensorList> lists) {
  for (TensorList list : lists) {
    TORCH_CHECK(list.empty() || list.size() == params.size(), op,
                ": all tensor lists must have the same length as params (", params.size(),
                "), got one of length ", list.size());
  }
}

// An operand of the one-program step: a tensor list (possibly empty: an absent state), a single
// optional tensor, a runtime scalar or a static.
using StepOperand = std::variant<TensorList, c10::IValue>;

// Launches `lowering` (a torch_tpu::fused_*_steps lowering) over `operands` and writes its results
// into `written[0]` of every parameter, then `written[1]`, ...: result r of parameter i goes to
// written[r][i]. `scalar_positions` are the operands passed as runtime scalars.
void Steps(const char* op, const char* lowering, const std::vector<StepOperand>& operands,
           const std::vector<size_t>& scalar_positions, const std::vector<TensorList>& written) {
  exec::EagerLaunch launch(op);
  for (size_t i = 0; i < operands.size(); ++i) {
    if (const auto* list = std::get_if<TensorList>(&operands[i])) {
      launch.AddTensorList(list->vec());
      continue;
    }
    const c10::IValue& value = std::get<c10::IValue>(operands[i]);
    const bool scalar =
        std::find(scalar_positions.begin(), scalar_positions.end(), i) != scalar_positions.end();
    if (scalar && value.isScalar()) {
      launch.AddScalar(value.toScalar());
    } else if (value.isTensor()) {
      launch.AddTensor(value.toTensor());
    } else {
      launch.AddStatic(value);
    }
  }
  const size_t count = written.front().size();
  for (size_t i = 0; i < count; ++i) {
    for (size_t r = 0; r < written.size(); ++r) {
      launch.WriteResultTo(i * written.size() + r, written[r][i]);
    }
  }
  launch.Run(lowering::LoweringRegistry::Get().Function(lowering));
}

// One program writes every parameter; where two written tensors share a storage (parameters that
// are views of one flat buffer) each parameter gets its own launch, so the writes land in order.
bool SharesWrittenStorage(const std::vector<TensorList>& written) {
  std::unordered_set<const c10::StorageImpl*> storages;
  size_t tensors = 0;
  for (TensorList list : written) {
    for (const at::Tensor& tensor : list) {
      storages.insert(tensor.storage().unsafeGetStorageImpl());
      ++tensors;
    }
  }
  return storages.size() != tensors;
}

// Runs the step over all parameters at once, or parameter by parameter when they share storage.
void StepAll(const char* op, const char* lowering, const std::vector<StepOperand>& operands,
             const std::vector<size_t>& scalar_positions, const std::vector<TensorList>& written) {
  if (written.front().empty()) return;
  if (!SharesWrittenStorage(written)) {
    Steps(op, lowering, operands, scalar_positions, written);
    return;
  }
  for (size_t i = 0; i < written.front().size(); ++i) {
    auto one = [i](TensorList list) { return list.empty() ? list : list.slice(i, 1); };
    std::vector<StepOperand> parameter;
    for (const StepOperand& operand : operands) {
      const auto* list = std::get_if<TensorList>(&operand);
      parameter.push_back(list ? StepOperand(one(*list)) : operand);
    }
    std::vector<TensorList> parameter_written;
    for (TensorList list : written) parameter_written.push_back(one(list));
    Steps(op, lowering, parameter, scalar_positions, parameter_written);
  }
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
  std::vector<TensorList> written = {params, exp_avgs, exp_avg_sqs};
  if (amsgrad) written.push_back(max_exp_avg_sqs);
  if (grad_scale.has_value()) written.push_back(grads);
  StepAll(op, "torch_tpu::fused_adam_steps",
          {params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr, beta1, beta2,
           weight_decay, eps, amsgrad, maximize, decoupled, Optional(grad_scale),
           Optional(found_inf)},
          {6, 7, 8, 9, 10}, written);
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
  std::vector<TensorList> written = {params};
  if (!buffers.empty()) written.push_back(buffers);
  if (grad_scale.has_value()) written.push_back(grads);
  StepAll("aten::_fused_sgd_", "torch_tpu::fused_sgd_steps",
          {params, grads, buffers, weight_decay, momentum, lr, dampening, nesterov, maximize,
           is_first_step, Optional(grad_scale), Optional(found_inf)},
          {3, 4, 5, 6}, written);
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
  std::vector<TensorList> written = {params, state_sums};
  if (grad_scale.has_value()) written.push_back(grads);
  StepAll("aten::_fused_adagrad_", "torch_tpu::fused_adagrad_steps",
          {params, grads, state_sums, steps, lr, lr_decay, weight_decay, eps, maximize,
           Optional(grad_scale), Optional(found_inf)},
          {4, 5, 6, 7}, written);
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

// native_batch_norm: its schema does not mark running_mean/running_var as written, so the generic
// lowered kernel would not update them; this kernel writes the new statistics into them in the
// same device program that normalizes.
#include <torch/library.h>

#include <tuple>

#include "exec/eager.h"
#include "lowering/registry.h"

namespace torch_tpu::aten {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> NativeBatchNorm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var, bool training, double momentum, double eps) {
  auto add_optional = [](exec::EagerLaunch& launch, const std::optional<at::Tensor>& tensor) {
    if (tensor.has_value() && tensor->defined()) {
      launch.AddTensor(*tensor);
    } else {
      launch.AddStatic(c10::IValue());
    }
  };
  exec::EagerLaunch launch("aten::native_batch_norm");
  launch.AddTensor(input);
  add_optional(launch, weight);
  add_optional(launch, bias);
  add_optional(launch, running_mean);
  add_optional(launch, running_var);
  launch.AddStatic(training);
  launch.AddStatic(momentum);
  launch.AddStatic(eps);
  const bool update = training && running_mean.has_value() && running_mean->defined() &&
                      running_var.has_value() && running_var->defined();
  if (update) {
    launch.WriteResultTo(3, *running_mean);
    launch.WriteResultTo(4, *running_var);
  }
  auto results =
      launch.Run(lowering::LoweringRegistry::Get().Function("torch_tpu::batch_norm"));
  return {results[0], results[1], results[2]};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("native_batch_norm", NativeBatchNorm); }

}  // namespace
}  // namespace torch_tpu::aten

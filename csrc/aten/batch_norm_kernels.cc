// native_batch_norm: its schema does not mark running_mean/running_var as written, so the generic
// lowered kernel would not update them; this kernel writes the new statistics into them in the
// same device program that normalizes. The newer entry points (_native_batch_norm_legit,
// _batch_norm_with_update and its backward, which torch.export and nn.functional.batch_norm's
// decompositions reach) are the same computation under other signatures.
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <array>

#include <tuple>

#include "exec/eager.h"
#include "lowering/registry.h"

namespace torch_tpu::aten {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> NativeBatchNorm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var, bool training, double momentum, double eps) {
  exec::EagerLaunch launch("aten::native_batch_norm");
  launch.AddTensor(input);
  launch.AddOptionalTensor(weight);
  launch.AddOptionalTensor(bias);
  launch.AddOptionalTensor(running_mean);
  launch.AddOptionalTensor(running_var);
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

std::tuple<at::Tensor, at::Tensor, at::Tensor> NativeBatchNormLegit(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, at::Tensor& running_mean, at::Tensor& running_var,
    bool training, double momentum, double eps) {
  return NativeBatchNorm(input, weight, bias, running_mean, running_var, training, momentum, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> NativeBatchNormLegitNoStats(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, bool training, double momentum, double eps) {
  return NativeBatchNorm(input, weight, bias, std::nullopt, std::nullopt, training, momentum, eps);
}

using OutTriple = std::tuple<at::Tensor&, at::Tensor&, at::Tensor&>;

// The out= forms: CPU resizes the three outputs to the functional results' shapes (save_mean and
// save_invstd are empty in evaluation mode) and fills them.
OutTriple WriteOuts(std::tuple<at::Tensor, at::Tensor, at::Tensor> results, at::Tensor& out,
                    at::Tensor& save_mean, at::Tensor& save_invstd) {
  std::array<at::Tensor*, 3> outs = {&out, &save_mean, &save_invstd};
  std::array<at::Tensor, 3> values = {std::get<0>(results), std::get<1>(results),
                                      std::get<2>(results)};
  for (size_t k = 0; k < 3; ++k) {
    at::native::resize_output(*outs[k], values[k].sizes());
    outs[k]->copy_(values[k]);
  }
  return {out, save_mean, save_invstd};
}

OutTriple NativeBatchNormOut(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                             const std::optional<at::Tensor>& bias,
                             const std::optional<at::Tensor>& running_mean,
                             const std::optional<at::Tensor>& running_var, bool training,
                             double momentum, double eps, at::Tensor& out, at::Tensor& save_mean,
                             at::Tensor& save_invstd) {
  return WriteOuts(NativeBatchNorm(input, weight, bias, running_mean, running_var, training,
                                   momentum, eps),
                   out, save_mean, save_invstd);
}

OutTriple NativeBatchNormLegitOut(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                                  const std::optional<at::Tensor>& bias, at::Tensor& running_mean,
                                  at::Tensor& running_var, bool training, double momentum,
                                  double eps, at::Tensor& out, at::Tensor& save_mean,
                                  at::Tensor& save_invstd) {
  return NativeBatchNormOut(input, weight, bias, running_mean, running_var, training, momentum,
                            eps, out, save_mean, save_invstd);
}

OutTriple NativeBatchNormLegitNoStatsOut(const at::Tensor& input,
                                         const std::optional<at::Tensor>& weight,
                                         const std::optional<at::Tensor>& bias, bool training,
                                         double momentum, double eps, at::Tensor& out,
                                         at::Tensor& save_mean, at::Tensor& save_invstd) {
  return NativeBatchNormOut(input, weight, bias, std::nullopt, std::nullopt, training, momentum,
                            eps, out, save_mean, save_invstd);
}

// Training-mode batch norm; `reserve` is CPU's empty byte tensor (cuDNN's workspace elsewhere).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> BatchNormWithUpdate(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, at::Tensor& running_mean, at::Tensor& running_var,
    double momentum, double eps) {
  auto [output, save_mean, save_invstd] =
      NativeBatchNorm(input, weight, bias, running_mean, running_var, true, momentum, eps);
  return {output, save_mean, save_invstd, at::empty({0}, input.options().dtype(at::kByte))};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> BatchNormBackward(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_var,
    bool update, double eps, std::array<bool, 3> output_mask, const at::Tensor& /*reserve*/) {
  return at::native_batch_norm_backward(grad_out, input, weight, running_mean, running_var,
                                        save_mean, save_var, update, eps, output_mask);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("native_batch_norm", NativeBatchNorm);
  m.impl("native_batch_norm.out", NativeBatchNormOut);
  m.impl("_native_batch_norm_legit.out", NativeBatchNormLegitOut);
  m.impl("_native_batch_norm_legit.no_stats_out", NativeBatchNormLegitNoStatsOut);
  m.impl("_native_batch_norm_legit", NativeBatchNormLegit);
  m.impl("_native_batch_norm_legit.no_stats", NativeBatchNormLegitNoStats);
  m.impl("_batch_norm_with_update", BatchNormWithUpdate);
  m.impl("batch_norm_backward", BatchNormBackward);
}

}  // namespace
}  // namespace torch_tpu::aten

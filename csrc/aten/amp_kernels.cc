// Mixed precision on tpu: torch.autocast("tpu", dtype=torch.bfloat16) casts matmuls and
// convolutions to the low-precision dtype and keeps reductions, norms, losses and transcendental
// functions in float32 (PyTorch's shared autocast op lists), and the two ops GradScaler needs.
#include <ATen/autocast_mode.h>
#include <ATen/ops/all.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/logical_not.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

namespace torch_tpu::aten {
namespace {

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define TORCH_TPU_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TORCH_TPU_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TORCH_TPU_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TORCH_TPU_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(TORCH_TPU_LOWER_PRECISION)
  AT_FORALL_FP32(TORCH_TPU_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(TORCH_TPU_FP32_SET_OPT_DTYPE)
  AT_FORALL_PROMOTE(TORCH_TPU_PROMOTE)
#undef TORCH_TPU_LOWER_PRECISION
#undef TORCH_TPU_FP32
#undef TORCH_TPU_FP32_SET_OPT_DTYPE
#undef TORCH_TPU_PROMOTE
}

// Unscales gradients in place and raises found_inf if any of them holds inf or NaN; composed of
// lowered ops, so it runs on the device without a host sync.
void NonFiniteCheckAndUnscale(at::TensorList grads, at::Tensor& found_inf,
                              const at::Tensor& inv_scale) {
  TORCH_CHECK(inv_scale.numel() == 1, "inv_scale must be a 1-element tensor.");
  TORCH_CHECK(found_inf.numel() == 1, "found_inf must be a 1-element tensor.");
  for (const at::Tensor& grad : grads) {
    at::Tensor non_finite = at::logical_not(at::all(at::isfinite(grad)));
    found_inf.copy_(at::maximum(found_inf, non_finite.to(found_inf.scalar_type()).reshape_as(found_inf)));
    const_cast<at::Tensor&>(grad).mul_(inv_scale.to(grad.scalar_type()));
  }
}

// scale *= backoff after an overflow (and the streak restarts); scale *= growth after
// `growth_interval` clean steps in a row.
at::Tensor& UpdateScale(at::Tensor& scale, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                        double growth_factor, double backoff_factor, int64_t growth_interval) {
  at::Tensor found = found_inf.reshape_as(scale) > 0;
  at::Tensor streak = at::where(found, at::zeros_like(growth_tracker), growth_tracker + 1);
  at::Tensor grow = streak.reshape_as(scale) >= growth_interval;
  at::Tensor new_scale =
      at::where(found, scale * backoff_factor, at::where(grow, scale * growth_factor, scale));
  growth_tracker.copy_(at::where(grow.reshape_as(streak), at::zeros_like(streak), streak));
  scale.copy_(new_scale);
  return scale;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_amp_foreach_non_finite_check_and_unscale_", NonFiniteCheckAndUnscale);
  m.impl("_amp_update_scale_", UpdateScale);
}

}  // namespace
}  // namespace torch_tpu::aten

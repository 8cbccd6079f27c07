// Scaled dot-product attention without autograd as one program. PyTorch asks each device which
// SDPA backend to use; ours answers "overrideable" (the fused kernel below) when nothing needs
// the attention weights for a backward pass, and "math" otherwise, whose decomposition
// (scale, bmm, mask, _safe_softmax, bmm) is five programs per key length: a generation loop would
// compile all of them for every new token.
#include <ATen/ExpandUtils.h>
#include <ATen/SDPBackend.h>
#include <ATen/core/grad_mode.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/empty.h>
#include <c10/core/DispatchKeySet.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "exec/eager.h"
#include "lowering/registry.h"

namespace torch_tpu::aten {
namespace {

constexpr const char* kFusedAttention = "aten::_scaled_dot_product_fused_attention_overrideable";

bool PlainTpuTensor(const at::Tensor& tensor) {
  // Fake, functional and functorch-wrapped tensors (torch.compile's tracing) take the math
  // decomposition, which the compiler sees op by op.
  static const c10::DispatchKeySet wrappers{
      c10::DispatchKey::Python, c10::DispatchKey::Functionalize,
      c10::DispatchKey::FuncTorchBatched, c10::DispatchKey::FuncTorchGradWrapper};
  return tensor.device().is_privateuseone() && !tensor.is_nested() &&
         !tensor.key_set().has_any(wrappers);
}

bool Fusable(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
             const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal) {
  const bool has_mask = attn_mask.has_value() && attn_mask->defined();
  // Dropout draws random bits; is_causal with a mask is an error the math path raises.
  if (dropout_p > 0.0 || (is_causal && has_mask)) return false;
  if (!PlainTpuTensor(query) || !PlainTpuTensor(key) || !PlainTpuTensor(value)) return false;
  if (at::GradMode::is_enabled() &&
      (query.requires_grad() || key.requires_grad() || value.requires_grad() ||
       (has_mask && attn_mask->requires_grad()))) {
    return false;
  }
  const int64_t rank = query.dim();
  if (rank < 2 || key.dim() != rank || value.dim() != rank) return false;
  // Same batch dims (no broadcasting, no grouped-query heads), matching inner dims, one dtype.
  if (query.sizes().slice(0, rank - 2) != key.sizes().slice(0, rank - 2) ||
      key.sizes().slice(0, rank - 2) != value.sizes().slice(0, rank - 2) ||
      query.size(-1) != key.size(-1) || key.size(-2) != value.size(-2)) {
    return false;
  }
  const c10::ScalarType dtype = query.scalar_type();
  if (!c10::isFloatingType(dtype) || key.scalar_type() != dtype || value.scalar_type() != dtype) {
    return false;
  }
  if (!has_mask) return true;
  if (!PlainTpuTensor(*attn_mask)) return false;
  if (attn_mask->scalar_type() != at::kBool && attn_mask->scalar_type() != dtype) return false;
  std::vector<int64_t> scores(query.sizes().begin(), query.sizes().end());
  scores.back() = key.size(-2);
  return at::is_expandable_to(attn_mask->sizes(), scores);
}

int64_t ChooseBackend(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                      const std::optional<at::Tensor>& attn_mask, double dropout_p,
                      bool is_causal, std::optional<double> /*scale*/, bool /*enable_gqa*/) {
  const bool fused = Fusable(query, key, value, attn_mask, dropout_p, is_causal);
  return static_cast<int64_t>(fused ? at::SDPBackend::overrideable : at::SDPBackend::math);
}

using FusedAttentionResults = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                                         c10::SymInt, c10::SymInt, at::Tensor, at::Tensor,
                                         at::Tensor>;

// Only the output is computed: the logsumexp and the rest serve a backward pass, which this
// kernel is never chosen for (its backward is not implemented, so calling it directly and
// differentiating raises rather than returning wrong gradients).
FusedAttentionResults FusedAttention(const at::Tensor& query, const at::Tensor& key,
                                     const at::Tensor& value,
                                     const std::optional<at::Tensor>& attn_bias, double dropout_p,
                                     bool is_causal, bool return_debug_mask,
                                     std::optional<double> scale) {
  TORCH_CHECK(dropout_p == 0.0 && !return_debug_mask, kFusedAttention,
              ": tpu runs it without dropout and without the debug mask (got dropout_p=",
              dropout_p, ", return_debug_mask=", return_debug_mask, ")");
  TORCH_CHECK(Fusable(query, key, value, attn_bias, dropout_p, is_causal), kFusedAttention,
              ": tpu expects query ", query.sizes(), ", key ", key.sizes(), " and value ",
              value.sizes(), " of one floating dtype with the same batch dims (got ",
              query.scalar_type(), ", ", key.scalar_type(), ", ", value.scalar_type(), ")");
  exec::EagerLaunch launch(kFusedAttention);
  launch.AddTensor(query);
  launch.AddTensor(key);
  launch.AddTensor(value);
  if (attn_bias.has_value() && attn_bias->defined()) {
    launch.AddTensor(*attn_bias);
  } else {
    launch.AddStatic(c10::IValue());
  }
  launch.AddStatic(is_causal);
  launch.AddStatic(scale.has_value() ? c10::IValue(*scale) : c10::IValue());
  at::Tensor output =
      launch.Run(lowering::LoweringRegistry::Get().Function("torch_tpu::attention"))[0];
  const at::Tensor none = at::empty({0}, query.options());
  return {output, none, none, none, c10::SymInt(0), c10::SymInt(0), none, none, none};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_scaled_dot_product_fused_attention_overrideable", FusedAttention);
}

}  // namespace
}  // namespace torch_tpu::aten

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_tpu::aten::ChooseBackend);
}  // namespace at::native

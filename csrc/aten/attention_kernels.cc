// F.scaled_dot_product_attention on tpu. ATen asks each device which SDPA backend to run
// (`_fused_sdp_choice_stub`); tpu answers "overrideable" where the fused computation in
// lowering/attention.cc applies, and the math path (PyTorch's composition of matmul, softmax and
// dropout) elsewhere. The overrideable forward and backward are one launch each; autograd saves
// the output and the log-sum-exp for the backward, not the attention probabilities.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <c10/core/SymInt.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>

#include "exec/eager.h"
#include "lowering/registry.h"

namespace torch_tpu::aten {
namespace {

constexpr char kForward[] = "aten::_scaled_dot_product_fused_attention_overrideable";
constexpr char kBackward[] = "aten::_scaled_dot_product_fused_attention_overrideable_backward";

bool HasSymbolicSizes(const at::Tensor& tensor) {
  for (const c10::SymInt& size : tensor.sym_sizes()) {
    if (!size.maybe_as_int().has_value()) return true;
  }
  return false;
}

bool FusedDtype(c10::ScalarType dtype) {
  return dtype == c10::kFloat || dtype == c10::kBFloat16 || dtype == c10::kHalf;
}

// Whether the fused computation gives this call's result. Everything else takes the math path:
// dropout (its mask is drawn there), float64, nested or symbolically sized operands (a graph
// traced with dynamic shapes keeps the ops its size buckets have rules for), operands of other
// ranks or batch sizes (broadcasting, and the errors, are the math path's), and head counts that
// grouped-query attention does not allow.
bool UseFusedAttention(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                       const std::optional<at::Tensor>& attn_mask, double dropout_p,
                       bool is_causal, bool enable_gqa) {
  if (!at::globalContext().userEnabledOverrideableSDP() || dropout_p != 0.0) return false;
  const std::array<const at::Tensor*, 3> operands = {&query, &key, &value};
  const int64_t rank = query.dim();
  for (const at::Tensor* tensor : operands) {
    if (tensor->is_nested() || tensor->dim() != rank || HasSymbolicSizes(*tensor) ||
        tensor->scalar_type() != query.scalar_type() || tensor->sym_numel() == 0) {
      return false;
    }
  }
  if ((rank != 3 && rank != 4) || !FusedDtype(query.scalar_type())) return false;
  const int64_t heads = rank - 3;
  if (rank == 4 && (key.size(0) != query.size(0) || value.size(0) != query.size(0))) {
    return false;
  }
  const int64_t query_heads = query.size(heads), kv_heads = key.size(heads);
  if (value.size(heads) != kv_heads || key.size(-2) != value.size(-2) ||
      key.size(-1) != query.size(-1)) {
    return false;
  }
  if (query_heads != kv_heads && !(enable_gqa && query_heads % kv_heads == 0)) return false;
  if (attn_mask.has_value() && attn_mask->defined()) {
    const at::Tensor& mask = *attn_mask;
    if (is_causal || mask.is_nested() || mask.dim() > rank || HasSymbolicSizes(mask) ||
        (mask.scalar_type() != c10::kBool && mask.scalar_type() != query.scalar_type())) {
      return false;
    }
    // Broadcastable to the scores (…, Hq, L, S).
    std::vector<int64_t> scores = query.sizes().vec();
    scores.back() = key.size(-2);
    for (int64_t d = 1; d <= mask.dim(); ++d) {
      const int64_t size = mask.size(-d);
      if (size != 1 && size != scores[rank - d]) return false;
    }
  }
  return true;
}

int64_t ChooseAttentionBackend(const at::Tensor& query, const at::Tensor& key,
                               const at::Tensor& value,
                               const std::optional<at::Tensor>& attn_mask, double dropout_p,
                               bool is_causal, std::optional<double> /*scale*/, bool enable_gqa) {
  const bool fused =
      UseFusedAttention(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa);
  return static_cast<int64_t>(fused ? at::SDPBackend::overrideable : at::SDPBackend::math);
}

// The key length, a runtime scalar: a launch whose program serves growing key lengths (a
// generation loop's cache) reads its keys padded, and masks those at or past it.
void AddKeyCount(exec::EagerLaunch& launch, const at::Tensor& key) {
  launch.AddScalar(c10::Scalar(key.size(-2)));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor,
           at::Tensor, at::Tensor>
FusedAttention(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
               const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal,
               bool return_debug_mask, std::optional<double> scale) {
  TORCH_CHECK(dropout_p == 0.0, kForward, ": dropout is not supported on tpu (dropout_p=",
              dropout_p, "); scaled_dot_product_attention runs it on the math path");
  TORCH_CHECK(!return_debug_mask, kForward, ": return_debug_mask is not supported on tpu");
  exec::EagerLaunch launch(kForward);
  launch.AddTensor(query);
  launch.AddTensor(key);
  launch.AddTensor(value);
  launch.AddOptionalTensor(attn_bias);
  launch.AddStatic(is_causal);
  launch.AddStatic(scale);
  AddKeyCount(launch, key);
  auto results = launch.Run(
      lowering::LoweringRegistry::Get().Function("torch_tpu::scaled_dot_product_attention"));
  return {results[0], results[1], at::Tensor(), at::Tensor(),
          c10::SymInt(query.size(-2)), c10::SymInt(key.size(-2)),
          results[2], results[3], at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> FusedAttentionBackward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key,
    const at::Tensor& value, const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask,
    const at::Tensor& out, const at::Tensor& logsumexp, const at::Tensor& /*cum_seq_q*/,
    const at::Tensor& /*cum_seq_k*/, c10::SymInt /*max_q*/, c10::SymInt /*max_k*/,
    double dropout_p, bool is_causal, const at::Tensor& /*philox_seed*/,
    const at::Tensor& /*philox_offset*/, std::optional<double> scale) {
  TORCH_CHECK(dropout_p == 0.0, kBackward, ": dropout is not supported on tpu (dropout_p=",
              dropout_p, ")");
  exec::EagerLaunch launch(kBackward);
  launch.AddTensor(grad_out);
  launch.AddTensor(query);
  launch.AddTensor(key);
  launch.AddTensor(value);
  launch.AddOptionalTensor(attn_bias);
  launch.AddTensor(out);
  launch.AddTensor(logsumexp);
  launch.AddStatic(is_causal);
  launch.AddStatic(scale);
  AddKeyCount(launch, key);
  c10::List<bool> mask;
  for (bool wanted : grad_input_mask) mask.push_back(wanted);
  launch.AddStatic(mask);
  auto results = launch.Run(lowering::LoweringRegistry::Get().Function(
      "torch_tpu::scaled_dot_product_attention_backward"));
  const bool bias_grad =
      grad_input_mask[3] && attn_bias.defined() && attn_bias.scalar_type() != c10::kBool;
  return {results[0], results[1], results[2], bias_grad ? results[3] : at::Tensor()};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", ChooseAttentionBackend);
  m.impl("_scaled_dot_product_fused_attention_overrideable", FusedAttention);
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", FusedAttentionBackward);
}

}  // namespace
}  // namespace torch_tpu::aten

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_tpu::aten::ChooseAttentionBackend);
}  // namespace at::native

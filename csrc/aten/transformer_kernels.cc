// The inference fast path of nn.MultiheadAttention and nn.TransformerEncoderLayer (eval mode,
// no grad, batch_first): aten::_native_multi_head_attention and
// aten::_transformer_encoder_layer_fwd, plus the masked softmax they use. PyTorch registers these
// for CPU and CUDA only, so on tpu they would run through the CPU fallback. Here they are
// compositions of lowered tpu ops (projections, bmm, softmax, layer norm, activations): strict
// mode launches each as a device op, DeferAndFuse records them into one graph. The argument
// checks and the arithmetic order follow CPU's kernels, so results match CPU within float
// tolerance (fully masked rows are NaN there too).
#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <tuple>

namespace torch_tpu::aten {
namespace {

// The mask broadcast to the scores' shape, with CPU's checks and its mask_type rules: types 0
// ((L, L) attention mask) and 1 ((B, L) key padding mask) only for a 2-D mask over 4-D scores;
// any other mask is type 2 and has the scores' shape.
at::Tensor MaskForScores(const at::Tensor& scores, const at::Tensor& mask,
                         std::optional<int64_t> mask_type) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "Mask should be a boolean tensor");
  if (mask.dim() != 2 || scores.dim() != 4) mask_type = 2;
  TORCH_CHECK(mask_type.has_value(), "Mask Type should be defined");
  switch (*mask_type) {
    case 2:
      TORCH_CHECK(scores.sizes() == mask.sizes(),
                  "For mask_type == 2 mask shape should match input shape");
      return mask;
    case 1:
      TORCH_CHECK(scores.size(0) == mask.size(0) && scores.size(2) == mask.size(1),
                  "For mask_type == 1 mask shape should be (B, L)");
      return mask.view({scores.size(0), 1, 1, scores.size(2)}).expand(scores.sizes());
    case 0:
      TORCH_CHECK(scores.size(2) == mask.size(0) && scores.size(2) == mask.size(1),
                  "For mask_type == 0 mask shape should be (L, L)");
      return mask.view({1, 1, scores.size(2), scores.size(2)}).expand(scores.sizes());
    default:
      TORCH_CHECK(false,
                  "Mask Type should be 0 (src_mask) or 1 (src_key_padding_mask), or 2 "
                  "(default_mask)");
  }
}

// _masked_softmax: masked positions (true) take no part and come out 0; a row with every
// position masked is NaN, as on CPU.
at::Tensor MaskedSoftmax(const at::Tensor& self, const at::Tensor& mask, std::optional<int64_t> dim,
                         std::optional<int64_t> mask_type) {
  const at::Tensor full_mask = MaskForScores(self, mask, mask_type);
  const int64_t wrapped = c10::maybe_wrap_dim(dim.value_or(self.dim() - 1), self.dim());
  const at::Tensor scores =
      self.masked_fill(full_mask, -std::numeric_limits<double>::infinity());
  return at::_softmax(scores, wrapped, /*half_to_float=*/false);
}

at::Tensor MaskedSoftmaxBackward(const at::Tensor& grad, const at::Tensor& output,
                                 const at::Tensor& mask, std::optional<int64_t> dim) {
  TORCH_CHECK(grad.sizes() == mask.sizes(), "Mask shape should match grad shape");
  TORCH_CHECK(mask.scalar_type() == at::kBool, "Mask should be a boolean tensor");
  const int64_t wrapped = c10::maybe_wrap_dim(dim.value_or(output.dim() - 1), grad.dim());
  return at::_softmax_backward_data(grad, output, wrapped, grad.scalar_type())
      .masked_fill(mask, 0);
}

// [B, T, E] -> [B, heads, T, E / heads]
at::Tensor SplitHeads(const at::Tensor& x, int64_t num_head) {
  return x.view({x.size(0), x.size(1), num_head, x.size(2) / num_head}).transpose(1, 2);
}

// The shape checks of CPU's native_multi_head_attention, in its order and words.
void CheckAttentionArguments(const at::Tensor& query, const at::Tensor& key,
                             const at::Tensor& value, int64_t embed_dim, int64_t num_head,
                             const at::Tensor& qkv_weight, const at::Tensor& qkv_bias,
                             const std::optional<at::Tensor>& mask) {
  const int64_t D = embed_dim;
  TORCH_CHECK(!mask.has_value() || !query.is_nested(),
              "NestedTensor with mask is not supported yet");
  TORCH_CHECK(query.dim() == 3, "expected 3-D `query`, got ", query.dim(), "-D tensor");
  TORCH_CHECK(query.is_nested() || query.size(2) == embed_dim, "passed-in embed_dim ", embed_dim,
              " didn't match last dim of query ", query.size(2));
  TORCH_CHECK(key.dim() == 3, "expected 3-D `key`, got ", key.dim(), "-D tensor");
  TORCH_CHECK(value.dim() == 3, "expected 3-D `value`, got ", value.dim(), "-D tensor");
  TORCH_CHECK(query.is_nested() || key.is_nested() || value.is_nested() ||
                  (query.sizes() == key.sizes() && key.sizes() == value.sizes()),
              "expected `query`/`key`/`value` shapes to match");
  TORCH_CHECK(qkv_weight.dim() == 2, "expected 2-D `qkv_weight`, got ", qkv_weight.dim(),
              "-D tensor");
  TORCH_CHECK(D * 3 == qkv_weight.size(0), "expected `qkv_weight` first dim to be 3x embed_dim");
  TORCH_CHECK(D == qkv_weight.size(1), "expected `qkv_weight` second dim to be embed_Dim");
  TORCH_CHECK(qkv_bias.dim() == 1, "expected 1-D `qkv_bias`, got ", qkv_bias.dim(),
              "-D tensor");
  TORCH_CHECK(qkv_bias.size(0) == 3 * D,
              "expected `qkv_bias` first dim and first dim of query to be equal");
  TORCH_CHECK(D % num_head == 0, "`embed_dim` must divide evenly by `num_heads`");
}

std::tuple<at::Tensor, at::Tensor> MultiHeadAttention(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, int64_t embed_dim,
    int64_t num_head, const at::Tensor& qkv_weight, const at::Tensor& qkv_bias,
    const at::Tensor& proj_weight, const at::Tensor& proj_bias,
    const std::optional<at::Tensor>& mask, bool need_weights, bool average_attn_weights,
    std::optional<int64_t> mask_type) {
  CheckAttentionArguments(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, mask);
  const int64_t D = embed_dim;
  if (query.size(0) * query.size(1) * 3 * D == 0) return {at::empty_like(query), at::Tensor()};

  // Projections without bias first, then bias and the 1/sqrt(head dim) scale of q, as CPU does;
  // self-attention is one matmul over the packed weight.
  at::Tensor q;
  at::Tensor k;
  at::Tensor v;
  if (query.is_same(key) && key.is_same(value)) {
    const auto qkv = at::matmul(query, qkv_weight.t()).chunk(3, -1);
    std::tie(q, k, v) = std::make_tuple(qkv[0], qkv[1], qkv[2]);
  } else {
    const auto weights = qkv_weight.chunk(3, 0);
    q = at::matmul(query, weights[0].t());
    k = at::matmul(key, weights[1].t());
    v = at::matmul(value, weights[2].t());
  }
  const auto biases = qkv_bias.chunk(3, 0);
  const double inv_sqrt_head_dim = 1.0 / std::sqrt(static_cast<double>(D / num_head));
  q = SplitHeads((q + biases[0]) * inv_sqrt_head_dim, num_head);
  k = SplitHeads(k + biases[1], num_head);
  v = SplitHeads(v + biases[2], num_head);

  at::Tensor weights = at::matmul(q, k.transpose(-1, -2));  // [B, heads, T, T]
  if (mask.has_value()) {
    // CPU treats any non-zero mask value (a -inf of an additive float mask) as masked.
    const at::Tensor bool_mask = mask->scalar_type() == at::kBool ? *mask : mask->to(at::kBool);
    weights = at::_masked_softmax(weights, bool_mask, weights.dim() - 1, mask_type);
  } else {
    weights = at::_softmax(weights, weights.dim() - 1, /*half_to_float=*/false);
  }
  const at::Tensor context = at::matmul(weights, v).transpose(1, 2).reshape(
      {query.size(0), query.size(1), D});
  at::Tensor output = at::linear(context, proj_weight, proj_bias);
  if (!need_weights) return {std::move(output), at::Tensor()};
  if (average_attn_weights) weights = weights.sum(1) / num_head;
  return {std::move(output), std::move(weights)};
}

at::Tensor TransformerEncoderLayer(
    const at::Tensor& src, int64_t embed_dim, int64_t num_heads, const at::Tensor& qkv_weight,
    const at::Tensor& qkv_bias, const at::Tensor& proj_weight, const at::Tensor& proj_bias,
    bool use_gelu, bool norm_first, double eps, const at::Tensor& norm_weight_1,
    const at::Tensor& norm_bias_1, const at::Tensor& norm_weight_2, const at::Tensor& norm_bias_2,
    const at::Tensor& ffn_weight_1, const at::Tensor& ffn_bias_1, const at::Tensor& ffn_weight_2,
    const at::Tensor& ffn_bias_2, const std::optional<at::Tensor>& mask,
    std::optional<int64_t> mask_type) {
  if (src.numel() == 0) return src.clone();
  auto norm = [&](const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
    return at::layer_norm(x, {embed_dim}, weight, bias, eps);
  };
  at::Tensor x = norm_first ? norm(src, norm_weight_1, norm_bias_1) : src;
  x = std::get<0>(MultiHeadAttention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias,
                                     proj_weight, proj_bias, mask, /*need_weights=*/false,
                                     /*average_attn_weights=*/true, mask_type)) +
      src;
  if (!norm_first) x = norm(x, norm_weight_1, norm_bias_1);
  const at::Tensor residual = x;
  if (norm_first) x = norm(x, norm_weight_2, norm_bias_2);

  TORCH_CHECK(x.dim() == 3, "batched input size should be 3");
  TORCH_CHECK(ffn_weight_1.dim() == 2, "2d weights expected");
  TORCH_CHECK(ffn_weight_2.dim() == 2, "2d weights expected");
  x = at::linear(x, ffn_weight_1, ffn_bias_1);
  x = use_gelu ? at::gelu(x) : at::relu(x);
  x = at::linear(x, ffn_weight_2, ffn_bias_2) + residual;
  if (!norm_first) x = norm(x, norm_weight_2, norm_bias_2);
  return x;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_masked_softmax", MaskedSoftmax);
  m.impl("_masked_softmax_backward", MaskedSoftmaxBackward);
  m.impl("_native_multi_head_attention", MultiHeadAttention);
  m.impl("_transformer_encoder_layer_fwd", TransformerEncoderLayer);
}

}  // namespace
}  // namespace torch_tpu::aten

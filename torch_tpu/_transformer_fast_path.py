"""The inference fast path of nn.MultiheadAttention and nn.TransformerEncoderLayer (eval mode, no
grad, batch_first): aten::_native_multi_head_attention, aten::_transformer_encoder_layer_fwd and
the masked softmax they use, as compositions of lowered tpu ops (projections, bmm, softmax,
layer norm, activations).

PyTorch registers these for CPU and CUDA only, so on tpu they would run through the CPU fallback.
One implementation serves every mode: registered as the tpu kernels, strict mode launches each
op as a device op and DeferAndFuse records them into one graph; registered as decompositions of
the compiled path (torch_tpu/_dynamo/decompositions.py), a compiled TransformerEncoderLayer is
one program. The argument checks and the arithmetic order follow CPU's kernels, so results
match CPU within float tolerance (fully masked rows are NaN there too).
"""

from __future__ import annotations

import math

import torch

aten = torch.ops.aten


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise RuntimeError(message)


def _wrap_dim(dim: int, rank: int) -> int:
    """maybe_wrap_dim: negative dims count from the end; out of range is CPU's IndexError."""
    rank = max(rank, 1)
    if not -rank <= dim < rank:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, "
                         f"{rank - 1}], but got {dim})")
    return dim % rank


def _mask_for_scores(scores: torch.Tensor, mask: torch.Tensor, mask_type: int | None):
    """The mask broadcast to the scores' shape, with CPU's checks and its mask_type rules: types
    0 ((L, L) attention mask) and 1 ((B, L) key padding mask) only for a 2-D mask over 4-D
    scores; any other mask is type 2 and has the scores' shape."""
    _check(mask.dtype == torch.bool, "Mask should be a boolean tensor")
    if mask.dim() != 2 or scores.dim() != 4:
        mask_type = 2
    _check(mask_type is not None, "Mask Type should be defined")
    if mask_type == 2:
        _check(scores.shape == mask.shape,
               "For mask_type == 2 mask shape should match input shape")
        return mask
    if mask_type == 1:
        _check(scores.shape[0] == mask.shape[0] and scores.shape[2] == mask.shape[1],
               "For mask_type == 1 mask shape should be (B, L)")
        return mask.view(scores.shape[0], 1, 1, scores.shape[2]).expand(scores.shape)
    if mask_type == 0:
        _check(scores.shape[2] == mask.shape[0] and scores.shape[2] == mask.shape[1],
               "For mask_type == 0 mask shape should be (L, L)")
        return mask.view(1, 1, scores.shape[2], scores.shape[2]).expand(scores.shape)
    raise RuntimeError("Mask Type should be 0 (src_mask) or 1 (src_key_padding_mask), or 2 "
                       "(default_mask)")


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int | None = None,
                   mask_type: int | None = None) -> torch.Tensor:
    """_masked_softmax: masked positions (true) take no part and come out 0; a row with every
    position masked is NaN, as on CPU."""
    full_mask = _mask_for_scores(scores, mask, mask_type)
    dim = _wrap_dim(scores.dim() - 1 if dim is None else dim, scores.dim())
    return aten._softmax(scores.masked_fill(full_mask, -math.inf), dim, False)


def masked_softmax_backward(grad: torch.Tensor, output: torch.Tensor, mask: torch.Tensor,
                            dim: int | None = None) -> torch.Tensor:
    _check(grad.shape == mask.shape, "Mask shape should match grad shape")
    _check(mask.dtype == torch.bool, "Mask should be a boolean tensor")
    dim = _wrap_dim(output.dim() - 1 if dim is None else dim, grad.dim())
    return aten._softmax_backward_data(grad, output, dim, grad.dtype).masked_fill(mask, 0)


def _split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """[B, T, E] -> [B, heads, T, E / heads]"""
    return x.view(x.shape[0], x.shape[1], heads, x.shape[2] // heads).transpose(1, 2)


def _check_attention_arguments(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
                               mask) -> None:
    """The shape checks of CPU's native_multi_head_attention, in its order and words."""
    _check(mask is None or not query.is_nested, "NestedTensor with mask is not supported yet")
    _check(query.dim() == 3, f"expected 3-D `query`, got {query.dim()}-D tensor")
    _check(query.is_nested or query.shape[2] == embed_dim,
           f"passed-in embed_dim {embed_dim} didn't match last dim of query {query.shape[2]}")
    _check(key.dim() == 3, f"expected 3-D `key`, got {key.dim()}-D tensor")
    _check(value.dim() == 3, f"expected 3-D `value`, got {value.dim()}-D tensor")
    _check(query.is_nested or key.is_nested or value.is_nested or
           (query.shape == key.shape and key.shape == value.shape),
           "expected `query`/`key`/`value` shapes to match")
    _check(qkv_weight.dim() == 2, f"expected 2-D `qkv_weight`, got {qkv_weight.dim()}-D tensor")
    _check(embed_dim * 3 == qkv_weight.shape[0],
           "expected `qkv_weight` first dim to be 3x embed_dim")
    _check(embed_dim == qkv_weight.shape[1], "expected `qkv_weight` second dim to be embed_Dim")
    _check(qkv_bias.dim() == 1, f"expected 1-D `qkv_bias`, got {qkv_bias.dim()}-D tensor")
    _check(qkv_bias.shape[0] == 3 * embed_dim,
           "expected `qkv_bias` first dim and first dim of query to be equal")
    _check(embed_dim % num_head == 0, "`embed_dim` must divide evenly by `num_heads`")


def multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
                         proj_weight, proj_bias, mask=None, need_weights=True,
                         average_attn_weights=True, mask_type=None):
    _check_attention_arguments(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
                               mask)
    if query.shape[0] * query.shape[1] * 3 * embed_dim == 0:
        return torch.empty_like(query), None
    # Projections without bias first, then bias and the 1/sqrt(head dim) scale of q, as CPU
    # does; self-attention is one matmul over the packed weight.
    if query is key and key is value:
        q, k, v = torch.matmul(query, qkv_weight.t()).chunk(3, -1)
    else:
        weights = qkv_weight.chunk(3, 0)
        q = torch.matmul(query, weights[0].t())
        k = torch.matmul(key, weights[1].t())
        v = torch.matmul(value, weights[2].t())
    biases = qkv_bias.chunk(3, 0)
    inv_sqrt_head_dim = 1.0 / math.sqrt(embed_dim // num_head)
    q = _split_heads((q + biases[0]) * inv_sqrt_head_dim, num_head)
    k = _split_heads(k + biases[1], num_head)
    v = _split_heads(v + biases[2], num_head)
    weights = torch.matmul(q, k.transpose(-1, -2))  # [B, heads, T, T]
    if mask is not None:
        # CPU treats any non-zero mask value (a -inf of an additive float mask) as masked.
        bool_mask = mask if mask.dtype == torch.bool else mask.to(torch.bool)
        weights = aten._masked_softmax(weights, bool_mask, weights.dim() - 1, mask_type)
    else:
        weights = aten._softmax(weights, weights.dim() - 1, False)
    context = torch.matmul(weights, v).transpose(1, 2).reshape(query.shape[0], query.shape[1],
                                                               embed_dim)
    output = torch.nn.functional.linear(context, proj_weight, proj_bias)
    if not need_weights:
        return output, None
    if average_attn_weights:
        weights = weights.sum(1) / num_head
    return output, weights


def transformer_encoder_layer(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                              proj_bias, use_gelu, norm_first, eps, norm_weight_1, norm_bias_1,
                              norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2,
                              ffn_bias_2, mask=None, mask_type=None):
    if src.numel() == 0:
        return src.clone()

    def norm(x, weight, bias):
        return torch.nn.functional.layer_norm(x, (embed_dim,), weight, bias, eps)

    x = norm(src, norm_weight_1, norm_bias_1) if norm_first else src
    x = aten._native_multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias,
                                          proj_weight, proj_bias, mask, False, True,
                                          mask_type)[0] + src
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    residual = x
    if norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    _check(x.dim() == 3, "batched input size should be 3")
    _check(ffn_weight_1.dim() == 2, "2d weights expected")
    _check(ffn_weight_2.dim() == 2, "2d weights expected")
    x = torch.nn.functional.linear(x, ffn_weight_1, ffn_bias_1)
    x = torch.nn.functional.gelu(x) if use_gelu else torch.relu(x)
    x = torch.nn.functional.linear(x, ffn_weight_2, ffn_bias_2) + residual
    if not norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    return x


KERNELS = {
    aten._masked_softmax.default: masked_softmax,
    aten._masked_softmax_backward.default: masked_softmax_backward,
    aten._native_multi_head_attention.default: multi_head_attention,
    aten._transformer_encoder_layer_fwd.default: transformer_encoder_layer,
}

_library = torch.library.Library("aten", "IMPL")
for _op, _kernel in KERNELS.items():
    _library.impl(_op._schema.name.split("::")[1], _kernel, "PrivateUse1")

"""F.scaled_dot_product_attention on tpu runs the device's fused ("overrideable") backend where it
applies: one launch forward, one backward, and autograd keeps the output and the log-sum-exp
instead of the attention probabilities. Everything else takes PyTorch's math path. Every case is
compared with PyTorch CPU (its flash or math kernel), forward and gradients."""

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import torch_tpu

FUSED_BACKWARD = "ScaledDotProductFusedAttentionOverrideableBackward0"


def attention_inputs(batch, query_heads, kv_heads, queries, keys, head, value_head=None,
                     dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    shape = (batch,) if batch else ()
    query = torch.randn(*shape, query_heads, queries, head, generator=generator, dtype=dtype)
    key = torch.randn(*shape, kv_heads, keys, head, generator=generator, dtype=dtype)
    value = torch.randn(*shape, kv_heads, keys, value_head or head, generator=generator,
                        dtype=dtype)
    return query, key, value


def run(device, inputs, mask=None, backward=True, **kwargs):
    """(output, gradients of query, key, value and mask, the output's grad_fn name) on `device`."""
    leaves = [x.detach().to(device).requires_grad_(backward) for x in inputs]
    moved_mask = None
    if mask is not None:
        moved_mask = mask.detach().to(device)
        if backward and mask.is_floating_point():
            moved_mask.requires_grad_()
    out = F.scaled_dot_product_attention(*leaves, attn_mask=moved_mask, **kwargs)
    grad_fn = type(out.grad_fn).__name__ if out.grad_fn is not None else None
    results = [out]
    if backward:
        weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
        out.backward(weights.to(device))
        results += [x.grad for x in leaves]
        if moved_mask is not None and moved_mask.requires_grad:
            results.append(moved_mask.grad)
    return [r.detach().cpu() for r in results], grad_fn


def assert_matches_cpu(inputs, mask=None, backward=True, fused=True, **kwargs):
    expected, _ = run("cpu", inputs, mask, backward, **kwargs)
    torch_tpu.reset_metrics()
    got, grad_fn = run("tpu", inputs, mask, backward, **kwargs)
    assert not torch_tpu.metrics()["fallback_ops"]
    if backward:
        assert (grad_fn == FUSED_BACKWARD) == fused, grad_fn
    tolerance = 1e-5 if inputs[0].dtype == torch.float32 else 2e-2
    assert len(got) == len(expected)
    for value, reference in zip(got, expected):
        assert value.dtype == reference.dtype and value.shape == reference.shape
        torch.testing.assert_close(value.float(), reference.float(), atol=tolerance,
                                   rtol=tolerance)


@pytest.mark.parametrize("case", [
    dict(shape=(2, 4, 4, 5, 7, 8)),
    dict(shape=(2, 4, 4, 5, 7, 8), scale=0.3),
    dict(shape=(2, 4, 4, 5, 7, 8, 6)),  # value head size differs
    dict(shape=(1, 8, 2, 6, 6, 4), enable_gqa=True),
    dict(shape=(2, 4, 4, 6, 6, 8), is_causal=True),
    dict(shape=(2, 4, 2, 4, 9, 8), is_causal=True, enable_gqa=True),  # causal, top-left aligned
    dict(shape=(0, 3, 3, 5, 7, 8)),  # 3-d operands (heads, length, size)
], ids=["plain", "scale", "value_head", "gqa", "causal", "causal_gqa_rectangular", "3d"])
def test_fused_attention_matches_cpu(case):
    case = dict(case)
    assert_matches_cpu(attention_inputs(*case.pop("shape")), **case)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_types_compute_in_float32_and_round_once(dtype):
    assert_matches_cpu(attention_inputs(2, 4, 2, 5, 7, 8, dtype=dtype), enable_gqa=True)


def test_boolean_mask_and_fully_masked_rows():
    # Row 1 sees no key: CPU's kernels give 0 there, and so do the gradients through it.
    mask = torch.tensor([[1, 1, 0, 0, 1], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert_matches_cpu(attention_inputs(2, 2, 2, 3, 5, 4), mask)


def test_float_mask_broadcast_gets_its_gradient():
    # (B, 1, L, S) broadcast over the heads: its gradient sums over them.
    mask = torch.randn(2, 1, 3, 5)
    assert_matches_cpu(attention_inputs(2, 4, 4, 3, 5, 8), mask)


@pytest.mark.parametrize("case", [
    dict(dropout_p=0.0, dtype=torch.float64),
    dict(batch_broadcast=True),
    dict(heads_without_gqa=True),
], ids=["float64", "broadcast_batch", "grouped_heads_without_enable_gqa"])
def test_other_calls_take_the_math_path(case):
    if case.get("dtype") == torch.float64:
        assert_matches_cpu(attention_inputs(2, 4, 4, 5, 7, 8, dtype=torch.float64), fused=False)
    elif case.get("batch_broadcast"):
        query, key, value = attention_inputs(2, 4, 4, 5, 7, 8)
        assert_matches_cpu((query, key[:1], value[:1]), fused=False)
    else:
        # Without enable_gqa, 8 query heads over 2 key heads is an error on CPU and on tpu alike.
        inputs = attention_inputs(1, 8, 2, 5, 7, 8)
        with pytest.raises(RuntimeError) as cpu_error:
            run("cpu", inputs)
        with pytest.raises(RuntimeError) as tpu_error:
            run("tpu", inputs)
        assert str(tpu_error.value).split("\n")[0] == str(cpu_error.value).split("\n")[0]


def test_sdpa_kernel_math_context_is_honoured():
    with sdpa_kernel([SDPBackend.MATH]):
        assert_matches_cpu(attention_inputs(2, 4, 4, 5, 7, 8), fused=False)


def test_dropout_takes_the_math_path():
    inputs = [x.to("tpu").requires_grad_() for x in attention_inputs(2, 4, 4, 5, 7, 8)]
    out = F.scaled_dot_product_attention(*inputs, dropout_p=0.5)
    assert type(out.grad_fn).__name__ != FUSED_BACKWARD
    assert not torch_tpu.metrics()["fallback_ops"]


def test_saves_log_sum_exp_not_probabilities():
    """What makes attention's training memory smaller than the math path's: nothing of the
    scores' (B, H, L, S) shape is kept for the backward, and grouped keys are not expanded."""
    batch, heads, kv_heads, queries, keys, head = 2, 8, 2, 16, 32, 8
    inputs = [x.to("tpu").requires_grad_()
              for x in attention_inputs(batch, heads, kv_heads, queries, keys, head)]
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t,
                                                  lambda t: t):
        out = F.scaled_dot_product_attention(*inputs, is_causal=True, enable_gqa=True)
    assert (batch, heads, queries, keys) not in saved
    assert (batch, heads, keys, head) not in saved  # keys repeated per query head
    assert (batch, heads, queries) in saved  # the log-sum-exp
    out.sum().backward()
    assert all(x.grad is not None for x in inputs)


def test_direct_call_with_dropout_raises_naming_the_op():
    query, key, value = (x.to("tpu") for x in attention_inputs(1, 2, 2, 3, 3, 4))
    with pytest.raises(RuntimeError) as error:
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable(query, key, value,
                                                                        dropout_p=0.1)
    assert str(error.value).split("\n")[0] == (
        "aten::_scaled_dot_product_fused_attention_overrideable: dropout is not supported on "
        "tpu (dropout_p=0.1); scaled_dot_product_attention runs it on the math path")


def test_growing_keys_share_programs():
    """A decoding loop (one query, keys one longer per step) runs programs built per bucket of
    the key length, whose padded keys are masked: results equal CPU's at every length."""
    generator = torch.Generator().manual_seed(3)
    query = torch.randn(1, 4, 1, 8, generator=generator)
    keys = torch.randn(1, 4, 40, 8, generator=generator)
    values = torch.randn(1, 4, 40, 8, generator=generator)
    key_cache, value_cache = keys[:, :, :4].to("tpu"), values[:, :, :4].to("tpu")
    torch_tpu.reset_metrics()
    for length in range(5, 41):
        key_cache = torch.cat([key_cache, keys[:, :, length - 1:length].to("tpu")], dim=2)
        value_cache = torch.cat([value_cache, values[:, :, length - 1:length].to("tpu")], dim=2)
        got = F.scaled_dot_product_attention(query.to("tpu"), key_cache, value_cache)
        expected = F.scaled_dot_product_attention(query, keys[:, :, :length],
                                                  values[:, :, :length])
        torch.testing.assert_close(got.cpu(), expected, atol=1e-5, rtol=1e-5)
    programs = torch_tpu.metrics().get("compile_count", 0)
    # Three exact lengths to find the line, then buckets 16, 32 and 64 for the cat and the
    # attention: far fewer than a program per length and op (72).
    assert programs <= 16, programs


def test_compiled_attention_is_one_program_each_way():
    torch._dynamo.reset()

    def loss_of(query, key, value):
        out = F.scaled_dot_product_attention(query, key, value, is_causal=True, enable_gqa=True)
        return out.sin().sum()

    inputs = attention_inputs(2, 4, 2, 6, 6, 8)
    reference = [x.clone().requires_grad_() for x in inputs]
    loss_of(*reference).backward()
    compiled = torch.compile(loss_of, backend="tpu")
    for step in range(2):
        leaves = [x.to("tpu").requires_grad_() for x in inputs]
        torch.tpu.synchronize()
        torch_tpu.reset_metrics()
        loss = compiled(*leaves)
        loss.backward()
        torch.tpu.synchronize()
        metrics = torch_tpu.metrics()
        assert "compiled_graphs_eager" not in metrics, metrics["compiled_graphs_eager"]
        assert not metrics["fallback_ops"]
    # The warm step: the forward program, the backward program and autograd's seed gradient.
    assert (metrics.get("compile_count", 0), metrics["execute_count"]) == (0, 3)
    torch.testing.assert_close(loss.cpu(), loss_of(*inputs), atol=1e-5, rtol=1e-5)
    for leaf, expected in zip(leaves, reference):
        torch.testing.assert_close(leaf.grad.cpu(), expected.grad, atol=1e-5, rtol=1e-5)

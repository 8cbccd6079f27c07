"""scaled_dot_product_attention without autograd runs as one program (PyTorch's SDPA backend
choice gives tpu the "overrideable" fused kernel); with autograd, dropout or grouped-query heads it
takes PyTorch's math decomposition. Both match CPU."""

import pytest
import torch
import torch.nn.functional as F

from conftest import assert_like_cpu, assert_raises_exactly, assert_same, compiles, sample

FUSED = "aten::_scaled_dot_product_fused_attention_overrideable"


def qkv(length=3, keys=5, dtype=torch.float32):
    return (sample((2, 2, n, 4), torch.float32, seed=s).to(dtype)
            for s, n in ((1, length), (2, keys), (3, keys)))


MASK = torch.tensor([[True, False, True, True, False],
                     [False, False, False, False, False],  # attends to nothing: zeros
                     [True, True, True, True, True]])


@pytest.mark.strict_mode
@pytest.mark.parametrize("options", [
    {}, {"is_causal": True}, {"attn_mask": MASK}, {"attn_mask": MASK.float().log()},
    {"scale": -0.3}, {"dtype": torch.bfloat16},
], ids=["plain", "causal", "bool_mask", "float_mask", "negative_scale", "bfloat16"])
def test_inference_attention_is_one_program_and_matches_cpu(options):
    options = dict(options)
    q, k, v = qkv(dtype=options.pop("dtype", torch.float32))
    tolerances = {"atol": 2e-2, "rtol": 2e-2} if q.dtype == torch.bfloat16 else {}

    def attend(device):
        kw = {key: value.to(device) if torch.is_tensor(value) else value
              for key, value in options.items()}
        return F.scaled_dot_product_attention(q.to(device), k.to(device), v.to(device), **kw)

    assert_like_cpu(attend, **tolerances)
    # Same shapes again: nothing to compile; other key lengths compile one program each.
    assert compiles(lambda: attend("tpu")) == 0
    if "attn_mask" not in options:
        q2, k2, v2 = (t.to("tpu") for t in qkv(keys=7, dtype=q.dtype))
        assert compiles(lambda: F.scaled_dot_product_attention(q2, k2, v2, **options)) == 1


def test_autograd_and_dropout_take_the_math_decomposition():
    q, k, v = qkv()
    cpu_q = q.clone().requires_grad_()
    tpu_q = q.to("tpu").requires_grad_()
    expected = F.scaled_dot_product_attention(cpu_q, k, v, is_causal=True)
    result = F.scaled_dot_product_attention(tpu_q, k.to("tpu"), v.to("tpu"), is_causal=True)
    assert_same(result, expected)
    expected.square().sum().backward()
    result.square().sum().backward()
    # CPU differentiates its flash kernel, tpu the math formula: summation orders differ.
    assert_same(tpu_q.grad, cpu_q.grad, atol=1e-4, rtol=1e-4)
    torch.manual_seed(0)
    dropped = F.scaled_dot_product_attention(*(t.to("tpu") for t in (q, k, v)), dropout_p=0.5)
    assert dropped.shape == (2, 2, 3, 4) and dropped.isfinite().all()


def test_grouped_query_heads_match_cpu():
    q = sample((1, 4, 3, 4), torch.float32, seed=1)
    k, v = (sample((1, 2, 5, 4), torch.float32, seed=s) for s in (2, 3))
    assert_like_cpu(lambda d: F.scaled_dot_product_attention(q.to(d), k.to(d), v.to(d),
                                                             enable_gqa=True))


def test_direct_calls_the_fused_kernel_cannot_serve_raise():
    q, k, v = (t.to("tpu") for t in qkv())
    fused = torch.ops.aten._scaled_dot_product_fused_attention_overrideable
    assert_raises_exactly(
        RuntimeError,
        f"{FUSED}: tpu runs it without dropout and without the debug mask (got dropout_p=0.5, "
        "return_debug_mask=0)", lambda: fused(q, k, v, dropout_p=0.5))
    assert_raises_exactly(
        RuntimeError,
        f"{FUSED}: tpu expects query [2, 2, 3, 4], key [2, 2, 5, 4] and value [2, 2, 5, 4] of one "
        "floating dtype with the same batch dims (got Float, Double, Float)",
        lambda: fused(q, k.double(), v))

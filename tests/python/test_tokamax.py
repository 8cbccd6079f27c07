"""Tokamax kernels as tpu ops (torch_tpu.kernels) against PyTorch CPU, forward and backward."""

import pytest
import torch
from torch.nn import functional as F

from torch_tpu import kernels


def _pair(*shapes, seed=0):
    generator = torch.Generator().manual_seed(seed)
    cpu = [torch.randn(shape, generator=generator).requires_grad_() for shape in shapes]
    tpu = [t.detach().to("tpu").requires_grad_() for t in cpu]
    return cpu, tpu


def _check(result, expected, cpu_inputs, tpu_inputs, tolerance=1e-4):
    assert result.device.type == "tpu" and result.dtype == expected.dtype
    torch.testing.assert_close(result.cpu(), expected.detach(), rtol=tolerance, atol=tolerance)
    weight = torch.randn(expected.shape, generator=torch.Generator().manual_seed(7))
    (expected * weight).sum().backward()
    (result * weight.to("tpu")).sum().backward()
    for tpu_input, cpu_input in zip(tpu_inputs, cpu_inputs):
        torch.testing.assert_close(tpu_input.grad.cpu(), cpu_input.grad, rtol=tolerance,
                                   atol=tolerance)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_attention_matches_sdpa(is_causal, kv_heads):
    cpu, tpu = _pair((2, 4, 8, 16), (2, kv_heads, 8, 16), (2, kv_heads, 8, 16))
    expected = F.scaled_dot_product_attention(*cpu, is_causal=is_causal,
                                              enable_gqa=kv_heads != 4)
    result = kernels.dot_product_attention(*tpu, is_causal=is_causal)
    _check(result, expected, cpu, tpu)


def test_attention_scale():
    cpu, tpu = _pair((1, 2, 8, 16), (1, 2, 8, 16), (1, 2, 8, 16))
    expected = F.scaled_dot_product_attention(*cpu, scale=0.3)
    _check(kernels.dot_product_attention(*tpu, scale=0.3), expected, cpu, tpu)


@pytest.mark.parametrize("activation", ["silu", "gelu"])
def test_gated_linear_unit(activation):
    cpu, tpu = _pair((2, 4, 16), (16, 32), (16, 32))
    x, gate, up = cpu
    # jax.nn.gelu is the tanh approximation.
    act = F.silu if activation == "silu" else lambda v: F.gelu(v, approximate="tanh")
    expected = act(x @ gate) * (x @ up)
    _check(kernels.gated_linear_unit(*tpu, activation=activation), expected, cpu, tpu)


def test_gated_linear_unit_rejects_unknown_activation():
    x = torch.ones(2, 4, device="tpu")
    with pytest.raises(ValueError) as error:
        kernels.gated_linear_unit(x, x, x, activation="tanh")
    assert str(error.value) == ("gated_linear_unit: activation must be one of ('silu', 'gelu', "
                                "'relu', 'sigmoid'), got 'tanh'")


def test_layer_norm():
    cpu, tpu = _pair((3, 5, 32), (32,), (32,))
    expected = F.layer_norm(cpu[0], (32,), cpu[1], cpu[2], eps=1e-5)
    _check(kernels.layer_norm(*tpu, eps=1e-5), expected, cpu, tpu)


def test_rms_norm():
    cpu, tpu = _pair((4, 32), (32,), (32,))
    x, weight, bias = cpu
    expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight + bias
    _check(kernels.layer_norm(*tpu, eps=1e-6, rms=True), expected, cpu, tpu)

"""GroupNorm (native_group_norm and its backward) runs natively on tpu and matches CPU: with and
without affine parameters, several group counts and spatial ranks, half inputs with float
parameters, and what CPU raises for channels that do not divide into groups."""

import pytest
import torch
from torch.nn import functional as F

import torch_tpu
from conftest import assert_same, sample

CASES = [
    # (input shape, groups, affine)
    ((4, 6, 5, 5), 3, True),
    ((4, 6, 5, 5), 1, True),
    ((4, 6, 5, 5), 6, False),
    ((2, 8, 7), 2, True),
    ((3, 4), 2, True),
    ((2, 4, 2, 3, 2), 4, True),
]


def group_norm_both(shape, groups, affine, dtype=torch.float32, parameter_dtype=torch.float32):
    x = sample(shape, dtype)
    weight = sample((shape[1],), parameter_dtype, seed=1) if affine else None
    bias = sample((shape[1],), parameter_dtype, seed=2) if affine else None
    results = {}
    for device in ["cpu", "tpu"]:
        leaves = [t.to(device).detach().requires_grad_() if t is not None else None for t in (x, weight, bias)]
        out = F.group_norm(leaves[0], groups, leaves[1], leaves[2], eps=1e-5)
        out.backward(sample(out.shape, out.dtype, seed=3).to(device))
        results[device] = [out] + [t.grad for t in leaves if t is not None]
    return results


@pytest.mark.parametrize("shape,groups,affine", CASES)
def test_group_norm_forward_and_backward_match_cpu(shape, groups, affine):
    torch_tpu.reset_metrics()
    results = group_norm_both(shape, groups, affine)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    for tpu_result, cpu_result in zip(results["tpu"], results["cpu"]):
        assert_same(tpu_result, cpu_result, rtol=1e-4, atol=1e-4)


def test_statistics_match_cpu():
    x = sample((2, 6, 3, 3), torch.float32)
    cpu = torch.ops.aten.native_group_norm(x, None, None, 2, 6, 9, 3, 1e-5)
    tpu = torch.ops.aten.native_group_norm(x.to("tpu"), None, None, 2, 6, 9, 3, 1e-5)
    for t, c in zip(tpu, cpu):
        assert_same(t, c, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("parameter_dtype", [torch.bfloat16, torch.float32])
def test_bfloat16_input(parameter_dtype):
    results = group_norm_both((2, 4, 3, 3), 2, True, torch.bfloat16, parameter_dtype)
    for tpu_result, cpu_result in zip(results["tpu"], results["cpu"]):
        assert_same(tpu_result, cpu_result, rtol=5e-2, atol=5e-2)


def test_mixed_precision_statistics_are_float():
    x = sample((2, 4, 3), torch.bfloat16)
    weight = torch.ones(4)
    cpu = torch.ops.aten.native_group_norm(x, weight, weight, 2, 4, 3, 2, 1e-5)
    tpu = torch.ops.aten.native_group_norm(x.to("tpu"), weight.to("tpu"), weight.to("tpu"), 2, 4, 3, 2, 1e-5)
    assert [t.dtype for t in tpu] == [t.dtype for t in cpu]


def test_channels_not_divisible_raise_like_cpu(tpu):
    x = torch.randn(2, 4, 3)
    with pytest.raises(RuntimeError, match="divisible by num_groups") as cpu_error:
        F.group_norm(x, 3)
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        F.group_norm(x.to(tpu), 3)
    assert cpu_error.type is RuntimeError

"""Backward of the piecewise activations (hardswish, hardsigmoid, hard/soft shrink, glu, prelu)
and of binary cross entropy, lowered natively, against PyTorch's CPU gradients: float32 and
bfloat16, values on the breakpoints, no CPU fallback."""

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from conftest import assert_same, sample

# Breakpoints of the activations below (-3, 3, +-lambd) and values around them.
EDGES = torch.tensor([-4.0, -3.0, -2.9, -0.5, -0.0, 0.0, 0.5, 0.49, 0.51, -0.5, 2.9, 3.0, 4.0])


def gradients(function, inputs, device, dtype):
    leaves = [t.to(dtype).to(device).requires_grad_() for t in inputs]
    output = function(*leaves)
    cotangent = sample(output.shape, torch.float32, seed=1).to(dtype).to(device)
    return torch.autograd.grad(output, leaves, cotangent)


def assert_gradients_like_cpu(function, inputs, dtype, **tolerances):
    torch_tpu.reset_metrics()
    tpu = gradients(function, inputs, "tpu", dtype)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    for tpu_grad, cpu_grad in zip(tpu, gradients(function, inputs, "cpu", dtype)):
        assert_same(tpu_grad, cpu_grad, **tolerances)


ACTIVATIONS = {
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "hardshrink": lambda x: F.hardshrink(x, 0.5),
    "softshrink": lambda x: F.softshrink(x, 0.5),
    "glu": lambda x: F.glu(x, dim=0),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_backward_matches_cpu(name, dtype):
    x = torch.cat([EDGES, EDGES.flip(0), sample((38,), torch.float32)])
    # Exact where CPU rounds the same way; hardswish's ramp may differ by one float32 ulp.
    tolerance = {"rtol": 0, "atol": 0} if "shrink" in name or "sigmoid" in name else {
        "rtol": 2e-6, "atol": 1e-6}
    assert_gradients_like_cpu(ACTIVATIONS[name], [x], dtype, **tolerance)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_prelu_backward_matches_cpu(dtype):
    x = torch.cat([EDGES, sample((11,), torch.float32)]).reshape(2, 3, 4)
    weight = torch.tensor([0.25, -0.5, 2.0])
    assert_gradients_like_cpu(F.prelu, [x, weight], dtype)
    assert_gradients_like_cpu(F.prelu, [x, weight[:1]], dtype)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_binary_cross_entropy_backward_matches_cpu(reduction, dtype):
    x = torch.cat([torch.rand(22), torch.tensor([0.0, 1.0])]).reshape(4, 6)
    target = torch.rand(4, 6)
    weight = torch.rand(6)
    assert_gradients_like_cpu(
        lambda a: F.binary_cross_entropy(a, target.to(a), reduction=reduction), [x], dtype)
    assert_gradients_like_cpu(
        lambda a: F.binary_cross_entropy(a, target.to(a), weight.to(a), reduction=reduction), [x],
        dtype)

"""Scans beyond cumsum/cumprod lowered natively: logcumsumexp (forward, backward, infinities,
NaN, bfloat16) and cummax/cummin (values and indices exactly as CPU: ties and NaNs go to the
later element; integer and bool dtypes), against PyTorch's CPU results."""

import pytest
import torch

import torch_tpu
from conftest import assert_like_cpu, assert_same, sample

INF, NAN = float("inf"), float("nan")
SPECIAL = torch.tensor([[1.0, 1.0, 0.5, 2.0, 2.0, -1.0, 3.0, 3.0],
                        [-INF, -INF, 0.0, INF, 1.0, INF, -INF, 2.0],
                        [1.0, NAN, 2.0, 5.0, NAN, 0.0, 7.0, -1.0]])


@pytest.mark.parametrize("function", [torch.cummax, torch.cummin])
def test_cumulative_extremum_matches_cpu(function):
    torch_tpu.reset_metrics()
    for x, dim in ((SPECIAL, 1), (SPECIAL, 0), (sample((3, 4, 5), torch.float32), -2),
                   (sample((5, 6), torch.int32).abs() % 3, 1),
                   (sample((4, 6), torch.bool), 1), (torch.tensor(2.5), 0),
                   (sample((7,), torch.bfloat16).round(), 0), (torch.zeros(0, 3), 0)):
        values, indices = function(x.to("tpu"), dim)
        expected_values, expected_indices = function(x, dim)
        assert_same(values, expected_values, rtol=0, atol=0, equal_nan=True)
        assert_same(indices, expected_indices, rtol=0, atol=0)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    name = function.__name__
    assert_like_cpu(lambda d: function(SPECIAL.to(d), 2),
                    message=f"aten::{name}: dimension out of range (expected to be in range of "
                            "[-2, 1], but got 2)")


def test_cumulative_extremum_backward_matches_cpu():
    x = sample((4, 6), torch.float32)
    grads = {}
    for device in ("cpu", "tpu"):
        leaf = x.to(device).detach().requires_grad_()
        torch.cummax(leaf, 1).values.sum().backward()
        grads[device] = leaf.grad
    assert_same(grads["tpu"], grads["cpu"])


def test_logcumsumexp_matches_cpu():
    torch_tpu.reset_metrics()
    for x, dim in ((SPECIAL, 1), (sample((3, 4, 5), torch.float32), 2),
                   (sample((6,), torch.float32) * 30, 0), (torch.tensor(1.5), 0)):
        assert_like_cpu(lambda d: torch.logcumsumexp(x.to(d), dim), rtol=1e-5, atol=1e-6,
                        equal_nan=True)
    assert_like_cpu(lambda d: torch.logcumsumexp(sample((5, 7), torch.bfloat16).to(d), 1))
    assert_like_cpu(lambda d: torch.logcumsumexp(torch.arange(4).to(d), 0),
                    message="aten::_logcumsumexp: \"logcumsumexp_out_cpu\" not implemented for "
                            "'Long'")
    x = sample((4, 6), torch.float32)
    grads = {}
    for device in ("cpu", "tpu"):
        leaf = x.to(device).detach().requires_grad_()
        torch.logcumsumexp(leaf, 1).backward(sample((4, 6), torch.float32, seed=1).to(device))
        grads[device] = leaf.grad
    assert_same(grads["tpu"], grads["cpu"], rtol=1e-5, atol=1e-6)
    assert torch_tpu.metrics()["fallback_ops"] == {}


def test_logcumsumexp_backward_near_large_values_matches_cpu():
    """The backward (composite) subtracts the result from log|grad| and adds the input back; at
    1e4 one f32 ulp of the result moves the gradient by 1e-3, so the forward must round like CPU,
    which accumulates in double. CPU itself is ~2e-3 away from the f64 gradient here."""
    x = sample((5, 5, 5), torch.float32)
    x[0] = 10000
    g = sample((5, 5, 5), torch.float32, seed=1)
    for dim in (0, 1):
        grads = {}
        for device, dtype in (("cpu", torch.float32), ("tpu", torch.float32),
                              ("cpu", torch.float64)):
            leaf = x.to(device, dtype).detach().requires_grad_()
            torch.logcumsumexp(leaf, dim).backward(g.to(device, dtype))
            grads[device, dtype] = leaf.grad
        assert_same(grads["tpu", torch.float32], grads["cpu", torch.float32], rtol=1e-5,
                    atol=1e-5)
        reference = grads["cpu", torch.float64].float()
        cpu_error = (grads["cpu", torch.float32] - reference).abs().max()
        tpu_error = (grads["tpu", torch.float32].cpu() - reference).abs().max()
        assert tpu_error <= cpu_error + 1e-5


def test_mode_matches_cpu():
    torch_tpu.reset_metrics()
    ties = torch.tensor([[3.0, 1.0, 3.0, 1.0, 2.0], [5.0, 5.0, 5.0, 4.0, 4.0],
                         [2.0, 2.0, 7.0, 7.0, 7.0]])
    for x, dim, keepdim in ((ties, 1, False), (ties, 0, True), (ties.to(torch.int64), -1, False),
                            (sample((4, 9), torch.int32) % 3, 1, False), (torch.tensor(2.0), 0,
                                                                          False),
                            (ties.bfloat16(), 1, True)):
        values, indices = torch.mode(x.to("tpu"), dim, keepdim)
        expected_values, expected_indices = torch.mode(x, dim, keepdim)
        assert_same(values, expected_values, rtol=0, atol=0)
        assert_same(indices, expected_indices, rtol=0, atol=0)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    assert_like_cpu(lambda d: torch.mode(torch.zeros(2, 0, device=d), 1),
                    message="aten::mode: mode(): Expected reduction dim 1 to have non-zero size.")

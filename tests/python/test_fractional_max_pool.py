"""fractional_max_pool2d / fractional_max_pool3d and their backward run natively on tpu: given the
same random samples, the pooled values and their indices are CPU's exactly (NaN and ties
included), and so is the gradient."""

import pytest
import torch
from torch.nn import functional as F

import torch_tpu
from conftest import assert_like_cpu, assert_same, sample

CASES = [
    # (input shape, kernel_size, output_size)
    ((2, 3, 9, 11), (2, 3), (4, 5)),
    ((3, 7, 8), (3, 2), (3, 6)),
    ((2, 2, 6, 7, 8), (2, 2, 3), (3, 4, 3)),
    ((2, 5, 6, 7), 2, (3, 3, 4)),
]


@pytest.mark.parametrize("shape,kernel_size,output_size", CASES, ids=[str(c[0]) for c in CASES])
def test_fractional_max_pool_matches_cpu(shape, kernel_size, output_size):
    spatial = len(output_size)
    pool = F.fractional_max_pool2d if spatial == 2 else F.fractional_max_pool3d
    x = sample(shape, torch.float32)
    x[(0,) * (len(shape) - spatial)][(1,) * spatial] = float("nan")
    # Rounding to halves makes equal values within a window, so ties are exercised too.
    x = torch.round(x * 2) / 2
    batch, channels = (shape[0], shape[1]) if len(shape) == spatial + 2 else (1, shape[0])
    samples = torch.rand(batch, channels, spatial, generator=torch.Generator().manual_seed(3))
    results = {}
    for device in ["cpu", "tpu"]:
        leaf = x.to(device).detach().requires_grad_()
        out, indices = pool(leaf, kernel_size, output_size=output_size, return_indices=True,
                            _random_samples=samples.to(device))
        out.backward(sample(out.shape, torch.float32, seed=2).to(device))
        results[device] = (out, indices, leaf.grad)
    assert_same(results["tpu"][0], results["cpu"][0], rtol=0, atol=0, equal_nan=True)
    assert_same(results["tpu"][1], results["cpu"][1], rtol=0, atol=0)
    assert_same(results["tpu"][2], results["cpu"][2], rtol=1e-6, atol=1e-6)


def test_fractional_max_pool_runs_natively(tpu):
    x = sample((1, 2, 6, 6), torch.float32).to(tpu).requires_grad_()
    torch_tpu.reset_metrics()
    F.fractional_max_pool2d(x, 2, output_size=3).sum().backward()
    assert torch_tpu.metrics()["fallback_ops"] == {}


@pytest.mark.parametrize("make,message", [
    (lambda d: F.fractional_max_pool2d(torch.ones(1, 1, 4, 4, device=d), 3, output_size=3,
                                       _random_samples=torch.rand(1, 1, 2, device=d)),
     "aten::fractional_max_pool2d: pool height 3 too large relative to input height 4"),
    (lambda d: F.fractional_max_pool3d(torch.ones(1, 1, 4, 4, 4, device=d), 2,
                                       output_size=(2, 4, 2),
                                       _random_samples=torch.rand(1, 1, 3, device=d)),
     "aten::fractional_max_pool3d: pool height 2 too large relative to input height 4"),
], ids=["2d", "3d"])
def test_pool_too_large_raises_like_cpu(make, message):
    assert_like_cpu(make, message)

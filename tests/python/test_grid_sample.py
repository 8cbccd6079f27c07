"""F.grid_sample (grid_sampler_2d / grid_sampler_3d) and its backward run natively on tpu and match
CPU: bilinear, nearest and bicubic interpolation, zeros/border/reflection padding, align_corners,
grids reaching outside the input."""

import pytest
import torch
from torch.nn import functional as F

import torch_tpu
from conftest import assert_like_cpu, assert_same, sample

CASES = [
    # (spatial dims, mode, padding_mode, align_corners)
    (2, "bilinear", "zeros", False),
    (2, "bilinear", "border", True),
    (2, "bilinear", "reflection", False),
    (2, "nearest", "zeros", True),
    (2, "nearest", "reflection", False),
    (2, "bicubic", "zeros", False),
    (2, "bicubic", "reflection", True),
    (3, "bilinear", "zeros", True),
    (3, "bilinear", "reflection", False),
    (3, "nearest", "border", False),
]


def _inputs(spatial):
    shape = (2, 3, 4, 5) if spatial == 2 else (2, 2, 3, 4, 5)
    grid_shape = (2, 3, 6, 2) if spatial == 2 else (2, 2, 3, 4, 3)
    # Coordinates up to 1.4 in magnitude, so some taps fall outside the input and get padded.
    grid = (torch.rand(grid_shape, generator=torch.Generator().manual_seed(1)) - 0.5) * 2.8
    return sample(shape, torch.float32), grid


@pytest.mark.parametrize("spatial,mode,padding_mode,align_corners", CASES,
                         ids=["-".join(map(str, c)) for c in CASES])
def test_grid_sample_forward_and_backward_match_cpu(spatial, mode, padding_mode, align_corners):
    x, grid = _inputs(spatial)
    results = {}
    for device in ["cpu", "tpu"]:
        leaf_x = x.to(device).detach().requires_grad_()
        leaf_grid = grid.to(device).detach().requires_grad_()
        out = F.grid_sample(leaf_x, leaf_grid, mode=mode, padding_mode=padding_mode,
                            align_corners=align_corners)
        out.backward(sample(out.shape, torch.float32, seed=2).to(device))
        results[device] = (out, leaf_x.grad, leaf_grid.grad)
    for got, expected in zip(results["tpu"], results["cpu"]):
        assert_same(got, expected, rtol=1e-5, atol=2e-5)


def test_grid_sample_runs_natively(tpu):
    x, grid = _inputs(2)
    x = x.to(tpu).requires_grad_()
    torch_tpu.reset_metrics()
    F.grid_sample(x, grid.to(tpu), align_corners=False).sum().backward()
    assert torch_tpu.metrics()["fallback_ops"] == {}


@pytest.mark.parametrize("dtype,mode,padding_mode", [
    (torch.bfloat16, "bilinear", "reflection"),
    (torch.bfloat16, "bicubic", "zeros"),
    (torch.float16, "nearest", "border"),
])
def test_grid_sample_half_precision_rounds_like_cpu(dtype, mode, padding_mode):
    # CPU's 2-D kernel computes half-precision inputs in their own type, rounding every step.
    x, grid = _inputs(2)
    assert_like_cpu(lambda d: F.grid_sample(x.to(d, dtype), grid.to(d, dtype), mode=mode,
                                            padding_mode=padding_mode, align_corners=False),
                    rtol=0, atol=0)


@pytest.mark.parametrize("make,message", [
    (lambda d: torch.grid_sampler_2d(torch.ones(2, 1, 3, 3, device=d),
                                     torch.zeros(1, 2, 2, 2, device=d), 0, 0, False),
     "aten::grid_sampler_2d: expected grid and input to have same batch size, but got input with "
     "sizes [2, 1, 3, 3] and grid with sizes [1, 2, 2, 2]"),
    (lambda d: torch.grid_sampler_2d(torch.ones(1, 1, 3, 3, device=d),
                                     torch.zeros(1, 2, 2, 3, device=d), 0, 0, False),
     "aten::grid_sampler_2d: expected grid to have size 2 in last dimension, but got grid with "
     "sizes [1, 2, 2, 3]"),
    (lambda d: torch.grid_sampler_3d(torch.ones(1, 1, 3, 3, 3, device=d),
                                     torch.zeros(1, 2, 2, 2, 3, device=d), 2, 0, False),
     "aten::grid_sampler_3d: bicubic interpolation only supports 4D input"),
], ids=["batch", "grid-last-dim", "bicubic-3d"])
def test_bad_arguments_raise_like_cpu(make, message):
    assert_like_cpu(make, message)

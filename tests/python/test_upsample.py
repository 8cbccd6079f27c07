"""F.interpolate's nearest, nearest-exact, (bi/tri)linear and bicubic modes, anti-aliased or not,
and their backward run natively on tpu and match CPU: sizes and scale factors (up and down),
align_corners, 1-3 spatial dims."""

import pytest
import torch
from torch.nn import functional as F

import torch_tpu
from conftest import assert_like_cpu, assert_same, sample

CASES = [
    # (input shape, interpolate keyword arguments)
    ((2, 3, 5, 6), dict(scale_factor=2, mode="nearest")),
    ((2, 3, 5, 6), dict(size=(7, 9), mode="nearest")),
    ((1, 2, 8, 8), dict(scale_factor=0.5, mode="nearest")),
    ((2, 3, 5, 6), dict(scale_factor=1.7, mode="nearest-exact")),
    ((2, 3, 5, 6), dict(scale_factor=2, mode="bilinear", align_corners=False)),
    ((2, 3, 5, 6), dict(scale_factor=2, mode="bilinear", align_corners=True)),
    ((2, 3, 5, 6), dict(size=(7, 9), mode="bilinear", align_corners=True)),
    ((2, 3, 5, 6), dict(size=(3, 4), mode="bilinear", align_corners=False)),
    ((1, 2, 4, 4), dict(scale_factor=1.5, mode="bilinear", recompute_scale_factor=False)),
    ((1, 2, 4, 4), dict(size=(1, 1), mode="bilinear", align_corners=True)),
    ((2, 3, 7), dict(scale_factor=2.3, mode="linear")),
    ((2, 3, 7), dict(size=4, mode="nearest")),
    ((1, 2, 3, 4, 5), dict(size=(4, 7, 3), mode="trilinear", align_corners=True)),
    ((1, 2, 3, 4, 5), dict(scale_factor=2, mode="nearest")),
    ((2, 3, 5, 6), dict(size=(9, 4), mode="bicubic", align_corners=False)),
    ((2, 3, 5, 6), dict(scale_factor=1.7, mode="bicubic", align_corners=True)),
    ((1, 2, 9, 11), dict(size=(4, 3), mode="bilinear", antialias=True)),
    ((1, 2, 9, 11), dict(scale_factor=0.3, mode="bicubic", antialias=True, align_corners=True)),
    ((1, 2, 4, 5), dict(size=(7, 8), mode="bicubic", antialias=True)),
]


@pytest.mark.parametrize("shape,options", CASES, ids=[f"{s}-{o}" for s, o in CASES])
def test_interpolate_forward_and_backward_match_cpu(shape, options):
    x = sample(shape, torch.float32)
    results = {}
    for device in ["cpu", "tpu"]:
        leaf = x.to(device).detach().requires_grad_()
        out = F.interpolate(leaf, **options)
        cotangent = sample(out.shape, torch.float32, seed=1).to(device)
        out.backward(cotangent)
        results[device] = (out, leaf.grad)
    assert_same(results["tpu"][0], results["cpu"][0], rtol=1e-5, atol=1e-5)
    assert_same(results["tpu"][1], results["cpu"][1], rtol=1e-5, atol=1e-5)


def test_interpolate_runs_natively(tpu):
    x = sample((2, 3, 4, 4), torch.float32).to(tpu).requires_grad_()
    torch_tpu.reset_metrics()
    for options in [dict(scale_factor=2, mode="nearest"), dict(size=(5, 7), mode="bilinear"),
                    dict(size=(5, 7), mode="bicubic"), dict(size=(3, 2), mode="bilinear",
                                                            antialias=True)]:
        F.interpolate(x, **options).sum().backward()
    assert torch_tpu.metrics()["fallback_ops"] == {}


def test_nearest_upsampling_is_exact_for_special_values(tpu):
    # Nearest upsampling only copies: infinities and NaN stay where they were, nowhere else.
    x = torch.tensor([[[[1.0, float("inf")], [float("nan"), -2.0]]]])
    assert_like_cpu(lambda d: F.interpolate(x.to(d), scale_factor=3, mode="nearest"), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_bilinear_other_dtypes(dtype):
    x = sample((1, 2, 5, 5), dtype)
    assert_like_cpu(lambda d: F.interpolate(x.to(d), scale_factor=2, mode="bilinear"),
                    rtol=1e-2 if dtype == torch.bfloat16 else 1e-7, atol=1e-2 if dtype == torch.bfloat16 else 1e-7)


def test_aten_overloads_with_explicit_scales():
    x = sample((1, 2, 3, 5), torch.float32)
    assert_like_cpu(lambda d: torch.ops.aten.upsample_nearest2d(x.to(d), [7, 11], 2.5, 2.2))
    assert_like_cpu(lambda d: torch.ops.aten.upsample_bilinear2d(x.to(d), [7, 11], False, 2.5, 2.2))
    g = sample((1, 2, 7, 11), torch.float32)
    assert_like_cpu(lambda d: torch.ops.aten.upsample_bilinear2d_backward(g.to(d), [7, 11], [1, 2, 3, 5], True))
    assert_like_cpu(lambda d: torch.ops.aten.upsample_nearest2d_backward(g.to(d), [7, 11], [1, 2, 3, 5], 2.5, 2.2))


@pytest.mark.parametrize("make", [
    lambda d: torch.ops.aten.upsample_nearest2d(torch.ones(2, 3, 4, device=d), [4, 4]),
    lambda d: torch.ops.aten.upsample_nearest2d(torch.ones(1, 1, 2, 2, device=d), [4, 4, 4]),
    lambda d: torch.ops.aten.upsample_bilinear2d(torch.ones(1, 1, 2, 2, device=d), [0, 4], False),
    lambda d: torch.ops.aten.upsample_bilinear2d_backward(torch.ones(1, 1, 3, 3, device=d), [4, 4], [1, 1, 2, 2], False),
], ids=["rank", "output-size-length", "zero-output", "grad-shape"])
def test_bad_arguments_raise_like_cpu(make):
    cpu_error = tpu_error = None
    try:
        make("cpu")
    except Exception as error:  # noqa: BLE001
        cpu_error = error
    try:
        make("tpu")
        torch.tpu.synchronize()
    except Exception as error:  # noqa: BLE001
        tpu_error = error
    assert cpu_error is not None and tpu_error is not None
    assert type(tpu_error) is type(cpu_error)


@pytest.mark.parametrize("shape,options", [
    ((1, 3, 27, 23), dict(size=(13, 30), mode="bilinear")),
    ((1, 3, 4, 4), dict(size=(3, 3), mode="bilinear", align_corners=True)),
    ((1, 5, 9, 7), dict(scale_factor=1.7, mode="bicubic")),
    ((1, 3, 20, 10), dict(size=(3, 7), mode="bicubic", antialias=True, align_corners=True)),
    ((1, 6, 20, 10), dict(size=(6, 3), mode="bilinear", antialias=True)),
], ids=["bilinear", "bilinear-corners", "bicubic", "bicubic-aa", "bilinear-aa"])
def test_uint8_resampling_is_cpus_fixed_point_result(shape, options):
    # CPU rounds uint8 resampling through int16 weights, one dim at a time: exact match wanted.
    x = torch.randint(0, 256, shape, generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    assert_like_cpu(lambda d: F.interpolate(x.to(d), **options), rtol=0, atol=0)


@pytest.mark.parametrize("dtype,shape,mode,message", [
    (torch.uint8, (1, 1, 3), "linear",
     "aten::upsample_linear1d: \"compute_indices_weights_linear\" not implemented for 'Byte'"),
    (torch.int64, (1, 1, 3, 3), "bicubic",
     "aten::upsample_bicubic2d: \"compute_indices_weights_cubic\" not implemented for 'Long'"),
], ids=["uint8-linear", "int64-bicubic"])
def test_integer_dtypes_cpu_lacks_raise_like_cpu(dtype, shape, mode, message):
    assert_like_cpu(lambda d: F.interpolate(torch.zeros(shape, dtype=dtype, device=d), size=5,
                                            mode=mode), message)

"""Reflection/replication padding, adaptive max pooling (forward and backward) and max_unpool,
against CPU."""

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from conftest import assert_like_cpu, assert_same, sample

CASES = [
    ((2, 3, 7), (2, 3), "reflect"),
    ((3, 7), (0, 6), "reflect"),
    ((2, 3, 5, 6), (1, 2, 3, 4), "reflect"),
    ((1, 2, 4, 5, 6), (1, 1, 2, 0, 3, 2), "reflect"),
    ((2, 3, 7), (4, 9), "replicate"),
    ((2, 3, 5, 6), (1, 2, 3, 4), "replicate"),
    ((2, 3, 5, 6), (-1, 2, 3, -2), "replicate"),
    ((1, 2, 4, 5, 6), (1, 1, 2, 0, 3, 2), "replicate"),
]


@pytest.mark.parametrize("shape,pad,mode", CASES)
def test_pad_forward_and_backward_match_cpu(shape, pad, mode):
    x = sample(shape, torch.float32)
    results = {}
    torch_tpu.reset_metrics()
    for device in ("cpu", "tpu"):
        leaf = x.to(device).detach().requires_grad_()
        out = F.pad(leaf, pad, mode=mode)
        out.backward(sample(out.shape, torch.float32, seed=1).to(device))
        results[device] = (out, leaf.grad)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    assert_same(results["tpu"][0], results["cpu"][0], rtol=0, atol=0)
    assert_same(results["tpu"][1], results["cpu"][1], rtol=1e-6, atol=1e-6)


def test_pad_errors_match_cpu():
    x = sample((2, 3, 4), torch.float32)
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        F.pad(x.to("tpu"), (4, 0), mode="reflect")


@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_max_unpool_matches_cpu(spatial):
    pool = [F.max_pool1d, F.max_pool2d, F.max_pool3d][spatial - 1]
    unpool = [F.max_unpool1d, F.max_unpool2d, F.max_unpool3d][spatial - 1]
    x = sample((2, 3) + (6,) * spatial, torch.float32)
    values, indices = pool(x, 2, return_indices=True)
    torch_tpu.reset_metrics()
    assert_like_cpu(lambda d: unpool(values.to(d), indices.to(d), 2), rtol=0, atol=0)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    assert_like_cpu(lambda d: unpool(values.to(d), indices.to(d), 2,
                                     output_size=(7,) * spatial), rtol=0, atol=0)


@pytest.mark.parametrize("spatial,shape,output_size", [
    (1, (2, 3, 7), 3), (2, (2, 3, 7, 5), (3, 2)), (2, (3, 6, 9), (4, 9)),
    (3, (1, 2, 5, 4, 6), (2, 3, 4))])
def test_adaptive_max_pool_matches_cpu(spatial, shape, output_size):
    function = [F.adaptive_max_pool1d, F.adaptive_max_pool2d, F.adaptive_max_pool3d][spatial - 1]
    x = sample(shape, torch.float32)
    results = {}
    torch_tpu.reset_metrics()
    for device in ("cpu", "tpu"):
        leaf = x.to(device).detach().requires_grad_()
        out, indices = function(leaf, output_size, return_indices=True)
        out.backward(sample(out.shape, torch.float32, seed=1).to(device))
        results[device] = (out, indices, leaf.grad)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    for got, expected in zip(results["tpu"], results["cpu"]):
        assert_same(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape,output_size", [((2, 3, 7, 5), (3, 2)), ((3, 6, 9), (4, 9)),
                                               ((1, 2, 5, 4, 6), (2, 3, 4)),
                                               ((2, 5, 4, 3), (5, 4, 3))])
def test_adaptive_avg_pool_backward_matches_cpu(shape, output_size):
    function = F.adaptive_avg_pool2d if len(output_size) == 2 else F.adaptive_avg_pool3d
    x = sample(shape, torch.float32)
    results = {}
    torch_tpu.reset_metrics()
    for device in ("cpu", "tpu"):
        leaf = x.to(device).detach().requires_grad_()
        out = function(leaf, output_size)
        out.backward(sample(out.shape, torch.float32, seed=1).to(device))
        results[device] = (out, leaf.grad)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    for got, expected in zip(results["tpu"], results["cpu"]):
        assert_same(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("function,shape,kwargs", [
    (F.avg_pool1d, (2, 3, 7), dict(kernel_size=3, stride=2, padding=1)),
    (F.avg_pool2d, (2, 3, 7, 6), dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1),
                                      ceil_mode=True)),
    (F.avg_pool2d, (1, 2, 7, 5), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                      count_include_pad=False)),
    (F.avg_pool2d, (3, 6, 5), dict(kernel_size=2, divisor_override=3)),
    (F.avg_pool3d, (1, 2, 5, 4, 6), dict(kernel_size=(2, 3, 2), stride=(1, 2, 2),
                                         padding=(1, 1, 0))),
    (F.avg_pool3d, (2, 5, 6, 7), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                      count_include_pad=False)),
])
def test_avg_pool_forward_and_backward_match_cpu(function, shape, kwargs):
    x = sample(shape, torch.float32)
    results = {}
    torch_tpu.reset_metrics()
    for device in ("cpu", "tpu"):
        leaf = x.to(device).detach().requires_grad_()
        out = function(leaf, **kwargs)
        out.backward(sample(out.shape, torch.float32, seed=1).to(device))
        results[device] = (out, leaf.grad)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    for got, expected in zip(results["tpu"], results["cpu"]):
        assert_same(got, expected, rtol=1e-5, atol=1e-6)

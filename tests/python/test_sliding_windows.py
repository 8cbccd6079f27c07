"""Sliding windows lowered natively, against PyTorch's CPU results: Tensor.unfold's backward
(overlapping, adjacent and gapped windows, any dim) and nn.functional.unfold / fold (im2col /
col2im) with padding, dilation and stride, batched and not, forward and backward."""

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from conftest import assert_like_cpu, assert_same, sample


@pytest.mark.parametrize("shape,dim,size,step", [
    ((2, 7, 3), 1, 3, 1),   # overlapping windows
    ((2, 7, 3), 1, 2, 2),   # adjacent, last element unused
    ((9,), 0, 2, 4),        # gaps between windows
    ((4, 5), -1, 5, 1),     # one window covering the dim
    ((), 0, 1, 1),          # 0-d input
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_unfold_backward_matches_cpu(shape, dim, size, step, dtype):
    x = sample(shape, torch.float32).to(dtype)
    grads = {}
    for device in ("cpu", "tpu"):
        leaf = x.to(device).requires_grad_()
        windows = leaf.unfold(dim, size, step)
        cotangent = sample(windows.shape, torch.float32, seed=1).to(dtype).to(device)
        torch_tpu.reset_metrics()
        (grads[device],) = torch.autograd.grad(windows, leaf, cotangent)
        if device == "tpu":
            assert torch_tpu.metrics()["fallback_ops"] == {}
    assert_same(grads["tpu"], grads["cpu"], rtol=0, atol=0)


@pytest.mark.parametrize("shape,kwargs", [
    ((2, 3, 5, 6), dict(kernel_size=(2, 3))),
    ((1, 2, 7, 6), dict(kernel_size=3, dilation=(2, 1), padding=1, stride=(2, 3))),
    ((3, 4, 5), dict(kernel_size=2, padding=(0, 2), stride=2)),
])
def test_unfold_and_fold_match_cpu(shape, kwargs):
    x = sample(shape, torch.float32)
    results = {}
    torch_tpu.reset_metrics()
    for device in ("cpu", "tpu"):
        leaf = x.to(device).detach().requires_grad_()
        columns = F.unfold(leaf, **kwargs)
        folded = F.fold(columns * 2, shape[-2:], **kwargs)
        folded.backward(sample(folded.shape, torch.float32, seed=1).to(device))
        results[device] = (columns, folded, leaf.grad)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    for got, expected in zip(results["tpu"], results["cpu"]):
        assert_same(got, expected, rtol=1e-5, atol=1e-5)
    assert_like_cpu(lambda d: F.unfold(x.bfloat16().to(d), **kwargs), rtol=0, atol=0)


def test_unfold_errors_match_cpu():
    x = torch.ones(2, 3, 5, 6)
    assert_like_cpu(lambda d: F.unfold(x.to(d), 7),
                    message="aten::im2col: Given input with spatial size (5, 6), "
                            "kernel_size=(7, 7), dilation=(1, 1), padding=(0, 0), calculated "
                            "shape of the array of sliding blocks as (-1, 0), but its components "
                            "must be at least one.")

"""Tensor.unfold's backward (unfold_backward) lowered natively: overlapping, adjacent and
gapped windows, any dim, against PyTorch's CPU gradients."""

import pytest
import torch

import torch_tpu
from conftest import assert_same, sample


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

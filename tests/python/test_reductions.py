"""Reductions compared with PyTorch's CPU result."""

import pytest
import torch

from conftest import assert_same, sample


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool, torch.bfloat16], ids=str)
def test_sum_and_mean(dtype):
    x = sample((3, 4, 5), dtype)
    t = x.to("tpu")
    tolerance = {"atol": 0.1, "rtol": 1e-2} if dtype == torch.bfloat16 else {}
    assert_same(t.sum(), x.sum(), **tolerance)
    assert_same(t.sum(dim=1), x.sum(dim=1), **tolerance)
    assert_same(t.sum(dim=(0, 2), keepdim=True), x.sum(dim=(0, 2), keepdim=True), **tolerance)
    assert_same(t.sum(dim=-1, dtype=torch.float64), x.sum(dim=-1, dtype=torch.float64))
    if dtype.is_floating_point:
        assert_same(t.mean(), x.mean(), **tolerance)
        assert_same(t.mean(dim=[0, 1]), x.mean(dim=[0, 1]), **tolerance)
    else:
        with pytest.raises(RuntimeError, match="mean\\(\\): could not infer output dtype"):
            t.mean()

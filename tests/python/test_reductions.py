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


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64,
                                   torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool],
                         ids=str)
def test_hash_tensor_is_cpus_xor_sum_bit_exactly(dtype):
    import torch_tpu

    x = sample((3, 4, 5), dtype)
    if dtype.is_floating_point:
        x[0, 0, :3] = torch.tensor([-0.0, float("inf"), -float("inf")], dtype=dtype)
    t = x.to("tpu")
    torch_tpu.reset_metrics()
    for kwargs in ({}, {"dim": 1}, {"dim": [0, -1], "keepdim": True}):
        got, want = torch.hash_tensor(t, **kwargs), torch.hash_tensor(x, **kwargs)
        assert got.dtype == want.dtype == torch.uint64 and got.shape == want.shape
        assert torch.equal(got.cpu(), want)
    assert torch_tpu.metrics()["fallback_ops"] == {}


def test_hash_tensor_edge_cases_like_cpu():
    from conftest import assert_like_cpu

    empty = torch.zeros(2, 0)
    for make in (lambda d: torch.hash_tensor(empty.to(d)),
                 lambda d: torch.hash_tensor(empty.to(d), dim=1),
                 lambda d: torch.hash_tensor(empty.to(d), dim=0),
                 lambda d: torch.hash_tensor(torch.tensor(2.5, device=d)),
                 lambda d: torch.hash_tensor(torch.ones(2, device=d), mode=1)):
        assert_like_cpu(make)
    assert_like_cpu(lambda d: torch.hash_tensor(torch.ones(2, dtype=torch.complex64, device=d)),
                    message="aten::hash_tensor: \"xor_sum_cpu\" not implemented for 'ComplexFloat'")

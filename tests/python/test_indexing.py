"""Indexing ops compared with PyTorch's CPU result."""

import torch

import torch_tpu
from conftest import assert_same, sample


def test_indexing_ops_match_cpu():
    x = sample((5, 4), torch.float32)
    t = x.to("tpu")
    index = torch.tensor([4, 0, 2])
    i = index.to("tpu")
    assert_same(t[i], x[index])
    assert_same(t[:, i[1:]], x[:, index[1:]])
    assert_same(t[t > 0], x[x > 0])
    assert_same(t.index_select(1, i[1:]), x.index_select(1, index[1:]))
    assert_same((t > 0).nonzero(), (x > 0).nonzero())
    y, z = t.clone(), x.clone()
    y[i] = 0.5
    z[index] = 0.5
    assert_same(y, z)
    y.index_add_(0, i, torch.ones(3, 4, device="tpu"), alpha=3)
    z.index_add_(0, index, torch.ones(3, 4), alpha=3)
    assert_same(y, z)
    assert_same(t.gather(1, torch.tensor([[0, 3]] * 5).to("tpu")), x.gather(1, torch.tensor([[0, 3]] * 5)))
    assert torch_tpu.metrics()["fallback_ops"].get("aten::index.Tensor") is None

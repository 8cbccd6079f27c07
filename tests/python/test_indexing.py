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


def test_nonzero_results_are_column_major_like_cpu():
    inputs = [torch.tensor([[1, 0], [1, 1]]), torch.tensor(5), torch.zeros(3, 0),
              torch.tensor([0, 0]), sample((2, 3, 4), torch.float32) > 0]
    for x in inputs:
        expected, got = x.nonzero(), x.to("tpu").nonzero()
        assert got.stride() == expected.stride()
        assert_same(got, expected)
        # out=: resized outs are restrided like CPU's; an out of the right shape keeps its own.
        for make in (lambda: torch.empty(0, dtype=torch.long),
                     lambda: torch.empty(expected.shape, dtype=torch.long)):
            cpu_out, tpu_out = make(), make().to("tpu")
            torch.nonzero(x, out=cpu_out)
            torch.nonzero(x.to("tpu"), out=tpu_out)
            assert tpu_out.stride() == cpu_out.stride()
            assert_same(tpu_out, cpu_out)

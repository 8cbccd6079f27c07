"""Host reads (item), clones and contiguous copies."""

import torch

from conftest import assert_same, sample


def test_item_clone_contiguous():
    x = sample((4, 3), torch.float32)
    t = x.to("tpu")
    assert t[2, 1].item() == x[2, 1].item()
    assert torch.tensor(5, device="tpu").item() == 5
    assert torch.tensor(True, device="tpu").item() is True
    assert_same(t.t().contiguous(), x.t().contiguous())
    assert t.t().contiguous().is_contiguous()
    clone = t.clone()
    clone.add_(1)
    assert_same(t, x)

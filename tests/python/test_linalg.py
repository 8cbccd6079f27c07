"""Matrix products compared with PyTorch's CPU result."""

import pytest
import torch

from conftest import assert_same, sample


def test_matrix_products_match_cpu():
    a, b = sample((3, 5), torch.float32), sample((5, 2), torch.float32, seed=1)
    assert_same(a.to("tpu") @ b.to("tpu"), a @ b)
    bias = sample((2,), torch.float32, seed=2)
    assert_same(torch.addmm(bias.to("tpu"), a.to("tpu"), b.to("tpu"), beta=0.5, alpha=2),
                torch.addmm(bias, a, b, beta=0.5, alpha=2))
    poisoned = torch.full((2,), float("nan"))
    assert_same(torch.addmm(poisoned.to("tpu"), a.to("tpu"), b.to("tpu"), beta=0),
                torch.addmm(poisoned, a, b, beta=0))
    batch_a, batch_b = sample((2, 3, 4), torch.float32), sample((2, 4, 5), torch.float32, seed=1)
    assert_same(torch.bmm(batch_a.to("tpu"), batch_b.to("tpu")), torch.bmm(batch_a, batch_b))
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        a.to("tpu") @ a.to("tpu")

"""nn.Embedding(max_norm=) renormalizes the looked-up rows of its weight in place before each
lookup (aten::embedding_renorm_): natively on tpu, with CPU's results, in every eager mode."""

import pytest
import torch
from torch import nn

import torch_tpu


@pytest.fixture(params=["strict", "defer_and_fuse"])
def eager_mode(request):
    with torch_tpu.eager_mode(request.param):
        yield request.param


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
def test_renorm_scales_the_named_rows_as_cpu(eager_mode, dtype, norm_type):
    torch.manual_seed(0)
    weight = torch.randn(10, 4, dtype=dtype) * 3
    # Repeated and negative indices: each named row is scaled once, from its old value.
    indices = torch.tensor([[1, 3, 3], [-1, 0, 9]])
    expected = weight.clone()
    torch.embedding_renorm_(expected, indices, 2.5, norm_type)
    on_tpu = weight.to("tpu")
    returned = torch.embedding_renorm_(on_tpu, indices.to("tpu"), 2.5, norm_type)
    assert returned is on_tpu
    torch.testing.assert_close(on_tpu.cpu(), expected)
    assert torch_tpu.metrics()["fallback_ops"].get("aten::embedding_renorm_") is None


def test_embedding_with_max_norm_trains_as_on_cpu(eager_mode):
    torch.manual_seed(0)
    cpu = nn.Embedding(12, 6, max_norm=1.0, norm_type=2.0)
    tpu = nn.Embedding(12, 6, max_norm=1.0, norm_type=2.0)
    tpu.load_state_dict(cpu.state_dict())
    tpu.to("tpu")
    cpu_optimizer = torch.optim.SGD(cpu.parameters(), lr=0.5)
    tpu_optimizer = torch.optim.SGD(tpu.parameters(), lr=0.5)
    for step in range(3):
        ids = torch.randint(0, 12, (4, 5), generator=torch.Generator().manual_seed(step))
        for model, optimizer, device in [(cpu, cpu_optimizer, "cpu"), (tpu, tpu_optimizer, "tpu")]:
            optimizer.zero_grad()
            (model(ids.to(device)) ** 2).sum().backward()
            optimizer.step()
        torch.testing.assert_close(tpu.weight.detach().cpu(), cpu.weight.detach())
    assert torch_tpu.metrics()["fallback_ops"].get("aten::embedding_renorm_") is None


def test_bad_arguments_raise_cpus_errors():
    with pytest.raises(RuntimeError) as error:
        torch.embedding_renorm_(torch.ones(3, device="tpu"), torch.tensor([0], device="tpu"), 1.0,
                                2.0)
    assert str(error.value).splitlines()[0] == (
        "aten::embedding_renorm: Expected 2-dimensional tensor, but got 1-dimensional tensor for"
        " argument #1 'self' (while checking arguments for embedding_renorm_)")
    weight = torch.ones(3, 2, device="tpu")
    with pytest.raises(RuntimeError) as error:
        torch.embedding_renorm_(weight, torch.tensor([0.0], device="tpu"), 1.0, 2.0)
    assert str(error.value).splitlines()[0] == (
        "aten::embedding_renorm: Expected tensor for argument #2 'indices' to have one of the"
        " following scalar types: Long, Int; but got Float instead (while checking arguments for"
        " embedding_renorm_)")
    assert torch.equal(weight.cpu(), torch.ones(3, 2))


def test_an_index_out_of_range_raises_index_error_as_on_cpu():
    cpu = torch.full((3, 2), 5.0)
    with pytest.raises(IndexError):
        torch.embedding_renorm_(cpu, torch.tensor([1, 3]), 1.0, 2.0)
    weight = torch.full((3, 2), 5.0, device="tpu")
    with torch_tpu.eager_mode("debug"), pytest.raises(IndexError) as error:
        torch.embedding_renorm_(weight, torch.tensor([1, 3], device="tpu"), 1.0, 2.0)
    assert "index out of range" in str(error.value)
    # CPU renorms the rows it reaches before the bad index, in sorted order; an index past the
    # end sorts last, so CPU renorms every valid row first, as the tpu kernel does.
    torch.testing.assert_close(weight.cpu(), cpu)

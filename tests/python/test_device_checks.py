"""Strict mode: index-taking programs flag out-of-range indices (and integer division by zero) on
the device; the flag is read where the host synchronizes anyway and raised once, naming the op."""

import pytest
import torch
import torch.nn.functional as F

from conftest import run_python


def long(*values):
    return torch.tensor(values, device="tpu")


OUT_OF_RANGE = {
    "index": ("aten::index.Tensor", lambda x: x[long(0, 10)]),
    "index_select": ("aten::index_select", lambda x: x.index_select(0, long(0, 5))),
    "gather": ("aten::gather", lambda x: x.gather(1, long(0, 4).view(1, 2).expand(5, 2))),
    "embedding": ("aten::embedding", lambda x: F.embedding(long(2, 6), x)),
    "index_put_": ("aten::index_put", lambda x: x.index_put_((long(7),), torch.zeros(4, device="tpu"))),
    "scatter_": ("aten::scatter", lambda x: x.scatter_(0, long(9, 0, 0, 0).view(1, 4),
                                                        torch.ones(1, 4, device="tpu"))),
    "cross_entropy": ("aten::nll_loss", lambda x: F.cross_entropy(x[:, :3], long(0, 1, 5, 0, 1))),
}


@pytest.mark.parametrize("name", sorted(OUT_OF_RANGE))
def test_out_of_range_index_raises_at_the_next_sync_naming_the_op(name):
    op, case = OUT_OF_RANGE[name]
    x = torch.randn(5, 4, device="tpu")
    result = case(x)  # queued: no error yet
    with pytest.raises(IndexError) as error:
        (result if isinstance(result, torch.Tensor) else x).cpu()
    assert str(error.value).startswith(op), str(error.value)
    assert "index out of range" in str(error.value)
    torch.tpu.synchronize()  # raised once
    assert torch.equal((torch.ones(3, device="tpu") * 2).cpu(), torch.full((3,), 2.0))


def test_valid_indices_raise_nothing():
    x = torch.randn(5, 4)
    t = x.to("tpu")
    assert torch.equal(t[long(0, -1, 4)].cpu(), x[[0, -1, 4]])
    assert torch.equal(t.index_select(0, long(4, 0)).cpu(), x.index_select(0, torch.tensor([4, 0])))
    torch.tpu.synchronize()


@pytest.mark.parametrize("expression", ["a // b", "a % b", "torch.div(a, b, rounding_mode='trunc')"])
def test_integer_division_by_zero_raises_at_the_next_sync_like_cpu(expression):
    a, b = torch.tensor([7, 8, 9]), torch.tensor([1, 0, 3])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        eval(expression, {"torch": torch, "a": a, "b": b})
    result = eval(expression, {"torch": torch, "a": a.to("tpu"), "b": b.to("tpu")})
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        result.cpu()
    torch.tpu.synchronize()


def test_item_is_a_sync_point_too():
    x = torch.randn(5, 4, device="tpu")
    bad = x[long(9)].sum()
    with pytest.raises(IndexError, match="aten::index.Tensor"):
        bad.item()


def test_the_check_word_is_read_once_per_program_that_replaces_it():
    import torch_tpu
    x = torch.arange(16.0, device="tpu")
    y = x[long(1, 3)]  # index: a program with a device-side check
    first, last = y.sum(), y.max()
    torch.tpu.synchronize()  # reads the check word of the program that made y
    torch_tpu.reset_metrics()
    assert first.item() == 4.0 and last.item() == 3.0
    # Two 4-byte values and no word: no program replaced the word read at the synchronization.
    assert torch_tpu.metrics()["transfer_to_host_bytes"] == 8
    z = x[long(2)]
    assert z.item() == 2.0 and (z + 1).item() == 3.0
    # A new program with a check: its word is read once, with the first value.
    assert torch_tpu.metrics()["transfer_to_host_bytes"] == 8 + 4 + 4 + 4


def test_checks_can_be_turned_off_for_raw_xla_semantics():
    result = run_python(
        "import torch\n"
        "x = torch.arange(5.0, device='tpu')\n"
        "y = x[torch.tensor([0, 10], device='tpu')]\n"
        "print(y.cpu().tolist())\n",
        TORCH_TPU_DEVICE_CHECKS="0")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[0.0, 4.0]"  # XLA clamps the index

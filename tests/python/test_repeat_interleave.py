"""repeat_interleave with a tensor of repeats runs on the device (its output length is the sum of
the repeats: one host read, none when the caller passes output_size), against PyTorch CPU."""

import pytest
import torch
import torch_tpu
from conftest import assert_like_cpu, assert_raises_exactly


@pytest.fixture(autouse=True)
def no_fallback():
    torch_tpu.reset_metrics()
    yield
    assert torch_tpu.metrics()["fallback_ops"] == {}


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("repeats", [[2, 0, 3, 1], [0, 0, 1], [5], [0], [1] * 9, []])
def test_indices_like_cpu(repeats, dtype):
    r = torch.tensor(repeats, dtype=dtype)
    assert_like_cpu(lambda d: torch.repeat_interleave(r.to(d)))
    assert_like_cpu(lambda d: torch.repeat_interleave(r.to(d), output_size=int(r.sum())))


def test_rows_and_flattened_values():
    x = torch.randn(4, 3)
    r = torch.tensor([1, 0, 2, 3])
    assert_like_cpu(lambda d: x.to(d).repeat_interleave(r.to(d), dim=0))
    assert_like_cpu(lambda d: x.to(d).repeat_interleave(torch.tensor([2, 1, 0], device=d), dim=1))
    assert_like_cpu(lambda d: x.to(d).repeat_interleave(torch.arange(12, device=d) % 3))


def test_errors():
    assert_like_cpu(lambda d: torch.repeat_interleave(torch.tensor([1, -1, 2], device=d)))
    assert_like_cpu(lambda d: torch.repeat_interleave(torch.tensor([[1]], device=d)))
    assert_raises_exactly(
        NotImplementedError,
        "aten::repeat_interleave.Tensor: \"repeat_interleave_cpu\" not implemented for 'Float'",
        lambda: torch.repeat_interleave(torch.tensor([1.0], device="tpu")))


@pytest.mark.parametrize("repeats, size, text", [
    ([1, -1, 2], 2, "repeats can not be negative"),
    ([1, 2], 5, "allocated size does not match required size"),
])
def test_output_size_is_checked_on_the_device(repeats, size, text):
    # CPU reads the repeats anyway; tpu trusts output_size for the shape and checks on the device.
    with pytest.raises(RuntimeError, match=text):
        torch.repeat_interleave(torch.tensor(repeats), output_size=size)
    with pytest.raises(RuntimeError, match=f"aten::repeat_interleave.Tensor.*{text}"):
        torch.repeat_interleave(torch.tensor(repeats, device="tpu"), output_size=size)
        torch.tpu.synchronize()

"""segment_reduce and its backward lowered natively, against PyTorch's CPU results: every
reduction with lengths, offsets and `initial`, empty segments, zeros and NaN (max/min ties, prod's
gradient through a zero), a leading batch dim, and CPU's errors (the value checks of unsafe=False
raise at the next synchronization)."""

import pytest
import torch

import torch_tpu
from conftest import assert_like_cpu, assert_same, sample

DATA = sample((6, 3), torch.float64)
DATA[1, 0] = 0.0
DATA[4, 2] = float("nan")
DATA[5, 1] = DATA[3, 1]  # a tie in a max/min segment
LENGTHS = torch.tensor([2, 0, 4])
OFFSETS = torch.tensor([0, 2, 2, 6])


def on(device, kwargs):
    return {k: v.to(device) if torch.is_tensor(v) else v for k, v in kwargs.items()}


@pytest.mark.parametrize("reduce", ["sum", "mean", "prod", "max", "min"])
def test_segment_reduce_and_backward_match_cpu(reduce):
    torch_tpu.reset_metrics()
    for kwargs in [dict(lengths=LENGTHS), dict(offsets=OFFSETS, initial=2.0)]:
        expected = torch.segment_reduce(DATA, reduce, **kwargs)
        assert_same(torch.segment_reduce(DATA.to("tpu"), reduce, **on("tpu", kwargs)), expected,
                    equal_nan=True)
        grad = torch.linspace(-1, 1, expected.numel(), dtype=expected.dtype).view_as(expected)
        cpu_grad = torch.ops.aten._segment_reduce_backward(grad, expected, DATA, reduce, **kwargs)
        tpu_grad = torch.ops.aten._segment_reduce_backward(
            grad.to("tpu"), expected.to("tpu"), DATA.to("tpu"), reduce, **on("tpu", kwargs))
        assert_same(tpu_grad, cpu_grad, equal_nan=True)
    assert torch_tpu.metrics()["fallback_ops"] == {}


def test_segment_reduce_along_a_batched_axis_matches_cpu():
    lengths = torch.tensor([[1, 3], [2, 2], [0, 4]])
    data = sample((3, 4), torch.float32)
    assert_like_cpu(lambda d: torch.segment_reduce(data.to(d), "mean", lengths=lengths.to(d),
                                                   axis=1), equal_nan=True)


def test_segment_reduce_errors_match_cpu():
    data, lengths = torch.ones(4, 2), torch.tensor([1, 3])
    assert_like_cpu(lambda d: torch.segment_reduce(data.to(d), "foo", lengths=lengths.to(d)),
                    message="aten::segment_reduce: reduce argument must be either sum, prod, "
                            "mean, amax or amin, got foo")
    assert_like_cpu(lambda d: torch.segment_reduce(data.long().to(d), "sum",
                                                   lengths=lengths.to(d)),
                    message="aten::segment_reduce: \"_segment_reduce_cpu\" not implemented for "
                            "'Long'")
    for lengths, text in [(torch.tensor([3, 0]), "segment_reduce(): Expected all rows of lengths "
                           "along axis to sum to data.size(lengths.dim()-1) when !unsafe."),
                          (torch.tensor([5, -1]), "lengths contains negative value!")]:
        with pytest.raises(RuntimeError, match=text.replace("(", r"\(").replace(")", r"\)")):
            torch.segment_reduce(data.to("tpu"), "sum", lengths=lengths.to("tpu")).cpu()

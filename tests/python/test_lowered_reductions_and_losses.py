"""Median, searchsorted/bucketize, trace, count_nonzero, renorm, channel_shuffle
and the huber/smooth L1 losses, lowered natively, against CPU."""

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from conftest import assert_like_cpu, assert_same, sample


def test_median_family_matches_cpu():
    x = sample((4, 7), torch.float32)
    with_nan = x.clone()
    with_nan[1, 3] = float("nan")
    with_nan[2, 1:] = float("nan")  # (CPU's index for an all-NaN slice is unspecified)
    torch_tpu.reset_metrics()
    for t in (x, with_nan):
        assert_like_cpu(lambda d: torch.median(t.to(d)), equal_nan=True)
        assert_like_cpu(lambda d: torch.nanmedian(t.to(d)), equal_nan=True)
        for dim in (0, 1):
            for function in (torch.median, torch.nanmedian):
                for keepdim in (False, True):
                    cpu = function(t, dim, keepdim)
                    tpu = function(t.to("tpu"), dim, keepdim)
                    assert_same(tpu.values, cpu.values, equal_nan=True)
                    assert_same(tpu.indices, cpu.indices)
    assert torch_tpu.metrics()["fallback_ops"] == {}


def test_searchsorted_and_bucketize_match_cpu():
    boundaries = torch.tensor([-1.0, 0.0, 0.0, 2.5, 4.0])
    values = torch.tensor([[-2.0, 0.0, 1.0], [2.5, 9.0, float("nan")]])
    for right in (False, True):
        assert_like_cpu(lambda d: torch.bucketize(values.to(d), boundaries.to(d), right=right))
        assert_like_cpu(lambda d: torch.searchsorted(boundaries.to(d), values.to(d), right=right,
                                                     out_int32=True))
    sequences = torch.sort(sample((2, 6), torch.float32)).values
    assert_like_cpu(lambda d: torch.searchsorted(sequences.to(d), values.to(d), side="right"))
    unsorted = sample((2, 6), torch.float32, seed=4)
    sorter = torch.argsort(unsorted)
    assert_like_cpu(lambda d: torch.searchsorted(unsorted.to(d), values.to(d),
                                                 sorter=sorter.to(d)))


def test_cumulative_and_small_reductions_match_cpu():
    m = sample((4, 5), torch.float32)
    assert_like_cpu(lambda d: torch.trace(m.to(d)))
    assert_like_cpu(lambda d: torch.trace(sample((3, 3), torch.int32).to(d)))
    assert_like_cpu(lambda d: torch.count_nonzero(torch.relu(m).to(d), dim=(0,)))
    for p in (1.0, 2.0, float("inf")):
        assert_like_cpu(lambda d: torch.renorm(m.to(d), p, 0, 2.0), rtol=1e-5, atol=1e-6)
    y = sample((2, 6, 3, 3), torch.float32)
    assert_like_cpu(lambda d: F.channel_shuffle(y.to(d), 3), rtol=0, atol=0)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("loss,parameter", [(F.huber_loss, "delta"),
                                            (F.smooth_l1_loss, "beta")])
def test_huber_like_losses_match_cpu(reduction, loss, parameter):
    x, y = sample((3, 5), torch.float32), sample((3, 5), torch.float32, seed=1)
    y[0, 0] = x[0, 0]  # the d == 0 point of the backward
    for value in (0.5, 1.0, 2.0) + ((0.0,) if parameter == "beta" else ()):
        results = {}
        for device in ("cpu", "tpu"):
            leaf = x.to(device).detach().requires_grad_()
            out = loss(leaf, y.to(device), reduction=reduction, **{parameter: value})
            out.backward(torch.ones_like(out))
            results[device] = (out, leaf.grad)
        assert_same(results["tpu"][0], results["cpu"][0], rtol=1e-6, atol=1e-6)
        assert_same(results["tpu"][1], results["cpu"][1], rtol=1e-6, atol=1e-6)


def test_nonzero_static_matches_cpu():
    x = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]])
    torch_tpu.reset_metrics()
    for size in (0, 2, 3, 5):
        assert_like_cpu(lambda d: torch.nonzero_static(x.to(d), size=size))
        assert_like_cpu(lambda d: torch.nonzero_static(x.to(d), size=size, fill_value=7))
    assert_like_cpu(lambda d: torch.nonzero_static(torch.zeros(4, device=d), size=2))
    assert_like_cpu(lambda d: torch.nonzero_static(torch.tensor(3.0, device=d), size=2))
    assert torch_tpu.metrics()["fallback_ops"] == {}


def test_masked_scatter_matches_cpu():
    x = sample((3, 4), torch.float32)
    mask = sample((3, 4), torch.bool, seed=1)
    source = sample((12,), torch.float32, seed=2)
    torch_tpu.reset_metrics()
    assert_like_cpu(lambda d: x.to(d).masked_scatter(mask.to(d), source.to(d)), rtol=0, atol=0)
    assert_like_cpu(lambda d: x.to(d).masked_scatter(mask[0].to(d), source.to(d)), rtol=0, atol=0)
    assert_like_cpu(lambda d: x.to(d).clone().masked_scatter_(mask.to(d), source.to(d)),
                    rtol=0, atol=0)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    with pytest.raises(RuntimeError, match="Number of elements of source"):
        x.to("tpu").masked_scatter(torch.ones(3, 4, dtype=torch.bool, device="tpu"),
                                   source[:3].to("tpu")).cpu()


@pytest.mark.strict_mode
def test_safe_softmax_is_one_program_and_zeroes_fully_masked_rows():
    x = sample((2, 3, 5), torch.float32)
    x[0, 1] = float("-inf")  # a fully masked row along the last dim
    x[1, :, 4] = float("-inf")  # a fully masked column along dim 1
    x[1, 2, :2] = float("-inf")
    safe_softmax = torch.ops.aten._safe_softmax
    for dim, dtype in [(-1, None), (1, None), (-1, torch.float64)]:
        assert_like_cpu(lambda d: safe_softmax(x.to(d), dim, dtype))
    assert_like_cpu(lambda d: safe_softmax(x.to(d).half(), -1))
    assert_like_cpu(lambda d: safe_softmax(torch.tensor(float("-inf"), device=d), 0))
    assert_like_cpu(lambda d: safe_softmax(torch.tensor([[1, 2]], device=d), 1),
                    "aten::_safe_softmax: \"softmax_lastdim_kernel_impl\" not implemented for 'Long'")
    # SDPA's math path (HF attention) with a query that may attend to nothing.
    q, k, v = (sample((1, 2, 3, 4), torch.float32, seed=s) for s in (1, 2, 3))
    mask = torch.tensor([[True, False, True], [False, False, False], [True, True, True]])
    assert_like_cpu(lambda d: F.scaled_dot_product_attention(q.to(d), k.to(d), v.to(d),
                                                             attn_mask=mask.to(d)))
    other = sample((4, 6), torch.float32).to("tpu")
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    safe_softmax(other, -1)
    torch.tpu.synchronize()
    assert torch_tpu.metrics()["compile_count"] == 1

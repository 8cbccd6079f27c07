"""torch.histogram and torch.histogramdd lowered natively, against PyTorch's CPU results: bins by
count (the data's range, an explicit range, a constant input, no data) and by edges, weights,
density, several dims, out=, and CPU's errors."""

import pytest
import torch

import torch_tpu
from conftest import assert_like_cpu, assert_same, sample

X = torch.cat([sample((20,), torch.float32), torch.tensor([0.0, 1.0, -1.0, 2.5, float("nan")])])
WEIGHT = sample((25,), torch.float32, seed=1).abs()
EDGES = torch.tensor([-3.0, -1.0, 0.0, 1.0, 2.5, 6.0])


def flattened(results):
    for result in results:
        yield from (flattened(result) if isinstance(result, (tuple, list)) else [result])


def assert_results_like_cpu(make):
    tpu, cpu = list(flattened(make("tpu"))), list(flattened(make("cpu")))
    assert len(tpu) == len(cpu)
    for tpu_result, cpu_result in zip(tpu, cpu):
        assert_same(tpu_result, cpu_result)


@pytest.mark.parametrize("kwargs", [dict(), dict(weight=WEIGHT, density=True)])
def test_histogram_matches_cpu(kwargs):
    torch_tpu.reset_metrics()

    def on(d):
        return {k: v.to(d) if torch.is_tensor(v) else v for k, v in kwargs.items()}

    finite = X[:-1]  # the data's own range needs finite data; explicit ranges and edges skip NaN
    finite_kwargs = {k: v[:-1] if torch.is_tensor(v) else v for k, v in kwargs.items()}
    assert_results_like_cpu(lambda d: torch.histogram(
        finite.to(d), 7, **{k: v.to(d) if torch.is_tensor(v) else v
                            for k, v in finite_kwargs.items()}))
    assert_results_like_cpu(lambda d: torch.histogram(X.to(d), 4, range=(-1.0, 2.5), **on(d)))
    assert_results_like_cpu(lambda d: torch.histogram(X.to(d), EDGES.to(d), **on(d)))
    assert torch_tpu.metrics()["fallback_ops"] == {}


def test_histogram_edge_cases_match_cpu():
    assert_results_like_cpu(lambda d: torch.histogram(torch.full((3,), 2.0, device=d), 2))
    assert_results_like_cpu(lambda d: torch.histogram(torch.empty(0, device=d), 3))
    assert_results_like_cpu(lambda d: torch.histogram(X[:-1].double().to(d), 5))
    hist, edges = torch.empty(0, device="tpu"), torch.empty(0, device="tpu")
    torch.histogram(X.to("tpu"), 3, range=(0.0, 1.0), out=(hist, edges))
    assert_results_like_cpu(lambda d: (hist, edges) if d == "tpu" else
                            torch.histogram(X, 3, range=(0.0, 1.0)))


def test_histogramdd_matches_cpu():
    torch_tpu.reset_metrics()
    points = sample((12, 2), torch.float32)
    weight = sample((12,), torch.float32, seed=2).abs()
    assert_results_like_cpu(lambda d: torch.histogramdd(points.to(d), [2, 3]))
    assert_results_like_cpu(lambda d: torch.histogramdd(
        points.to(d), [torch.tensor([-4.0, 0.0, 4.0], device=d), EDGES.to(d)],
        weight=weight.to(d), density=True))
    assert torch_tpu.metrics()["fallback_ops"] == {}


def test_histogram_errors_match_cpu():
    assert_like_cpu(lambda d: torch.histogram(X.to(d), 0),
                    message="aten::histogram.bin_ct: torch.histogram(): bins must be > 0, but got "
                            "0 for dimension 0")
    assert_like_cpu(lambda d: torch.histogram(X.to(d), 3, range=(3.0, 1.0)),
                    message="aten::histogram.bin_ct: torch.histogramdd: min should not exceed "
                            "max, but got min 3 max 1 for dimension 0")
    assert_like_cpu(lambda d: torch.histogram(X.bfloat16().to(d), 3),
                    message="aten::histogram.bin_ct: \"histogramdd\" not implemented for "
                            "'BFloat16'")


def test_bincount_matches_cpu():
    """One host read of the extremes sizes the bins; counts and weighted sums on the device."""
    x = torch.tensor([0, 3, 1, 3, 3, 7, 0, 2])
    weights = torch.linspace(-1, 2, 8)
    cases = [
        lambda d: torch.bincount(x.to(d)),
        lambda d: torch.bincount(x.to(d), minlength=12),
        lambda d: torch.bincount(x.to(d), minlength=3),
        lambda d: torch.bincount(x.to(d), weights.to(d)),
        lambda d: torch.bincount(x.to(d), weights.double().to(d), minlength=10),
        lambda d: torch.bincount(x.to(d), torch.arange(8).to(d)),
        lambda d: torch.bincount(x.to(d), weights.half().to(d)),
        lambda d: torch.bincount(x.to(torch.uint8).to(d)),
        lambda d: torch.bincount(x.to(torch.int16).to(d), minlength=2),
        lambda d: torch.bincount(torch.tensor([5], device=d)),
        lambda d: torch.bincount(torch.tensor([], dtype=torch.long, device=d), minlength=4),
        lambda d: torch.bincount(torch.tensor([], dtype=torch.long, device=d), weights[:0].to(d)),
    ]
    torch_tpu.reset_metrics()
    for make in cases:
        assert_like_cpu(make)
    assert torch_tpu.metrics()["fallback_ops"] == {}


def test_bincount_errors_like_cpu():
    x = torch.tensor([0, 3, 1])
    for make in (lambda d: torch.bincount(torch.tensor([1, -2, 0], device=d)),
                 lambda d: torch.bincount(x.reshape(1, 3).to(d)),
                 lambda d: torch.bincount(x.to(d), minlength=-1),
                 lambda d: torch.bincount(x.to(d), torch.ones(2, device=d)),
                 lambda d: torch.bincount(x.float().to(d))):
        assert_like_cpu(make)

"""unique and unique_consecutive on the device (the host reads only the number of groups), against
PyTorch's CPU results: sorted values, inverse indices and counts in every combination asked for,
flattened and along a dim, NaN (flattened: each its own group, sorted last) and -0.0 == 0.0,
empty and 0-d inputs, bool/int/float dtypes, and CPU's errors."""

import pytest
import torch

import torch_tpu
from conftest import assert_like_cpu, assert_same, sample

NAN = float("nan")
FLOATS = torch.tensor([3.0, NAN, 1.0, NAN, 3.0, -0.0, 0.0, 1.0])
ROWS = torch.tensor([[1, 2, 1], [1, 2, 1], [0, 5, 0], [1, 2, 1]])


def assert_results_like_cpu(make):
    cpu = make("cpu")
    tpu = make("tpu")
    assert len(tpu) == len(cpu)
    for tpu_result, cpu_result in zip(tpu, cpu):
        assert_same(tpu_result, cpu_result, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("return_inverse,return_counts", [(False, False), (True, True)])
def test_unique_flattened_matches_cpu(return_inverse, return_counts):
    torch_tpu.reset_metrics()
    for x in [FLOATS, sample((3, 4), torch.int32) % 3, torch.tensor(5.0), torch.empty(0, 3)]:
        assert_results_like_cpu(lambda d: torch._unique2(x.to(d), True, return_inverse,
                                                         return_counts))
        assert_results_like_cpu(lambda d: torch.unique_consecutive(
            x.to(d), return_inverse=return_inverse, return_counts=return_counts))
    assert torch_tpu.metrics()["fallback_ops"] == {}


def test_unique_counts_alone_and_unique_match_cpu():
    assert_results_like_cpu(lambda d: torch._unique2(FLOATS.to(d), True, False, True))
    assert_results_like_cpu(lambda d: torch._unique(FLOATS.to(d), True, True))


@pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.bfloat16])
def test_unique_dtypes_match_cpu(dtype):
    x = sample((2, 5), dtype)
    assert_results_like_cpu(lambda d: torch._unique2(x.to(d), False, True, True))
    assert_results_like_cpu(lambda d: torch.unique_consecutive(x.to(d), return_counts=True))


def test_unique_along_a_dim_matches_cpu():
    torch_tpu.reset_metrics()
    for x, dim in [(ROWS, 0), (ROWS, -1), (torch.empty(0, 3), 0),
                   (sample((3, 2, 2), torch.int64) % 2, 1)]:
        # Along a dim CPU returns inverse and counts whether asked or not.
        assert_results_like_cpu(lambda d: torch.ops.aten.unique_dim(x.to(d), dim, True, False,
                                                                    False))
        assert_results_like_cpu(lambda d: torch.ops.aten.unique_dim_consecutive(x.to(d), dim,
                                                                                False, False))
        assert_results_like_cpu(lambda d: torch.unique_consecutive(x.to(d), dim=dim))
    # (CPU sorts rows with NaN in an order its comparator leaves undefined: not compared here.)
    rows = torch.tensor([[3.0, 1.0], [-0.0, 2.0], [3.0, 1.0], [0.0, 2.0], [0.0, -1.0]])
    assert_results_like_cpu(lambda d: torch.unique(rows.to(d), dim=0, return_inverse=True))
    assert torch_tpu.metrics()["fallback_ops"] == {}


def test_unique_errors_match_cpu():
    assert_like_cpu(lambda d: torch.ops.aten.unique_dim(torch.empty(3, 0, device=d), 0))
    assert_like_cpu(lambda d: torch.ops.aten.unique_dim(torch.tensor(1.0, device=d), 0))
    assert_like_cpu(lambda d: torch.ops.aten.unique_dim(ROWS.to(d), 2))
    assert_like_cpu(lambda d: torch._unique2(torch.ones(2, dtype=torch.cfloat, device=d)))

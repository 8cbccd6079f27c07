"""Index-taking ops and reductions on zero-size tensors and with empty index tensors, against
PyTorch CPU: same shapes, dtypes and values, and the same exception where CPU raises one."""

import pytest
import torch
import torch.nn.functional as F
import torch_tpu


def ones(device, *shape):
    return torch.ones(*shape, device=device)


def empty(device, *shape):
    """An empty long index tensor."""
    return torch.empty(*shape, dtype=torch.long, device=device)


def zeros(device, *shape, dtype=torch.long):
    return torch.zeros(*shape, dtype=dtype, device=device)


def tensor(device, values):
    return torch.tensor(values, device=device)


CASES = {
    "index_select_empty_self": lambda d: ones(d, 0, 3).index_select(0, empty(d, 0)),
    "index_select_empty_index": lambda d: ones(d, 2, 3).index_select(1, empty(d, 0)),
    "index_select_other_dim_of_empty": lambda d: ones(d, 0, 3).index_select(1, tensor(d, [0, 2])),
    "gather_empty": lambda d: ones(d, 0, 3).gather(1, empty(d, 0, 2)),
    "gather_empty_index": lambda d: ones(d, 2, 3).gather(1, empty(d, 2, 0)),
    "gather_empty_self_other_dim": lambda d: ones(d, 2, 0).gather(0, zeros(d, 1, 0)),
    "take_along_dim_empty": lambda d: torch.take_along_dim(ones(d, 0, 3), zeros(d, 0, 1), 1),
    "take_along_dim_flat_empty_index": lambda d: torch.take_along_dim(ones(d, 2, 3), empty(d, 0)),
    "take_empty": lambda d: ones(d, 0).take(empty(d, 0)),
    "take_empty_index": lambda d: ones(d, 3).take(empty(d, 2, 0)),
    "getitem_empty_index": lambda d: ones(d, 2, 3)[empty(d, 0)],
    "getitem_empty_index_dim1": lambda d: ones(d, 2, 3)[:, empty(d, 0)],
    "getitem_empty_self_empty_index": lambda d: ones(d, 0, 3)[empty(d, 0)],
    "getitem_empty_self_index_dim1": lambda d: ones(d, 0, 3)[:, tensor(d, [1, 2])],
    "getitem_all_false_mask": lambda d: ones(d, 2, 3)[zeros(d, 2, 3, dtype=torch.bool)],
    "getitem_empty_mask": lambda d: ones(d, 0, 3)[zeros(d, 0, 3, dtype=torch.bool)],
    "index_put_empty_index": lambda d: ones(d, 2, 3).index_put((empty(d, 0),), tensor(d, 1.0)),
    "index_put_empty_self": lambda d: ones(d, 0, 3).index_put((empty(d, 0),), tensor(d, 1.0)),
    "scatter_empty_index": lambda d: ones(d, 2, 3).scatter(1, empty(d, 2, 0), 1.0),
    "scatter_empty_self": lambda d: ones(d, 0, 3).scatter(1, empty(d, 0, 3), 1.0),
    "scatter_add_empty_index": lambda d: ones(d, 2, 3).scatter_add(
        1, empty(d, 2, 0), ones(d, 2, 0)
    ),
    "scatter_reduce_empty_index": lambda d: ones(d, 2, 3).scatter_reduce(
        1, empty(d, 2, 0), ones(d, 2, 0), "amax"
    ),
    "index_add_empty_index": lambda d: ones(d, 2, 3).index_add(1, empty(d, 0), ones(d, 2, 0)),
    "index_add_empty_self": lambda d: ones(d, 0, 3).index_add(1, tensor(d, [0]), ones(d, 0, 1)),
    "index_copy_empty_index": lambda d: ones(d, 2, 3).index_copy(1, empty(d, 0), ones(d, 2, 0)),
    "index_fill_empty_index": lambda d: ones(d, 2, 3).index_fill(1, empty(d, 0), 2.0),
    "index_fill_empty_self": lambda d: ones(d, 0, 3).index_fill(1, tensor(d, [1]), 2.0),
    "embedding_empty_indices": lambda d: F.embedding(empty(d, 2, 0), ones(d, 4, 3)),
    "put_empty_index": lambda d: ones(d, 3).put(empty(d, 0), ones(d, 0)),
    "nll_loss_empty_batch": lambda d: F.nll_loss(ones(d, 0, 3), empty(d, 0), reduction="sum"),
    "nll_loss_empty_batch_none": lambda d: F.nll_loss(ones(d, 0, 3), empty(d, 0), reduction="none"),
    "max_dim_of_empty_rows": lambda d: ones(d, 0, 3).max(1),
    "argmax_of_empty_rows": lambda d: ones(d, 0, 3).argmax(1),
    "sum_over_empty": lambda d: ones(d, 0, 3).sum(0),
    "mean_over_empty": lambda d: ones(d, 0, 3).mean(0),
    "cumsum_empty": lambda d: ones(d, 0, 3).cumsum(0),
    # CPU raises for these.
    "take_from_empty": lambda d: ones(d, 0).take(tensor(d, [0])),
    "index_select_from_empty": lambda d: ones(d, 0, 3).index_select(0, tensor(d, [0])),
    "embedding_from_empty": lambda d: F.embedding(tensor(d, [0]), ones(d, 0, 3)),
    "getitem_from_empty": lambda d: ones(d, 0, 3)[tensor(d, [0])],
    "put_into_empty": lambda d: ones(d, 0).put(tensor(d, [0]), ones(d, 1)),
}


def run(fn, device):
    try:
        return fn(device), None
    except Exception as error:  # noqa: BLE001  (compared with CPU's below)
        return None, error


@pytest.mark.parametrize("case", sorted(CASES))
def test_zero_size_matches_cpu(case):
    expected, cpu_error = run(CASES[case], "cpu")
    torch_tpu.reset_metrics()
    actual, tpu_error = run(CASES[case], "tpu")
    if cpu_error is not None:
        assert type(tpu_error) is type(cpu_error), tpu_error
        assert str(cpu_error).splitlines()[0] in str(tpu_error)
        return
    assert tpu_error is None, tpu_error
    assert torch_tpu.metrics()["fallback_ops"] == {}
    if isinstance(expected, torch.Tensor):
        expected, actual = (expected,), (actual,)
    for got, want in zip(actual, expected):
        assert got.device.type == "tpu"
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got.cpu(), want, equal_nan=True)

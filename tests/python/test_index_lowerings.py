"""Index-taking lowerings against PyTorch CPU on valid programs: every index-taking op declares its
indices as a device-side range check, and declaring them must not change any result (negative
indices where PyTorch wraps them, ignore_index targets, integer division by non-zero divisors).
Also the ops lowered for this (index_copy, index_fill, put) and their argument errors."""

import re

import pytest
import torch
import torch.nn.functional as F
import torch_tpu

from conftest import assert_same


def to_tpu(value):
    if isinstance(value, torch.Tensor):
        return value.to("tpu")
    if isinstance(value, (list, tuple)):
        return type(value)(to_tpu(item) for item in value)
    return value


def check(fn, *inputs, **tolerances):
    """fn on tpu equals fn on CPU, and ran without the CPU fallback."""
    expected = fn(*inputs)
    torch_tpu.reset_metrics()
    actual = fn(*to_tpu(inputs))
    assert torch_tpu.metrics()["fallback_ops"] == {}
    if isinstance(expected, torch.Tensor):
        expected, actual = (expected,), (actual,)
    for got, want in zip(actual, expected):
        assert_same(got, want, **tolerances)


X = torch.arange(24.0).reshape(2, 3, 4)


def test_advanced_indexing_with_mask_and_index():
    mask = torch.tensor([[True, False, True], [False, True, False]])
    check(lambda x, m, i: x[m, i], X, mask, torch.tensor(3))
    check(lambda x, m, i: x[m, i], X, mask, torch.tensor(-1))
    check(lambda x, i: x[:, i], X, torch.tensor([-1, 0, 2, -3]))
    check(lambda x, i, j: x[i, :, j], X, torch.tensor([[0], [-1]]), torch.tensor([3, -4, 0]))
    check(lambda x, i: x[i], X, torch.tensor([-2, 1], dtype=torch.int32))


def test_index_put_with_negative_indices():
    def put(x, i, v):
        x = x.clone()
        x[:, i] = v
        return x

    check(put, X, torch.tensor([-1, 0]), torch.tensor(7.0))
    check(lambda x, i, v: x.index_put((i,), v, accumulate=True), X, torch.tensor([-1, 1, -1]),
          torch.ones(3, 3, 4))


def test_index_select_gather_scatter_take():
    check(lambda x, i: x.index_select(2, i), X, torch.tensor([3, 0, 3]))
    check(lambda x, i: x.gather(2, i), X, torch.tensor([[[3, 0], [1, 1], [2, 3]]] * 2))
    index = torch.tensor([[[3, 0, 1, 2]] * 3] * 2)
    check(lambda x, i: x.scatter(2, i, -x), X, index)
    check(lambda x, i: x.scatter(2, i, 5.0), X, index)
    check(lambda x, i: x.scatter_add(1, i[:, :2], x[:, :2]), X, index.clamp(max=2))
    check(lambda x, i: x.scatter_reduce(1, i[:, :2], x[:, :2], "amax"), X, index.clamp(max=2))
    check(lambda x, i: x.take(i), X, torch.tensor([[-1, 0], [23, -24]]))


def test_index_ops_on_zero_dim_tensors():
    scalar = torch.tensor(2.5)
    check(lambda x, i: x.scatter(0, i, 5.0), scalar, torch.tensor(0))
    check(lambda x, i: x.gather(0, i), scalar, torch.tensor(0))
    check(lambda x, i: x.index_select(0, i), scalar, torch.tensor([0]))

    def max_backward(x):
        x = x.clone().requires_grad_()
        values, _ = x.max(0)
        values.backward()
        return x.grad

    check(max_backward, scalar)


@pytest.mark.filterwarnings("ignore:index_reduce")
def test_index_add_and_index_reduce():
    check(lambda x, i: x.index_add(1, i, x[:, :2], alpha=2), X, torch.tensor([2, 2]))
    check(lambda x, i: x.index_reduce(2, i, x[:, :, :2], "prod"), X, torch.tensor([3, 0]))


def test_embedding_and_its_backward():
    weight = torch.randn(10, 3, generator=torch.Generator().manual_seed(0))
    indices = torch.tensor([[0, 9, 4], [9, 9, 1]])
    check(F.embedding, indices, weight)
    check(lambda g, i: torch.ops.aten.embedding_dense_backward(g, i, 10, 4, False),
          torch.ones(2, 3, 3), indices)


@pytest.mark.parametrize("ignore_index", [-100, 2])
def test_nll_loss_targets_with_ignore_index(ignore_index):
    logits = torch.randn(4, 5, generator=torch.Generator().manual_seed(0)).log_softmax(1)
    target = torch.tensor([1, ignore_index, 4, 0])
    for reduction in ("mean", "sum", "none"):
        check(lambda x, t: F.nll_loss(x, t, ignore_index=ignore_index, reduction=reduction),
              logits, target)
    images = torch.randn(2, 5, 3, 3, generator=torch.Generator().manual_seed(1))
    targets = torch.tensor([[[1, ignore_index, 4]] * 3, [[0, 0, ignore_index]] * 3])
    check(lambda x, t: F.nll_loss(x, t, ignore_index=ignore_index), images, targets)


def test_index_copy():
    check(lambda x, i, s: x.index_copy(1, i, s), X, torch.tensor([2, 0]), -torch.ones(2, 2, 4))
    check(lambda x, i, s: x.clone().index_copy_(2, i, s), X, torch.tensor(1), -torch.ones(2, 3, 1))
    check(lambda x, i, s: x.index_copy(0, i, s), torch.tensor(5.0), torch.tensor([0]),
          torch.tensor(2.0))


def test_index_fill():
    check(lambda x, i: x.index_fill(1, i, -5.0), X, torch.tensor([-1, 0]))
    check(lambda x, i, v: x.clone().index_fill_(2, i, v), X, torch.tensor(3), torch.tensor(9.0))
    check(lambda x, i: x.index_fill(0, i, 1.0), torch.tensor(5.0), torch.tensor([0]))
    check(lambda x, i: x.index_fill(1, i, 1), torch.arange(6).reshape(2, 3), torch.tensor([-3]))


def test_put():
    check(lambda x, i, s: x.put(i, s), X, torch.tensor([[0, -1], [5, 7]]),
          torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    check(lambda x, i, s: x.clone().put_(i, s, accumulate=True), X, torch.tensor([0, 0, -1]),
          torch.tensor([1.0, 2.0, 3.0]))
    check(lambda x, i, s: x.put(i, s), torch.ones(0), torch.tensor([], dtype=torch.long),
          torch.ones(0))


@pytest.mark.parametrize(
    "fn, message, error",
    [
        (lambda x: x.index_copy(1, torch.tensor([0], dtype=torch.int32, device=x.device),
                                torch.ones(2, 1, 4, device=x.device)),
         "index_copy_(): Expected a long tensor for index, but got Int", RuntimeError),
        (lambda x: x.index_copy(1, torch.tensor([0, 1], device=x.device),
                                torch.ones(2, 1, 4, device=x.device)),
         "index_copy_(): Number of indices (2) should be equal to source.size(dim) (1)",
         IndexError),
        (lambda x: x.index_fill(1, torch.tensor([0], dtype=torch.int32, device=x.device), 1.0),
         "index_fill_(): Expected dtype int64 for index.", IndexError),
        (lambda x: x.put(torch.tensor([0, 1], device=x.device), torch.ones(1, device=x.device)),
         "put_(): Expected source and index to have the same number of elements, but got "
         "source.numel() = 1, index.numel() = 2", IndexError),
        (lambda x: x.put(torch.tensor([0], device=x.device),
                         torch.ones(1, dtype=torch.float64, device=x.device)),
         "put_(): self and source expected to have the same dtype, but got self.dtype = Float and "
         "source.dtype = Double", RuntimeError),
        (lambda x: x.index_add(1, torch.tensor([0, 1], device=x.device),
                               torch.ones(2, 3, 4, device=x.device)),
         "index_add_(): Number of indices (2) should be equal to source.size(dim): (3), for dim: 1",
         RuntimeError),
        (lambda x: x.index_add(0, torch.tensor([5], device=x.device), torch.ones(0, 3, 4,
                                                                               device=x.device)),
         "index_add_(): Number of indices (1) should be equal to source.size(dim): (0), for dim: 0",
         RuntimeError),
    ],
)
def test_argument_errors_as_cpu(fn, message, error):
    with pytest.raises(error, match=re.escape(message)):
        fn(X)
    with pytest.raises(error, match=re.escape(message)):
        fn(X.to("tpu"))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.int8])
def test_integer_division_by_nonzero_divisors(dtype):
    low = 0 if dtype == torch.uint8 else -50
    a = torch.arange(low, low + 100).to(dtype)
    b = torch.tensor([3, 7, 1, 9, 2] * 20).to(dtype)
    if dtype != torch.uint8:
        b[::3] = -b[::3]
    check(lambda x, y: x // y, a, b)
    check(lambda x, y: x % y, a, b)
    check(torch.fmod, a, b)
    check(lambda x, y: torch.div(x, y, rounding_mode="trunc"), a, b)
    check(lambda x, y: torch.div(x, y, rounding_mode="floor"), a, b)
    check(lambda x: x // 3, a)
    check(lambda x: x % 7, a)


def test_float_floor_division_as_cpu():
    a = torch.tensor([1.0, -1.0, 7.5, -7.5, 0.0, -0.0, 5.0, 1.0, 3.0])
    b = torch.tensor([0.1, 0.1, -2.0, 2.0, 3.0, 3.0, 0.0, -0.0, float("inf")])
    check(lambda x, y: x // y, a, b)
    check(lambda x, y: torch.div(x, y, rounding_mode="floor"), a, b)
    check(lambda x: x // 0.1, a)
    for dtype in (torch.float64, torch.bfloat16):
        check(lambda x, y: x // y, a.to(dtype), b.to(dtype))
    result = (a.to("tpu") // b.to("tpu")).cpu()
    assert torch.equal(torch.signbit(result), torch.signbit(a // b))


def test_scatter_with_reduce_matches_cpu():
    from conftest import assert_like_cpu
    index = torch.tensor([[0, 1, 0], [2, 0, 0]])
    src = torch.tensor([[2.0, 3.0, 4.0], [5.0, 6.0, 7.0]])
    torch_tpu.reset_metrics()
    for reduce in ("add", "multiply"):
        for dtype in (torch.float32, torch.int64):
            base = torch.arange(1, 13, dtype=dtype).reshape(3, 4)
            assert_like_cpu(lambda d: base.to(d).scatter(0, index.to(d), src.to(dtype).to(d),
                                                         reduce=reduce))
            assert_like_cpu(lambda d: base.to(d).scatter(1, index.to(d), 3, reduce=reduce))
            assert_like_cpu(lambda d: base.clone().to(d).scatter_(
                1, index.to(d), src.to(dtype).to(d), reduce=reduce))
    assert torch_tpu.metrics()["fallback_ops"] == {}
    assert_like_cpu(lambda d: torch.ones(3, device=d).scatter(0, torch.tensor([0], device=d),
                                                              torch.ones(1, device=d),
                                                              reduce="max"),
                    message="aten::scatter.reduce: reduce argument must be either add or "
                            "multiply.")

"""The first ops of the device (issue: the tpu device), each compared with PyTorch's CPU result."""

import pytest
import torch

import torch_tpu
from conftest import assert_same

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32,
          torch.int8, torch.uint8, torch.bool]


def sample(shape, dtype, seed=0):
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=generator) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=generator) * 3).to(dtype)
    low = 0 if dtype == torch.uint8 else -5
    return torch.randint(low, 6, shape, generator=generator).to(dtype)


BINARY = {
    "add": lambda a, b: a + b,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2),
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
}


def cpu_or_error(function, *args):
    try:
        return function(*args), None
    except (RuntimeError, TypeError) as error:
        return None, type(error)


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_binary_ops_with_broadcasting_match_cpu(name, dtype):
    a, b = sample((3, 4), dtype), sample((4,), dtype, seed=1)
    if name == "div" and not dtype.is_floating_point:
        b = torch.where(b == 0, torch.ones_like(b), b)
    expected, error = cpu_or_error(BINARY[name], a, b)
    if error is not None:
        with pytest.raises(error):
            BINARY[name](a.to("tpu"), b.to("tpu"))
        return
    tolerance = {"atol": 1e-2, "rtol": 1e-2} if dtype in (torch.bfloat16, torch.float16) else {}
    assert_same(BINARY[name](a.to("tpu"), b.to("tpu")), expected, **tolerance)


@pytest.mark.parametrize(
    "left, right",
    [(torch.int32, torch.float32), (torch.int64, torch.float16), (torch.bool, torch.int8),
     (torch.uint8, torch.int8), (torch.bfloat16, torch.float16), (torch.float32, torch.float64)],
    ids=str,
)
def test_type_promotion_between_tensors(left, right):
    a, b = sample((5,), left), sample((5,), right, seed=3)
    assert_same(a.to("tpu") + b.to("tpu"), a + b, atol=1e-2, rtol=1e-2)
    assert_same(a.to("tpu") * b.to("tpu"), a * b, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float16, torch.bool, torch.int8], ids=str)
@pytest.mark.parametrize("scalar", [2, 2.5, True])
def test_python_scalars_and_zero_dim_tensors_promote_like_cpu(dtype, scalar):
    a = sample((4,), dtype)
    expected, error = cpu_or_error(lambda x: x * scalar + scalar, a)
    if error is None:
        assert_same(a.to("tpu") * scalar + scalar, expected, atol=1e-2, rtol=1e-2)
    zero_dim = torch.tensor(3.0, dtype=torch.float64)
    assert_same(a.to("tpu") * zero_dim.to("tpu"), a * zero_dim, atol=1e-2, rtol=1e-2)


def test_division_rounding_modes():
    a = torch.tensor([7, -7, 6, -6, 0])
    b = torch.tensor([2, 2, -4, 4, 3])
    for mode in ("trunc", "floor"):
        assert_same(a.to("tpu").div(b.to("tpu"), rounding_mode=mode), a.div(b, rounding_mode=mode))
        af = a.double() + 0.25
        assert_same(af.to("tpu").div(b.to("tpu"), rounding_mode=mode), af.div(b, rounding_mode=mode))
    assert_same(a.to("tpu") / b.to("tpu"), a / b)


def test_unary_where_clamp_and_masks():
    x = sample((4, 5), torch.float32)
    t = x.to("tpu")
    assert_same(-t, -x)
    assert_same(t.abs(), x.abs())
    assert_same(torch.where(t > 0, t, torch.zeros_like(t)), torch.where(x > 0, x, torch.zeros_like(x)))
    assert_same(torch.where(t > 0, t, 1.5), torch.where(x > 0, x, 1.5))
    assert_same(t.clamp(-1, 2), x.clamp(-1, 2))
    assert_same(t.clamp(min=0.5), x.clamp(min=0.5))
    assert_same(t.clamp(max=t[0]), x.clamp(max=x[0]))
    assert_same(t.masked_fill(t < 0, 0), x.masked_fill(x < 0, 0))
    assert_same(t.clone().masked_fill_(t > 1, float("nan")), x.clone().masked_fill_(x > 1, float("nan")),
                equal_nan=True)
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with two bool"):
        torch.ones(2, dtype=torch.bool, device="tpu") - torch.ones(2, dtype=torch.bool, device="tpu")


def test_in_place_ops_respect_casting_rules():
    x = torch.ones(3, dtype=torch.int64, device="tpu")
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        x.add_(torch.ones(3, device="tpu"))
    assert torch.equal(x.cpu(), torch.ones(3, dtype=torch.int64))  # left intact
    y = torch.ones(3, device="tpu")
    y.add_(torch.arange(3, device="tpu"))
    assert torch.equal(y.cpu(), torch.tensor([1.0, 2.0, 3.0]))


def test_out_variants():
    a, b = sample((3, 4), torch.float32), sample((3, 4), torch.float32, seed=1)
    out = torch.empty(0, device="tpu")
    torch.add(a.to("tpu"), b.to("tpu"), out=out)
    assert_same(out, a + b)
    out = torch.empty(3, 4, dtype=torch.int64, device="tpu")
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.mul(a.to("tpu"), b.to("tpu"), out=out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool, torch.bfloat16], ids=str)
def test_sum_and_mean(dtype):
    x = sample((3, 4, 5), dtype)
    t = x.to("tpu")
    tolerance = {"atol": 0.1, "rtol": 1e-2} if dtype == torch.bfloat16 else {}
    assert_same(t.sum(), x.sum(), **tolerance)
    assert_same(t.sum(dim=1), x.sum(dim=1), **tolerance)
    assert_same(t.sum(dim=(0, 2), keepdim=True), x.sum(dim=(0, 2), keepdim=True), **tolerance)
    assert_same(t.sum(dim=-1, dtype=torch.float64), x.sum(dim=-1, dtype=torch.float64))
    if dtype.is_floating_point:
        assert_same(t.mean(), x.mean(), **tolerance)
        assert_same(t.mean(dim=[0, 1]), x.mean(dim=[0, 1]), **tolerance)
    else:
        with pytest.raises(RuntimeError, match="mean\\(\\): could not infer output dtype"):
            t.mean()


def test_factories_match_cpu():
    for args, kwargs in [((10,), {}), ((2, 11, 3), {}), ((0, 1, 0.1), {}), ((5, -3, -2), {}),
                         ((10,), {"dtype": torch.float32}), ((0.5, 4), {"dtype": torch.float64})]:
        assert_same(torch.arange(*args, device="tpu", **kwargs), torch.arange(*args, **kwargs))
    assert_same(torch.linspace(-2, 3, 7, device="tpu"), torch.linspace(-2, 3, 7))
    assert_same(torch.linspace(0, 10, 5, device="tpu", dtype=torch.int64),
                torch.linspace(0, 10, 5, dtype=torch.int64))
    assert_same(torch.eye(3, 4, device="tpu"), torch.eye(3, 4))
    assert_same(torch.eye(2, device="tpu", dtype=torch.bool), torch.eye(2, dtype=torch.bool))
    assert_same(torch.zeros(2, 3, device="tpu"), torch.zeros(2, 3))
    assert_same(torch.ones(4, dtype=torch.int8, device="tpu"), torch.ones(4, dtype=torch.int8))
    assert_same(torch.full((2, 2), 7, device="tpu"), torch.full((2, 2), 7))
    x = torch.randn(3, device="tpu")
    assert_same(torch.zeros_like(x), torch.zeros(3))
    assert_same(torch.full_like(x, 2.5), torch.full((3,), 2.5))
    assert_same(torch.tensor([[1, 2], [3, 4]], device="tpu"), torch.tensor([[1, 2], [3, 4]]))
    assert torch.empty(5, device="tpu").shape == (5,)
    assert torch.empty_strided((2, 3), (1, 2), device="tpu").stride() == (1, 2)


def test_item_clone_contiguous():
    x = sample((4, 3), torch.float32)
    t = x.to("tpu")
    assert t[2, 1].item() == x[2, 1].item()
    assert torch.tensor(5, device="tpu").item() == 5
    assert torch.tensor(True, device="tpu").item() is True
    assert_same(t.t().contiguous(), x.t().contiguous())
    assert t.t().contiguous().is_contiguous()
    clone = t.clone()
    clone.add_(1)
    assert_same(t, x)


def test_indexing_ops_match_cpu():
    x = sample((5, 4), torch.float32)
    t = x.to("tpu")
    index = torch.tensor([4, 0, 2])
    i = index.to("tpu")
    assert_same(t[i], x[index])
    assert_same(t[:, i[1:]], x[:, index[1:]])
    assert_same(t[t > 0], x[x > 0])
    assert_same(t.index_select(1, i[1:]), x.index_select(1, index[1:]))
    assert_same((t > 0).nonzero(), (x > 0).nonzero())
    y, z = t.clone(), x.clone()
    y[i] = 0.5
    z[index] = 0.5
    assert_same(y, z)
    y.index_add_(0, i, torch.ones(3, 4, device="tpu"), alpha=3)
    z.index_add_(0, index, torch.ones(3, 4), alpha=3)
    assert_same(y, z)
    assert_same(t.gather(1, torch.tensor([[0, 3]] * 5).to("tpu")), x.gather(1, torch.tensor([[0, 3]] * 5)))
    assert torch_tpu.metrics()["fallback_ops"].get("aten::index.Tensor") is None


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

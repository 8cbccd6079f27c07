"""Elementwise ops, type promotion, scalars, in-place casting and out= variants, each compared with PyTorch's CPU result."""

import pytest
import torch

from conftest import assert_same, sample


DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32,
          torch.int8, torch.uint8, torch.bool]


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

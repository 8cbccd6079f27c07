"""Integer-only ops lowered natively (shifts, gcd/lcm) and cummax/cummin, against PyTorch CPU,
including the edge cases OpInfo's samples miss: shift amounts outside [0, bits), gcd of zeros,
negative and extreme values, NaN and ties in running extremes."""

import pytest
import torch
import torch_tpu
from conftest import assert_like_cpu, assert_raises_exactly

INTEGER_DTYPES = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]


def _no_fallback(make, **tolerances):
    """assert_like_cpu for each output of `make`, with no CPU fallback on tpu; exact unless
    `tolerances` say otherwise."""
    outputs = make("cpu")
    for index in range(len(outputs) if isinstance(outputs, tuple) else 1):
        torch_tpu.reset_metrics()
        assert_like_cpu(lambda d: make(d)[index] if isinstance(outputs, tuple) else make(d),
                        equal_nan=True, **(tolerances or {"rtol": 0, "atol": 0}))
        assert torch_tpu.metrics()["fallback_ops"] == {}


def _extremes(dtype):
    info = torch.iinfo(dtype)
    return [info.min, info.min + 1, -7, -1, 0, 1, 6, 7, 12, info.max - 1, info.max]


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_shifts_by_every_amount_including_out_of_range(dtype):
    values = torch.tensor(_extremes(dtype), dtype=dtype)
    bits = torch.iinfo(dtype).bits
    low = 0 if dtype == torch.uint8 else -3
    amounts = torch.arange(low, bits + 3).clamp(max=torch.iinfo(dtype).max).to(dtype)
    a, b = values[:, None], amounts[None, :]
    _no_fallback(lambda d: torch.bitwise_left_shift(a.to(d), b.to(d)))
    _no_fallback(lambda d: torch.bitwise_right_shift(a.to(d), b.to(d)))
    _no_fallback(lambda d: torch.bitwise_left_shift(a.to(d), 3))
    _no_fallback(lambda d: torch.bitwise_right_shift(a.to(d), 3))
    _no_fallback(lambda d: torch.bitwise_right_shift(5, b.to(d)))


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8])
def test_python_shift_operators(dtype):
    # `<<`, `>>`, `<<=`, `>>=` are their own ATen operators (__lshift__ ...), with CPU's rule for
    # amounts outside [0, bits).
    a = torch.tensor(_extremes(dtype), dtype=dtype)[:, None]
    b = torch.tensor([0, 1, 3, 7, 8, 9, 70], dtype=dtype)[None, :]
    _no_fallback(lambda d: a.to(d) << b.to(d))
    _no_fallback(lambda d: a.to(d) >> b.to(d))
    _no_fallback(lambda d: a.to(d) << 3)
    _no_fallback(lambda d: a.to(d) >> 70)

    def in_place(d, shift_left):
        x = a.to(d).expand(-1, b.shape[1]).clone()
        if shift_left:
            x <<= b.to(d)
            x <<= 1
        else:
            x >>= b.to(d)
            x >>= 2
        return x

    _no_fallback(lambda d: in_place(d, True))
    _no_fallback(lambda d: in_place(d, False))
    _no_fallback(lambda d: torch.ops.aten.__lshift__.Scalar_out(
        a.to(d), 2, out=torch.empty(0, dtype=dtype, device=d)))
    assert_raises_exactly(NotImplementedError, "aten::__rshift__.Scalar: \"rshift_cpu\" not "
                          "implemented for 'Float'", lambda: torch.ones(2, device="tpu") >> 1)


def test_in_place_shift_and_float_error():
    _no_fallback(lambda d: torch.tensor([1, -8, 3], device=d).bitwise_left_shift_(2))
    assert_raises_exactly(
        NotImplementedError, "aten::bitwise_left_shift.Tensor_Scalar: \"lshift_cpu\" not "
        "implemented for 'Float'", lambda: torch.ones(2, device="tpu").bitwise_left_shift(1))


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_gcd_and_lcm(dtype):
    # Not the type's minimum: its absolute value overflows and CPU divides by -1 (SIGFPE).
    values = torch.tensor(_extremes(dtype)[1:], dtype=dtype)
    a, b = values[:, None], values[None, :]
    _no_fallback(lambda d: torch.gcd(a.to(d), b.to(d)))
    _no_fallback(lambda d: torch.lcm(a.to(d), b.to(d)))


def test_gcd_of_consecutive_fibonacci_numbers():
    """Euclid's worst case: the most steps for values of the type."""
    fibonacci = [1, 2]
    while fibonacci[-1] < 2**62:
        fibonacci.append(fibonacci[-1] + fibonacci[-2])
    a = torch.tensor(fibonacci[1:])
    b = torch.tensor(fibonacci[:-1])
    _no_fallback(lambda d: torch.gcd(a.to(d), b.to(d)))
    _no_fallback(lambda d: torch.lcm(a.to(d), b.to(d)))


@pytest.mark.parametrize("op", [torch.cummax, torch.cummin])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8,
                                   torch.bool])
def test_cummax_cummin_ties_and_nan(op, dtype):
    values = torch.tensor([[3, 1, 3, 5, 5, 0, 5, 2], [0, 0, 1, 1, 0, 2, 2, 1]]).to(dtype)
    if dtype.is_floating_point:
        values[0, 4] = float("nan")
        values[1, 2] = float("nan")
        values[1, 6] = float("nan")
    _no_fallback(lambda d: op(values.to(d), 1))
    _no_fallback(lambda d: op(values.to(d), 0))
    _no_fallback(lambda d: op(torch.tensor(2.5, device=d), 0))
    _no_fallback(lambda d: op(torch.empty(0, 3, device=d), 0))


def test_cummax_out_and_backward():
    x = torch.tensor([1.0, 3.0, 2.0, 3.0, 4.0])
    values, indices = torch.empty(0, device="tpu"), torch.empty(0, dtype=torch.long, device="tpu")
    torch.cummax(x.to("tpu"), 0, out=(values, indices))
    expected = torch.cummax(x, 0)
    assert torch.equal(values.cpu(), expected.values)
    assert torch.equal(indices.cpu(), expected.indices)
    cpu_input = x.clone().requires_grad_()
    tpu_input = x.to("tpu").requires_grad_()
    torch.cummin(cpu_input, 0).values.sum().backward()
    torch.cummin(tpu_input, 0).values.sum().backward()
    assert torch.equal(tpu_input.grad.cpu(), cpu_input.grad)


def test_max_pool_of_uint8():
    x = torch.randint(0, 256, (1, 2, 5, 6), generator=torch.Generator().manual_seed(0))
    x = x.to(torch.uint8)
    _no_fallback(lambda d: torch.nn.functional.max_pool2d(x.to(d), 3, 2, ceil_mode=True))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_geometric_fills_integer_tensors(dtype):
    torch_tpu.reset_metrics()
    x = torch.zeros(1000, dtype=dtype, device="tpu").geometric_(0.5).cpu()
    assert torch_tpu.metrics()["fallback_ops"] == {}
    assert x.dtype == dtype
    assert x.min() >= 1
    assert 1.8 < x.double().mean() < 2.2  # mean 1 / p


def test_avg_pool3d_of_integers_and_floats():
    generator = torch.Generator().manual_seed(0)
    x = torch.randint(-50, 50, (2, 3, 5, 6, 4), generator=generator)
    for dtype in (torch.int64, torch.float32):
        tolerances = {} if dtype == torch.int64 else {"rtol": 1e-6, "atol": 1e-6}
        _no_fallback(lambda d: torch.nn.functional.avg_pool3d(x.to(dtype).to(d), 3, 2, 1,
                                                              ceil_mode=True), **tolerances)
        _no_fallback(lambda d: torch.nn.functional.avg_pool3d(x.to(dtype)[0].to(d), (2, 3, 2),
                                                              count_include_pad=False),
                     **tolerances)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.bool, torch.int8])
@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_scatter_reduce_extremes_of_small_types_without_self(dtype, reduce):
    """Positions nothing scatters to keep self; the others start from the type's extreme."""
    generator = torch.Generator().manual_seed(0)
    self = torch.randint(0, 2 if dtype == torch.bool else 100, (4, 3), generator=generator)
    src = torch.randint(0, 2 if dtype == torch.bool else 100, (5, 3), generator=generator)
    index = torch.tensor([[0, 1, 0], [2, 0, 0], [0, 1, 2], [2, 2, 0], [0, 0, 1]])
    for include_self in (False, True):
        _no_fallback(lambda d: self.to(dtype).to(d).scatter_reduce(
            0, index.to(d), src.to(dtype).to(d), reduce, include_self=include_self))


def test_dropout_backward_of_an_integer_gradient_is_float():
    grad = torch.arange(6).reshape(2, 3)
    mask = torch.tensor([[True, False, True], [False, True, True]])
    _no_fallback(lambda d: torch.ops.aten.native_dropout_backward(grad.to(d), mask.to(d), 2.0))

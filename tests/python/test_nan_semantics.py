"""NaN handling of max/min-like ops against PyTorch CPU: reductions and their indices propagate NaN,
torch.maximum/minimum and clamp propagate it, fmax/fmin ignore it, sign(NaN) is what CPU says."""

import pytest
import torch

NAN = float("nan")
FLOAT_DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def check(fn, *inputs):
    """fn on tpu copies of `inputs` equals fn on the CPU inputs, NaNs in the same places."""
    expected = fn(*inputs)
    actual = fn(*[x.to("tpu") if isinstance(x, torch.Tensor) else x for x in inputs])
    if isinstance(expected, torch.Tensor):
        expected, actual = (expected,), (actual,)
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        assert got.device.type == "tpu"
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got.cpu(), want, equal_nan=True, rtol=0, atol=0)


def with_nans(dtype):
    """A 3x4 matrix with NaNs in rows 0 and 2, two of them in row 2, none in row 1."""
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    x[0, 1] = NAN
    x[2, 0] = NAN
    x[2, 3] = NAN
    return x.to(dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_whole_tensor_max_min_propagate_nan(dtype):
    check(lambda t: t.max(), torch.tensor([1.0, NAN, 3.0], dtype=dtype))
    check(lambda t: t.min(), torch.tensor([1.0, NAN, 3.0], dtype=dtype))
    check(lambda t: t.max(), torch.tensor([NAN, 1.0], dtype=dtype))
    check(lambda t: t.min(), with_nans(dtype))
    check(torch.amax, with_nans(dtype))
    check(torch.amin, with_nans(dtype))
    check(lambda t: torch.aminmax(t), with_nans(dtype))
    check(torch.argmax, with_nans(dtype))
    check(torch.argmin, with_nans(dtype))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_dim_reductions_propagate_nan_and_index_first_nan(dtype, dim, keepdim):
    x = with_nans(dtype)
    check(lambda t: t.max(dim, keepdim=keepdim), x)
    check(lambda t: t.min(dim, keepdim=keepdim), x)
    check(lambda t: torch.amax(t, dim, keepdim=keepdim), x)
    check(lambda t: torch.amin(t, dim, keepdim=keepdim), x)
    check(lambda t: torch.aminmax(t, dim=dim, keepdim=keepdim), x)
    check(lambda t: torch.argmax(t, dim, keepdim=keepdim), x)
    check(lambda t: torch.argmin(t, dim, keepdim=keepdim), x)


def test_max_min_out_variants_propagate_nan():
    x = with_nans(torch.float32)

    def with_out(t):
        values = torch.empty(0, device=t.device)
        indices = torch.empty(0, dtype=torch.long, device=t.device)
        torch.max(t, 1, out=(values, indices))
        amin = torch.empty(0, device=t.device)
        torch.amin(t, 0, out=amin)
        return values, indices, amin

    check(with_out, x)


def test_integer_reductions_unchanged():
    x = torch.tensor([[3, -7, 5], [0, 9, -2]], dtype=torch.int32)
    check(lambda t: t.max(), x)
    check(lambda t: t.min(1), x)
    check(lambda t: torch.aminmax(t), x)
    check(lambda t: torch.maximum(t, t.flip(0)), x)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_sign_of_nan_and_negative_zero(dtype):
    x = torch.tensor([1.5, NAN, -2.0, 0.0, -0.0, float("inf"), -float("inf")], dtype=dtype)
    check(torch.sign, x)
    check(torch.sgn, x)
    # -0.0 and +0.0 compare equal; CPU's sign gives +0.0.
    result = torch.sign(x.to("tpu")).cpu()
    assert torch.equal(torch.signbit(result), torch.signbit(torch.sign(x)))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_clamp_with_nan_bounds_and_inputs(dtype):
    x = torch.tensor([1.0, NAN, 3.0, -4.0], dtype=dtype)
    check(lambda t: torch.clamp(t, None, NAN), x)
    check(lambda t: torch.clamp(t, NAN, None), x)
    check(lambda t: torch.clamp(t, NAN, NAN), x)
    check(lambda t: torch.clamp(t, -1.0, 2.0), x)
    check(lambda t: torch.clamp_min(t, NAN), x)
    check(lambda t: torch.clamp_max(t, 0.0), x)
    bounds = torch.tensor([NAN, 0.0, NAN, 0.0], dtype=dtype)
    check(lambda t, b: torch.clamp(t, min=b), x, bounds)
    check(lambda t, b: torch.clamp(t, max=b), x, bounds)
    check(lambda t, b: torch.clamp_min(t, b), x, bounds)
    check(lambda t, b: torch.clamp_max(t, b), x, bounds)
    check(lambda t: t.clone().clamp_(max=NAN), x)
    check(torch.relu, x)
    check(torch.nn.functional.hardtanh, x)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_binary_max_min_propagate_nan_and_fmax_fmin_ignore_it(dtype):
    a = torch.tensor([1.0, NAN, 3.0, NAN, -0.5], dtype=dtype)
    b = torch.tensor([NAN, 2.0, 1.0, NAN, 0.5], dtype=dtype)
    check(torch.maximum, a, b)
    check(torch.minimum, a, b)
    check(torch.max, a, b)
    check(torch.min, a, b)
    check(torch.fmax, a, b)
    check(torch.fmin, a, b)


@pytest.mark.filterwarnings("ignore:index_reduce")
def test_scatter_reduce_and_index_reduce_amax_propagate_nan():
    self = torch.tensor([0.0, 1.0, 2.0])
    src = torch.tensor([NAN, 5.0, -1.0, 7.0])
    index = torch.tensor([0, 0, 1, 2])
    for reduce in ("amax", "amin"):
        for include_self in (True, False):
            check(lambda s, x, i: s.scatter_reduce(0, i, x, reduce, include_self=include_self),
                  self, src, index)
            check(lambda s, x, i: s.index_reduce(0, i, x, reduce, include_self=include_self),
                  self, src, index)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + [torch.complex64])
def test_inf_and_nan_times_a_false_mask_tensor_is_nan(dtype):
    # IEEE: inf * 0 and nan * 0 are NaN. XLA rewrites x * convert(mask) into a select that gives 0.
    x = torch.tensor([float("inf"), NAN, 1.0, -float("inf"), 2.0]).to(dtype)
    mask = torch.tensor([False, False, True, False, True])
    check(torch.mul, x, mask)
    check(torch.mul, mask, x)
    check(lambda a, m: a * m + 1, x, mask)
    check(lambda a, m: torch.addcmul(a, a, m), x, mask)
    check(lambda a, m: a.clone().mul_(m), x, mask)
    check(lambda a, m: (a * m.unsqueeze(1)).sum(0), x, mask)

"""Special and elementwise math functions lowered natively, against PyTorch's CPU results:
Bessel functions (modified, and of the first and second kind), zeta/polygamma, the normal
distribution's tails, logit/entr/xlog1py, frexp, nextafter, signbit, hypot, angle, and the
backward formulas of elu/logit/log_sigmoid."""

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from conftest import assert_like_cpu, assert_same, sample

EDGES = torch.tensor([0.0, -0.0, 1e-30, -1e-30, 0.5, -0.5, 1.0, 2.0, -2.0, 7.9, 8.0, 8.5, 30.0,
                      -30.0, 100.0, float("inf"), float("-inf"), float("nan")])


def values():
    return torch.cat([EDGES, sample((200,), torch.float32) * 3])


UNARY = {
    "i0": torch.i0,
    "i0e": torch.special.i0e,
    "i1": torch.special.i1,
    "i1e": torch.special.i1e,
    "modified_bessel_i0": torch.special.modified_bessel_i0,
    "modified_bessel_i1": torch.special.modified_bessel_i1,
    "modified_bessel_k0": torch.special.modified_bessel_k0,
    "modified_bessel_k1": torch.special.modified_bessel_k1,
    "scaled_modified_bessel_k0": torch.special.scaled_modified_bessel_k0,
    "scaled_modified_bessel_k1": torch.special.scaled_modified_bessel_k1,
    "spherical_bessel_j0": torch.special.spherical_bessel_j0,
    "bessel_j0": torch.special.bessel_j0,
    "bessel_j1": torch.special.bessel_j1,
    "bessel_y0": torch.special.bessel_y0,
    "bessel_y1": torch.special.bessel_y1,
    "airy_ai": torch.special.airy_ai,
    "erfcx": torch.special.erfcx,
    "log_ndtr": torch.special.log_ndtr,
    "entr": torch.special.entr,
    "angle": torch.angle,
    "signbit": torch.signbit,
    "logit": torch.logit,
    "logit_eps": lambda x: torch.logit(x, eps=0.1),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_cpu(name):
    function = UNARY[name]
    x = values()
    if name.startswith("logit"):
        x = torch.cat([torch.rand(100), torch.tensor([0.0, 1.0, -0.5, 1.5, float("nan")])])
    torch_tpu.reset_metrics()
    assert_like_cpu(lambda d: function(x.to(d)), rtol=1e-4, atol=1e-5, equal_nan=True)
    assert torch_tpu.metrics()["fallback_ops"] == {}


def test_ndtri_matches_cpu():
    p = torch.cat([torch.rand(200), torch.tensor([0.0, 1.0, -0.1, 1.1, 1e-6, 1 - 1e-6])])
    assert_like_cpu(lambda d: torch.special.ndtri(p.to(d)), rtol=1e-4, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4])
def test_polygamma_matches_cpu(n):
    x = torch.cat([torch.linspace(-8.65, 9.35, 101), torch.tensor([0.0, -0.0, 1.0, 1e-3])])
    if n != 1:  # CPU's trigamma is finite garbage at its poles; other orders agree there
        x = torch.cat([x, torch.tensor([-1.0, -3.0])])
    assert_like_cpu(lambda d: torch.polygamma(n, x.to(d)), rtol=1e-4, atol=1e-5, equal_nan=True)


def test_zeta_matches_cpu():
    x = torch.tensor([1.0, 0.5, 1.5, 2.0, 3.0, 4.5, 10.0, 2.0, 3.0, 2.5])
    q = torch.tensor([1.0, 1.0, 0.5, 2.0, -1.5, 10.0, 0.1, -2.0, -0.5, -0.5])
    assert_like_cpu(lambda d: torch.special.zeta(x.to(d), q.to(d)), rtol=1e-4, atol=1e-5,
                    equal_nan=True)


def test_binary_functions_match_cpu():
    x, y = values(), values().flip(0)
    for function in (torch.hypot, torch.special.xlog1py, torch.nextafter):
        assert_like_cpu(lambda d: function(x.to(d), y.to(d)), rtol=1e-6, atol=0, equal_nan=True)
    # nextafter is exact in every float dtype.
    for dtype in (torch.float64, torch.bfloat16):
        assert_like_cpu(lambda d: torch.nextafter(x.to(dtype).to(d), y.to(dtype).to(d)),
                        rtol=0, atol=0, equal_nan=True)


def test_frexp_matches_cpu():
    x = torch.cat([values(), torch.tensor([1e-40, -3e-42, 3.4e38])])
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        mantissa, exponent = torch.frexp(x.to(dtype).to("tpu"))
        expected_mantissa, expected_exponent = torch.frexp(x.to(dtype))
        assert_same(mantissa, expected_mantissa, rtol=0, atol=0, equal_nan=True)
        finite = torch.isfinite(x)
        assert torch.equal(exponent.cpu()[finite], expected_exponent[finite])
    with pytest.raises(RuntimeError, match="floating-point"):
        torch.frexp(torch.arange(3, device="tpu"))


def test_activation_backwards_match_cpu():
    x = values()
    x = x[torch.isfinite(x)]  # CPU's vector and scalar paths disagree on NaN
    for make in (lambda t: F.elu(t, alpha=0.7), lambda t: F.celu(t, alpha=1.3),
                 lambda t: F.selu(t), F.logsigmoid,
                 lambda t: torch.logit(torch.sigmoid(t), eps=1e-3)):
        results = {}
        for device in ("cpu", "tpu"):
            leaf = x.to(device).detach().requires_grad_()
            make(leaf).sum().backward()
            results[device] = leaf.grad
        assert_same(results["tpu"], results["cpu"], rtol=1e-5, atol=1e-6)
    inplace = {}
    for device in ("cpu", "tpu"):
        leaf = x.to(device).detach().requires_grad_()
        F.elu(leaf * 1, inplace=True).sum().backward()  # backward through the result
        inplace[device] = leaf.grad
    assert_same(inplace["tpu"], inplace["cpu"], rtol=1e-5, atol=1e-6)


def test_bessel_dtypes_match_cpu():
    x = torch.tensor([0.0, 0.5, 4.9, 5.0, 5.1, 40.0])
    for function in (torch.special.bessel_j0, torch.special.bessel_y1):
        assert_like_cpu(lambda d: function(x.double().to(d)), rtol=1e-12, atol=1e-14)
        assert_like_cpu(lambda d: function(torch.arange(6).to(d)), rtol=1e-5, atol=1e-6)
        name = function.__name__.removeprefix("special_")
        assert_like_cpu(lambda d: function(x.bfloat16().to(d)),
                        message=f"aten::special_{name}: \"{name}_cpu\" not implemented for "
                                "'BFloat16'")


def test_airy_ai_at_its_branch_edges_matches_cpu():
    # The oscillating form below -2.09, the series up to 2.09 (-2.09 itself included), the decaying
    # form above, zero past 103.892, NaN at infinities; float64 to 1e-12.
    x = torch.tensor([-30.0, -2.09, -2.0899, 0.0, 2.0899, 2.09, 8.3203353, 103.89, 103.9,
                      float("inf"), float("-inf"), float("nan")], dtype=torch.float64)
    assert_like_cpu(lambda d: torch.special.airy_ai(x.to(d)), rtol=1e-12, atol=1e-15,
                    equal_nan=True)
    assert_like_cpu(lambda d: torch.special.airy_ai(x.float().to(d)), rtol=1e-5, atol=1e-7,
                    equal_nan=True)


def incomplete_gamma_grid(dtype):
    """(a, x) pairs reaching every method CPU picks (power series, small-x series, continued
    fraction, Temme's expansion for large a with x near a) and every boundary value."""
    inf, nan = float("inf"), float("nan")
    a = torch.tensor([0.0, 1e-3, 0.3, 0.5, 1.0, 2.5, 7.0, 19.0, 25.0, 60.0, 150.0, 250.0, 1e3,
                      3e4, inf, -1.0, nan], dtype=torch.float64)
    absolute = torch.tensor([0.0, 1e-3, 0.3, 0.5, 0.7, 1.05, 1.5, 3.0, 10.0, 30.0, inf, -1.0,
                             nan], dtype=torch.float64)
    relative = torch.tensor([0.5, 0.9, 0.99, 1.0, 1.01, 1.1, 1.5, 2.0], dtype=torch.float64)
    x = torch.cat([absolute.expand(len(a), -1), a[:, None] * relative], 1)
    return a[:, None].expand_as(x).to(dtype), x.to(dtype)


@pytest.mark.parametrize("function", [torch.igamma, torch.igammac])
def test_incomplete_gamma_matches_cpu(function):
    torch_tpu.reset_metrics()
    for dtype, tolerance in ((torch.float32, 2e-6), (torch.float64, 1e-12)):
        a, x = incomplete_gamma_grid(dtype)
        assert_like_cpu(lambda d: function(a.to(d), x.to(d)), rtol=tolerance, atol=tolerance,
                        equal_nan=True)
    a, x = incomplete_gamma_grid(torch.bfloat16)
    assert_like_cpu(lambda d: function(a.to(d), x.to(d)), equal_nan=True)
    # Broadcasting, a 0-d operand, the special-namespace alias, out= and in-place.
    a, x = sample((3, 1), torch.float32).abs(), sample((4,), torch.float32, seed=1).abs()
    assert_like_cpu(lambda d: function(a.to(d), torch.tensor(2.0, device=d)), rtol=2e-6, atol=2e-6)
    special = torch.special.gammainc if function is torch.igamma else torch.special.gammaincc
    assert_like_cpu(lambda d: special(a.to(d), x.to(d)), rtol=2e-6, atol=2e-6)
    assert_like_cpu(lambda d: function(a.to(d), x.to(d), out=torch.empty(3, 4, device=d)),
                    rtol=2e-6, atol=2e-6)
    row = sample((4,), torch.float32, seed=2).abs()
    assert_like_cpu(lambda d: getattr(row.clone().to(d), function.__name__ + "_")(x.to(d)), rtol=2e-6,
                    atol=2e-6)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    name = function.__name__
    assert_like_cpu(lambda d: function(torch.ones(2, dtype=torch.int64, device=d),
                                       torch.ones(2, dtype=torch.int64, device=d)),
                    message=f"aten::{name}: \"{name}_cpu\" not implemented for 'Long'")


@pytest.mark.parametrize("function", [torch.igamma, torch.igammac])
def test_incomplete_gamma_backward_matches_cpu(function):
    """No derivative with respect to a (CPU raises); x's is the gamma density."""
    a, x = sample((5,), torch.float32).abs() + 0.5, sample((5,), torch.float32, seed=1).abs()
    grads = {}
    for device in ("cpu", "tpu"):
        leaf = x.to(device).detach().requires_grad_()
        function(a.to(device), leaf).sum().backward()
        grads[device] = leaf.grad
    assert_same(grads["tpu"], grads["cpu"], rtol=1e-5, atol=1e-6)
    assert_like_cpu(lambda d: function(a.to(d).requires_grad_(), x.to(d)).sum().backward())

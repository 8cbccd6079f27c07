"""The orthogonal polynomials of torch.special (Chebyshev T/U/V/W and shifted, Hermite H/He,
Laguerre, Legendre) lowered natively (a stablehlo.while runs the recurrence up to the largest
degree), against PyTorch's CPU results: endpoints, the trigonometric range, negative, large and
fractional degrees, scalar operands, float64, and CPU's error for half types."""

import pytest
import torch

import torch_tpu
from conftest import assert_like_cpu

NAMES = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
         "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t",
         "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
         "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he",
         "laguerre_polynomial_l", "legendre_polynomial_p"]

# No NaN x: CPU's recurrence stops before its first step on a NaN and returns an uninitialized
# value for most families.
X = torch.tensor([-1.0, 1.0, 0.0, -0.0, 0.5, -0.5, 0.25, 0.999, -0.3, 1.5, -2.0, 3.0, 1e-9])
N = torch.tensor([-1.0, 0.0, 1.0, 2.0, 3.0, 4.5, 5.0, 7.0, 9.0, 10.0, 12.0, 20.0, 130.0])


@pytest.mark.parametrize("name", NAMES)
def test_polynomial_matches_cpu(name):
    function = getattr(torch.special, name)
    x, n = X.reshape(-1, 1).expand(-1, len(N)), N.expand(len(X), -1)
    torch_tpu.reset_metrics()
    assert_like_cpu(lambda d: function(x.to(d), n.to(d)), rtol=2e-5, atol=1e-5, equal_nan=True)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    # Python-number operands and float64.
    assert_like_cpu(lambda d: function(x.to(d), 3), rtol=2e-5, atol=1e-5, equal_nan=True)
    assert_like_cpu(lambda d: function(0.25, n.to(d)), rtol=2e-5, atol=1e-5, equal_nan=True)
    assert_like_cpu(lambda d: function(x.double().to(d), n.to(d)), rtol=1e-10, atol=1e-10,
                    equal_nan=True)


def test_polynomial_dtypes_match_cpu():
    x, n = torch.tensor([0.5, 2.0]), torch.tensor([3, 10])
    assert_like_cpu(lambda d: torch.special.legendre_polynomial_p(x.to(d), n.to(d)))
    assert_like_cpu(lambda d: torch.special.chebyshev_polynomial_t(n.to(d), n.to(d)))
    assert_like_cpu(lambda d: torch.special.hermite_polynomial_h(x.bfloat16().to(d), n.to(d)),
                    message="aten::special_hermite_polynomial_h: \"hermite_polynomial_h_cpu\" not "
                            "implemented for 'BFloat16'")

"""Complex matrices given to the decompositions that are lowered for real input only (LU, QR,
Jacobi eigh/SVD, Cholesky, triangular solves, geev) run PyTorch's CPU kernel through the counted
fallback: CPU's values, never an error claiming complex input is not allowed."""

import warnings

import pytest
import torch
import torch_tpu


def _complex_matrix(n=3, hermitian_positive=False):
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, dtype=torch.complex64, generator=generator)
    if hermitian_positive:
        a = a @ a.mH + n * torch.eye(n, dtype=torch.complex64)
    return a


CASES = {
    "det": (lambda a: torch.linalg.det(a), False),
    "inv": (lambda a: torch.linalg.inv(a), False),
    "solve": (lambda a: torch.linalg.solve(a, torch.ones_like(a)), False),
    "qr_r": (lambda a: torch.linalg.qr(a).R.abs(), False),
    "eigvalsh": (lambda a: torch.linalg.eigvalsh(a), True),
    "svdvals": (lambda a: torch.linalg.svdvals(a), False),
    "cholesky": (lambda a: torch.linalg.cholesky(a), True),
    "lu_factor": (lambda a: torch.linalg.lu_factor(a).LU, False),
    "eigvals": (lambda a: torch.linalg.eigvals(a), False),
    "solve_triangular": (lambda a: torch.linalg.solve_triangular(
        a.triu() + 3 * torch.eye(3, device=a.device), torch.ones_like(a), upper=True), False),
}


@pytest.mark.parametrize("name", CASES)
def test_complex_input_matches_cpu_through_the_counted_fallback(name):
    op, hermitian_positive = CASES[name]
    a = _complex_matrix(hermitian_positive=hermitian_positive)
    expected = op(a)
    torch_tpu.reset_metrics()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = op(a.to("tpu"))
    assert got.device.type == "tpu"
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5)
    assert torch_tpu.metrics()["fallback_ops"], "complex input should be a counted fallback"


def test_eig_backward_of_a_real_matrix():
    # The gradient solves with the complex eigenvector matrix.
    a = torch.randn(4, 4, generator=torch.Generator().manual_seed(1))

    def grad(device):
        x = a.to(device).requires_grad_()
        values, vectors = torch.linalg.eig(x)
        (values.real.sum() + vectors.abs().sum()).backward()
        return x.grad.cpu()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.testing.assert_close(grad("tpu"), grad("cpu"), rtol=1e-3, atol=1e-4)

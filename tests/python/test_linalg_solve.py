"""Cholesky, triangular solves (and the solves built on them) and the cross product, lowered
natively, against CPU; values and gradients."""

import pytest
import torch

import torch_tpu
from conftest import assert_same, sample


def spd(batch, n, seed=0):
    a = sample(batch + (n, n), torch.float32, seed=seed)
    return a @ a.mT + n * torch.eye(n)


def run_both(make, *inputs, grad=True):
    """make(*inputs) on CPU and tpu; returns {device: (outputs, input grads)}."""
    results = {}
    for device in ("cpu", "tpu"):
        leaves = [x.to(device).detach().requires_grad_(grad) for x in inputs]
        out = make(*leaves)
        outs = out if isinstance(out, tuple) else (out,)
        grads = ()
        if grad:
            total = sum((o * torch.linspace(0.5, 1.5, o.numel(), device=device).reshape(o.shape))
                        .sum() for o in outs if o.is_floating_point())
            grads = torch.autograd.grad(total, leaves)
        results[device] = (outs, grads)
    return results


def assert_both_same(results, rtol=1e-4, atol=1e-4):
    for got, expected in zip(results["tpu"][0] + results["tpu"][1],
                             results["cpu"][0] + results["cpu"][1]):
        assert_same(got, expected, rtol=rtol, atol=atol)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_matches_cpu(upper):
    a = spd((2,), 5)
    torch_tpu.reset_metrics()
    assert_both_same(run_both(lambda x: torch.linalg.cholesky(x, upper=upper), a))
    assert_both_same(run_both(lambda x: torch.linalg.cholesky_ex(x, upper=upper), a))
    assert_both_same(run_both(lambda x: torch.cholesky(x, upper=upper), a))
    assert torch_tpu.metrics()["fallback_ops"] == {}


def test_cholesky_info_flags_matrices_that_are_not_positive_definite():
    a = spd((3,), 4)
    a[1, 2, 2] = -50.0  # the third leading minor is not positive definite
    _, info = torch.linalg.cholesky_ex(a.to("tpu"))
    # Nonzero exactly where CPU's is; the order reported is the first pivot the device's
    # factorization leaves non-positive, which may precede LAPACK's.
    assert (info.cpu() != 0).tolist() == (torch.linalg.cholesky_ex(a)[1] != 0).tolist()
    assert 0 < info[1].item() <= 3
    with pytest.raises(RuntimeError, match="positive-definite"):
        torch.linalg.cholesky_ex(a.to("tpu"), check_errors=True)[0].cpu()


@pytest.mark.parametrize("upper,left,unit", [(False, True, False), (True, False, True),
                                            (True, True, False)])
def test_solve_triangular_matches_cpu(upper, left, unit):
    a = torch.linalg.cholesky(spd((2,), 4))
    a = a.mT if upper else a
    b = sample((2, 4, 3) if left else (2, 3, 4), torch.float32, seed=3)
    torch_tpu.reset_metrics()
    assert_both_same(run_both(lambda x, y: torch.linalg.solve_triangular(
        x, y, upper=upper, left=left, unitriangular=unit), a, b))
    assert torch_tpu.metrics()["fallback_ops"] == {}


def test_triangular_solve_and_cholesky_solve_match_cpu():
    factor = torch.linalg.cholesky(spd((2,), 4))
    b = sample((2, 4, 2), torch.float32, seed=2)
    for transpose in (False, True):
        assert_both_same(run_both(lambda x, y: torch.triangular_solve(
            y, x, upper=False, transpose=transpose), factor, b))
    for upper in (False, True):
        f = factor.mT if upper else factor
        assert_both_same(run_both(lambda x, y: torch.cholesky_solve(y, x, upper=upper), f, b))
        assert_both_same(run_both(lambda x: torch.cholesky_inverse(x, upper=upper), f))


def test_broadcast_batches_and_errors():
    a = torch.linalg.cholesky(spd((1,), 3))
    b = sample((4, 3, 2), torch.float32)
    assert_same(torch.linalg.solve_triangular(a.to("tpu"), b.to("tpu"), upper=False),
                torch.linalg.solve_triangular(a, b, upper=False), rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="Incompatible shapes"):
        torch.linalg.solve_triangular(a.to("tpu"), b[:, :2].to("tpu"), upper=False)
    # CPU's exception and text: its cholesky kernel lacks bfloat16.
    with pytest.raises(NotImplementedError) as raised:
        torch.linalg.cholesky(spd((), 3).bfloat16().to("tpu"))
    assert str(raised.value).splitlines()[0] == "\"cholesky_cpu\" not implemented for 'BFloat16'"


def test_cross_matches_cpu():
    a, b = sample((4, 3), torch.float32), sample((1, 3), torch.float32, seed=1)
    assert_both_same(run_both(lambda x, y: torch.linalg.cross(x, y), a, b), rtol=1e-6, atol=1e-6)
    c, d = sample((3, 5), torch.float32), sample((3, 5), torch.float32, seed=1)
    assert_both_same(run_both(lambda x, y: torch.cross(x, y, dim=0), c, d), rtol=1e-6, atol=1e-6)

"""linalg.ldl_factor(_ex) and linalg.ldl_solve (Bunch-Kaufman sweep as StableHLO loops) against
PyTorch CPU (LAPACK's sytrf/sytrs): the same pivots, LD within rounding, solutions, errors."""

import re

import pytest
import torch

import torch_tpu
from conftest import assert_same, sample


def symmetric_indefinite(n, dtype, seed):
    # A small diagonal forces 2x2 pivots; a zero matrix gives info = 1 (sytf2 goes on past it).
    m = sample((4, n, n), torch.float64, seed=seed)
    a = m + m.mT
    a[1].diagonal().mul_(0.01)
    a[2] = m[2].tril()  # only the lower triangle is read
    a[3] = 0
    return a.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ldl_factor_and_solve_match_cpu(dtype):
    a = symmetric_indefinite(5, dtype, seed=1)
    torch_tpu.reset_metrics()
    got = torch.linalg.ldl_factor_ex(a.to("tpu"))
    assert torch_tpu.metrics()["fallback_ops"] == {}
    expected = torch.linalg.ldl_factor_ex(a)
    assert (expected.pivots < 0).any()  # the samples reach 2x2 blocks
    tolerance = 1e-4 if dtype == torch.float32 else 1e-10
    assert_same(got.LD, expected.LD, rtol=tolerance, atol=tolerance)
    assert_same(got.pivots, expected.pivots, rtol=0, atol=0)
    assert_same(got.info, expected.info, rtol=0, atol=0)
    # Solve with CPU's factors (the zero matrix's are left out: its D is singular).
    ld, pivots = expected.LD[:3], expected.pivots[:3]
    b = sample((2, 1, 5, 2), dtype, seed=2)
    torch_tpu.reset_metrics()
    solution = torch.linalg.ldl_solve(ld.to("tpu"), pivots.to("tpu"), b.to("tpu"))
    assert torch_tpu.metrics()["fallback_ops"] == {}
    # CPU's own batch broadcasting in ldl_solve reads out of bounds (NaNs, or a segfault), so
    # the reference gets its inputs already broadcast.
    expected = torch.linalg.ldl_solve(ld.expand(2, 3, 5, 5).contiguous(),
                                      pivots.expand(2, 3, 5).contiguous(),
                                      b.expand(2, 3, 5, 2).contiguous())
    assert_same(solution, expected, rtol=tolerance * 10, atol=tolerance * 10)


def test_ldl_errors_match_cpu():
    eye, pivots = torch.eye(3), torch.arange(1, 4, dtype=torch.int32)
    cases = [
        (torch.linalg.ldl_factor_ex, (torch.ones(3, 2),), RuntimeError,
         "torch.linalg.ldl_factor_ex: A must be batches of square matrices, but they are 3 by 2 "
         "matrices"),
        (torch.linalg.ldl_factor_ex, (torch.ones(2, 2, dtype=torch.int64),), RuntimeError,
         "torch.linalg.ldl_factor_ex: Expected a floating point or complex tensor as input. "
         "Got Long"),
        (torch.linalg.ldl_factor_ex, (torch.ones(2, 2, dtype=torch.half),), NotImplementedError,
         "\"ldl_factor_kernel_cpu\" not implemented for 'Half'"),
        (torch.linalg.ldl_solve, (eye, pivots, torch.ones(2, 2)), RuntimeError,
         "Incompatible matrix sizes for torch.linalg.ldl_solve: each A matrix is 3 by 3 but each "
         "b matrix is 2 by 2"),
        (torch.linalg.ldl_solve, (eye, pivots[:2], torch.ones(3, 2)), RuntimeError,
         "torch.linalg.ldl_solve: Expected LD.shape[:-1] and pivots.shape to be the same, but "
         "got pivots with shape [2] instead"),
        (torch.linalg.ldl_solve, (eye, pivots.float(), torch.ones(3, 2)), RuntimeError,
         "torch.linalg.ldl_solve: Expected pivots to be integers. Got Float"),
        (torch.linalg.ldl_solve, (eye, pivots, torch.ones(3, 2, dtype=torch.float64)),
         RuntimeError, "Expected b and A to have the same dtype, but found b of type Double and "
                       "A of type Float instead."),
        (torch.linalg.ldl_solve, (eye.expand(2, 3, 3), pivots.expand(2, 3), torch.ones(3, 3, 2)),
         RuntimeError, "The size of tensor a (3) must match the size of tensor b (2) at "
                       "non-singleton dimension 0"),
    ]
    for fn, args, error, message in cases:
        for device in ("cpu", "tpu"):
            with pytest.raises(error) as info:
                fn(*(x.to(device) for x in args))
            assert str(info.value).splitlines()[0] == message
    # CPU has no message for a singular D (an internal assert); the tpu names the op.
    message = ("torch.linalg.ldl_factor_ex: The factorization could not be completed because "
               "the block diagonal matrix D is singular.")
    with pytest.raises(RuntimeError, match=re.escape(message)):
        torch.linalg.ldl_factor_ex(torch.zeros(3, 3, device="tpu"), check_errors=True).LD.cpu()

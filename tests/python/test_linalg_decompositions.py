"""LU, QR, symmetric eigendecomposition and SVD, lowered natively as StableHLO loops, against
PyTorch CPU (LAPACK): values, LAPACK's conventions (pivots, info, R's signs, eigenvalue order),
singular inputs, and the ops built on them (solve, inv, det, slogdet, pinv, matrix_rank...)."""

import pytest
import torch

import torch_tpu
from conftest import assert_same, sample


def both(fn, *inputs):
    """fn on CPU and on tpu (with no CPU fallback); returns (tpu outputs, cpu outputs) as tuples."""
    torch_tpu.reset_metrics()
    got = fn(*(x.to("tpu") for x in inputs))
    assert torch_tpu.metrics()["fallback_ops"] == {}
    expected = fn(*inputs)
    as_tuple = lambda out: tuple(out) if isinstance(out, (tuple, list)) else (out,)
    return as_tuple(got), as_tuple(expected)


def assert_all_same(fn, *inputs, rtol=1e-4, atol=1e-4):
    got, expected = both(fn, *inputs)
    for g, e in zip(got, expected, strict=True):
        if e.dtype.is_floating_point:
            assert_same(g, e, rtol=rtol, atol=atol)
        else:  # pivots and info: exactly LAPACK's
            assert_same(g, e, rtol=0, atol=0)


def assert_grads_same(loss, *inputs, tol):
    """Gradients of loss(*inputs) on tpu equal CPU's."""
    grads = {}
    for device in ("cpu", "tpu"):
        leaves = [x.to(device).requires_grad_() for x in inputs]
        grads[device] = torch.autograd.grad(loss(*leaves), leaves)
    for got, expected in zip(grads["tpu"], grads["cpu"], strict=True):
        assert_same(got, expected, rtol=tol, atol=tol)


def singular_batch():
    """Three 4x4 matrices: regular, rank 2 (repeated rows: an exact zero pivot), all zeros."""
    a = sample((3, 4, 4), torch.float32, seed=1)
    a[1, 2] = a[1, 0]
    a[1, 3] = 2 * a[1, 1]
    a[2] = 0
    return a


@pytest.mark.parametrize("shape", [(2, 3, 5, 5), (2, 6, 4), (3, 7)])
def test_lu_factor_matches_lapack(shape):
    a = sample(shape, torch.float32, seed=2)
    assert_all_same(torch.linalg.lu_factor_ex, a)
    assert_all_same(torch.linalg.lu, a)
    assert_all_same(lambda x: torch.lu_unpack(*torch.linalg.lu_factor(x)), a)


def test_lu_of_singular_matrices_reports_info_like_lapack():
    a = singular_batch()
    assert_all_same(torch.linalg.lu_factor_ex, a)
    lu, pivots, info = torch.linalg.lu_factor_ex(a.to("tpu"))
    assert info.cpu().tolist() == [0, 3, 1]
    with pytest.raises(RuntimeError, match=r"linalg\.lu_factor: \(Batch element 1\): U\[3,3\] is "
                       r"zero and using it on lu_solve would result in a division by zero"):
        torch.linalg.lu_factor(a.to("tpu"))


def test_lu_factor_ex_check_errors_raises_at_sync():
    with pytest.raises(RuntimeError, match="could not be completed because the input matrix is "
                       "singular"):
        torch.linalg.lu_factor_ex(singular_batch().to("tpu"), check_errors=True)[0].cpu()


@pytest.mark.parametrize("left,adjoint", [(True, False), (True, True), (False, False),
                                          (False, True)])
def test_lu_solve_matches_cpu(left, adjoint):
    a = sample((2, 4, 4), torch.float32, seed=3)
    rhs = sample((2, 4, 3) if left else (2, 3, 4), torch.float32, seed=4)
    assert_all_same(lambda x, y: torch.linalg.lu_solve(*torch.linalg.lu_factor(x), y, left=left,
                                                       adjoint=adjoint), a, rhs)


def test_solve_inv_det_slogdet_match_cpu():
    a = sample((2, 5, 5), torch.float64, seed=5)
    rhs = sample((2, 5, 2), torch.float64, seed=6)
    vector = sample((5,), torch.float64, seed=7)
    assert_all_same(torch.linalg.solve, a, rhs)
    assert_all_same(torch.linalg.solve, a, vector)  # NumPy's vector right-hand side
    assert_all_same(lambda x, y: torch.linalg.solve(x, y, left=False), a, rhs.mT)
    assert_all_same(torch.linalg.solve_ex, a, rhs)
    assert_all_same(torch.linalg.inv, a)
    assert_all_same(torch.linalg.inv_ex, a)
    assert_all_same(torch.linalg.det, a)
    assert_all_same(torch.linalg.slogdet, a)
    assert_all_same(torch.logdet, a @ a.mT)
    # LU and pivots that _linalg_det / _linalg_slogdet / _linalg_solve_ex return for backward.
    assert_all_same(torch.ops.aten._linalg_det, a)
    assert_all_same(torch.ops.aten._linalg_slogdet, a)
    assert_all_same(torch.ops.aten._linalg_solve_ex, a, rhs)


def test_det_and_slogdet_of_singular_matrices():
    # Exactly singular under any rounding: a zero row and a zero column keep an exact zero pivot
    # whatever the order of the updates. (A matrix that is singular only in exact arithmetic, such
    # as repeated rows under det's factorization of A^T, ends with a rounding-level pivot whose
    # value depends on the operation order: LAPACK's blocked FMA kernels differ from ours there.)
    a = singular_batch()
    a[1] = sample((4, 4), torch.float32, seed=3)
    a[1, 2] = 0
    a[1, :, 1] = 0
    assert_all_same(torch.linalg.det, a)
    assert_all_same(torch.linalg.slogdet, a)
    _, info = torch.linalg.inv_ex(a.to("tpu"))
    assert info.cpu().tolist() == torch.linalg.inv_ex(a)[1].tolist()


def test_inv_and_solve_of_singular_matrices_raise_like_cpu():
    a = singular_batch()
    with pytest.raises(RuntimeError) as cpu_error:
        torch.linalg.inv(a)
    with pytest.raises(RuntimeError) as tpu_error:
        torch.linalg.inv(a.to("tpu"))
    assert str(tpu_error.value) == str(cpu_error.value)
    rhs = sample((3, 4, 1), torch.float32)
    with pytest.raises(RuntimeError) as cpu_error:
        torch.linalg.solve(a, rhs)
    with pytest.raises(RuntimeError) as tpu_error:
        torch.linalg.solve(a.to("tpu"), rhs.to("tpu"))
    assert str(tpu_error.value) == str(cpu_error.value)


def test_lu_family_backward_matches_cpu():
    a = sample((2, 4, 4), torch.float64, seed=8)
    rhs = sample((2, 4, 2), torch.float64, seed=9)
    assert_grads_same(lambda x, y: torch.linalg.solve(x, y).sum() + torch.linalg.det(x).sum()
                      + torch.linalg.inv(x).sum() + torch.linalg.slogdet(x)[1].sum(),
                      a, rhs, tol=1e-8)


def test_det_and_slogdet_backward_of_strided_inputs():
    # CPU factors A^T for a contiguous A and A otherwise, and the backward formulas pick the
    # solve from A.is_contiguous(); a transposed view must get CPU's gradient too.
    a = sample((3, 4, 4), torch.float64, seed=19)
    assert_grads_same(lambda x: torch.linalg.det(x.mT).sum() + torch.logdet(x.mT @ x).sum()
                      + torch.linalg.slogdet(x.mT)[1].sum(), a, tol=1e-8)


@pytest.mark.parametrize("shape", [(5, 3), (2, 3, 5)])
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr_matches_lapack_signs(shape, mode):
    # Householder QR with LAPACK's beta = -sign(alpha) * norm is unique: Q and R compare directly.
    a = sample(shape, torch.float32, seed=10)
    assert_all_same(lambda x: torch.linalg.qr(x, mode=mode), a)


def test_geqrf_householder_product_and_ormqr_match_lapack():
    a = sample((2, 5, 3), torch.float64, seed=11)
    a[1, :, 1] = 0  # a zero column below the diagonal gives tau = 0 (H = I)
    assert_all_same(torch.geqrf, a)
    packed, tau = torch.geqrf(a)
    assert_all_same(torch.linalg.householder_product, packed, tau)
    assert_all_same(torch.linalg.householder_product, packed, tau[:, :2])
    c = sample((2, 5, 4), torch.float64, seed=12)
    for transpose in (False, True):
        assert_all_same(lambda x, t, y: torch.ormqr(x, t, y, left=True, transpose=transpose),
                        packed, tau, c)
        assert_all_same(lambda x, t, y: torch.ormqr(x, t, y, left=False, transpose=transpose),
                        packed, tau, c.mT.contiguous())


def test_qr_backward_matches_cpu():
    a = sample((2, 5, 3), torch.float64, seed=13)

    def loss(x):
        q, r = torch.linalg.qr(x)
        return (q * torch.arange(3.0, device=x.device)).sum() + r.sum()

    assert_grads_same(loss, a, tol=1e-8)


def symmetric(shape, dtype, seed):
    a = sample(shape, dtype, seed=seed)
    return a + a.mT


@pytest.mark.parametrize("dtype,tol,uplo", [(torch.float32, 1e-4, "L"),
                                            (torch.float64, 1e-10, "U")])
def test_eigh_matches_lapack(dtype, tol, uplo):
    a = symmetric((3, 5, 5), dtype, seed=14)
    a[0, 1, 3] += 7  # not symmetric: only the UPLO triangle may be read
    a[2] = torch.diag(torch.tensor([3.0, -1.0, 2.0, 0.0, -5.0], dtype=dtype))
    values, vectors = torch.linalg.eigh(a.to("tpu"), UPLO=uplo)
    expected_values, expected_vectors = torch.linalg.eigh(a, UPLO=uplo)
    # Eigenvalues are unique and ascending, as LAPACK's syevd orders them.
    assert_same(values, expected_values, rtol=tol, atol=tol)
    # Eigenvectors of distinct eigenvalues are unique up to sign (the math leaves the sign to the
    # implementation): compare |V| like PyTorch's OpInfo entry does, and check A V = V diag(w).
    assert_same(vectors.abs(), expected_vectors.abs(), rtol=tol * 10, atol=tol * 10)
    v = vectors.cpu()
    sym = torch.tril(a) + torch.tril(a, -1).mT if uplo == "L" else torch.triu(a) + torch.triu(a, 1).mT
    torch.testing.assert_close(sym @ v, v * values.cpu().unsqueeze(-2), rtol=tol * 10,
                               atol=tol * 10)
    assert_all_same(lambda x: torch.linalg.eigvalsh(x, UPLO=uplo), a, rtol=tol, atol=tol)


def test_eigh_backward_matches_cpu():
    a = symmetric((2, 4, 4), torch.float64, seed=15)

    def loss(x):
        w, v = torch.linalg.eigh(x)
        # A sign-invariant function of the eigenvectors, as the OpInfo entry's output_func.
        return w.sum() + (v.abs() * torch.arange(4.0, device=x.device)).sum()

    assert_grads_same(loss, a, tol=1e-7)


@pytest.mark.parametrize("shape", [(6, 4), (2, 4, 6)])
@pytest.mark.parametrize("full_matrices", [False, True])
def test_svd_matches_lapack(shape, full_matrices):
    a = sample(shape, torch.float64, seed=16)
    u, s, vh = torch.linalg.svd(a.to("tpu"), full_matrices=full_matrices)
    eu, es, evh = torch.linalg.svd(a, full_matrices=full_matrices)
    assert (u.shape, s.shape, vh.shape) == (eu.shape, es.shape, evh.shape)
    assert_same(s, es, rtol=1e-10, atol=1e-10)
    k = s.shape[-1]
    # Singular vectors of distinct singular values are unique up to a shared sign per pair, and
    # the completing columns of a full U / Vh are any orthonormal basis of the complement: compare
    # |U|, |Vh| on the first k, U Vh there, and orthonormality and A = U S Vh overall.
    assert_same(u[..., :k].abs(), eu[..., :k].abs(), rtol=1e-8, atol=1e-8)
    assert_same(vh[..., :k, :].abs(), evh[..., :k, :].abs(), rtol=1e-8, atol=1e-8)
    assert_same(u[..., :k] @ vh[..., :k, :], eu[..., :k] @ evh[..., :k, :], rtol=1e-8, atol=1e-8)
    u, vh = u.cpu(), vh.cpu()
    eye = lambda n: torch.eye(n, dtype=torch.float64).expand(u.shape[:-2] + (n, n))
    torch.testing.assert_close(u.mT @ u, eye(u.shape[-1]), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(vh @ vh.mT, eye(vh.shape[-2]), rtol=1e-10, atol=1e-10)


def test_svd_of_rank_deficient_matrices_and_the_ops_built_on_it():
    a = sample((2, 6, 4), torch.float64, seed=17)
    a[1, :, 3] = a[1, :, 0] - a[1, :, 2]  # rank 3
    u, s, vh = torch.linalg.svd(a.to("tpu"), full_matrices=True)
    assert_same(s, torch.linalg.svdvals(a), rtol=1e-10, atol=1e-10)
    u = u.cpu()
    # The null direction still gets an orthonormal left singular vector.
    torch.testing.assert_close(u.mT @ u, torch.eye(6, dtype=torch.float64).expand(2, 6, 6),
                               rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(u[..., :4] * s.cpu().unsqueeze(-2) @ vh.cpu(), a, rtol=1e-10,
                               atol=1e-10)
    assert_all_same(torch.linalg.svdvals, a, rtol=1e-10, atol=1e-10)
    assert_all_same(torch.linalg.pinv, a, rtol=1e-8, atol=1e-8)
    assert_all_same(torch.linalg.matrix_rank, a)
    assert_all_same(lambda x: torch.linalg.matrix_norm(x, ord=2), a, rtol=1e-10, atol=1e-10)
    assert_all_same(lambda x: torch.linalg.matrix_norm(x, ord="nuc"), a, rtol=1e-10, atol=1e-10)
    assert_all_same(lambda x: torch.linalg.cond(x[..., :4, :]), a[:1], rtol=1e-8, atol=1e-8)
    assert_all_same(lambda x: torch.linalg.matrix_rank(x @ x.mT, hermitian=True), a)


def test_svd_backward_matches_cpu():
    a = sample((5, 3), torch.float64, seed=18)

    def loss(x):
        u, s, vh = torch.linalg.svd(x, full_matrices=False)
        return s.sum() + (u @ vh).sum()

    assert_grads_same(loss, a, tol=1e-8)


def cpu_and_tpu_errors(fn, a):
    """(type, text) of the exception fn raises on CPU and on tpu."""
    raised = []
    for x in (a, a.to("tpu")):
        with pytest.raises(RuntimeError) as info:
            fn(x)
        raised.append((type(info.value), str(info.value).splitlines()[0]))
    return raised


LINALG_FUNCTIONS = {
    "det": torch.linalg.det, "slogdet": torch.linalg.slogdet, "inv": torch.linalg.inv,
    "solve": lambda a: torch.linalg.solve(a, torch.ones(a.shape[-1], 1, dtype=a.dtype,
                                                         device=a.device)),
    "lu_factor": torch.linalg.lu_factor, "lu": torch.linalg.lu, "qr": torch.linalg.qr,
    "eigh": torch.linalg.eigh, "svd": torch.linalg.svd, "cholesky": torch.linalg.cholesky,
}
BAD_INPUTS = {
    "not square": torch.ones(3, 4), "vector": torch.ones(3),
    "half": torch.eye(3, dtype=torch.float16), "bfloat16": torch.eye(3, dtype=torch.bfloat16),
    "int64": torch.ones(3, 3, dtype=torch.int64),
}


@pytest.mark.parametrize("name", sorted(LINALG_FUNCTIONS))
def test_bad_inputs_raise_cpus_exception_and_text(name):
    fn = LINALG_FUNCTIONS[name]
    for what, a in BAD_INPUTS.items():
        try:
            fn(a)
        except RuntimeError:
            got, expected = cpu_and_tpu_errors(fn, a)[::-1]
            assert got == expected, f"{name} on {what}"

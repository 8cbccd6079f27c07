"""linalg.eig and linalg.eigvals (LAPACK geev's path as StableHLO loops) against PyTorch CPU: the
eigenvalues in LAPACK's order, the eigenvectors up to a phase (compared by modulus, as OpInfo
does), out=, empty input, DeferAndFuse and CPU's errors. (Backward needs linalg.solve on
complex matrices, which the tpu does not lower yet.)"""

import pytest
import torch

import torch_tpu
from conftest import assert_like_cpu, assert_same, sample


def matrices(dtype):
    # Random (real and complex pairs), triangular and a permuted triangular one (gebal isolates
    # their eigenvalues), diagonal with a repeated value, a rotation (a pure complex pair), zero
    # (its back substitution divides by the smallest perturbation, smin).
    a = sample((7, 5, 5), torch.float64, seed=3)
    a[1] = a[1].triu()
    permutation = torch.tensor([3, 0, 4, 1, 2])
    a[2] = a[2].tril()[permutation][:, permutation]
    a[3] = torch.diag(torch.tensor([2.0, -1.0, 2.0, 0.5, 3.0]))
    a[4] = torch.eye(5).roll(1, 0)
    a[6] = 0
    return a.to(dtype)


def tolerance(dtype):
    return 1e-4 if dtype == torch.float32 else 1e-10


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_eig_matches_cpu(dtype):
    a = matrices(dtype)
    torch_tpu.reset_metrics()
    values, vectors = torch.linalg.eig(a.to("tpu"))
    only_values = torch.linalg.eigvals(a.to("tpu"))
    assert torch_tpu.metrics()["fallback_ops"] == {}
    expected_values, expected_vectors = torch.linalg.eig(a)
    tol = tolerance(dtype)
    assert_same(values, expected_values, rtol=tol, atol=tol)
    assert_same(only_values, expected_values, rtol=tol, atol=tol)
    assert vectors.dtype == expected_vectors.dtype and vectors.shape == expected_vectors.shape
    torch.testing.assert_close(vectors.cpu().abs(), expected_vectors.abs(), rtol=tol * 10,
                               atol=tol * 10)
    # Unit columns, and A V = V diag(w).
    v, w = vectors.cpu(), values.cpu()
    torch.testing.assert_close(torch.linalg.vector_norm(v, dim=-2),
                               torch.ones(w.shape, dtype=dtype), rtol=tol, atol=tol)
    torch.testing.assert_close(a.to(v.dtype) @ v, v * w.unsqueeze(-2), rtol=tol * 10,
                               atol=tol * 10)


def test_batched_and_empty_inputs():
    a = sample((2, 3, 4, 4), torch.float64, seed=5)
    assert_like_cpu(lambda device: torch.linalg.eigvals(a.to(device)), rtol=1e-10, atol=1e-10)
    for shape in [(0, 0), (2, 0, 0), (0, 3, 3)]:
        empty = torch.zeros(shape)
        assert_like_cpu(lambda device: torch.linalg.eig(empty.to(device))[0])
        assert_like_cpu(lambda device: torch.linalg.eig(empty.to(device))[1])
        assert_like_cpu(lambda device: torch.linalg.eigvals(empty.to(device)))


def test_out_variants():
    a = sample((3, 3), torch.float32, seed=7)
    values = torch.empty(0, dtype=torch.complex64, device="tpu")
    vectors = torch.empty(0, dtype=torch.complex64, device="tpu")
    only_values = torch.empty(0, dtype=torch.complex64, device="tpu")
    torch_tpu.reset_metrics()
    torch.linalg.eig(a.to("tpu"), out=(values, vectors))
    torch.linalg.eigvals(a.to("tpu"), out=only_values)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    expected_values, expected_vectors = torch.linalg.eig(a)
    assert_same(values, expected_values, rtol=1e-4, atol=1e-4)
    assert_same(only_values, expected_values, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(vectors.cpu().abs(), expected_vectors.abs(), rtol=1e-4, atol=1e-4)


def test_defer_and_fuse_matches_strict():
    a = sample((2, 5, 5), torch.float32, seed=13)
    expected = torch.linalg.eig(a)
    with torch_tpu.eager_mode("defer_and_fuse"):
        values, vectors = torch.linalg.eig(a.to("tpu") * 1.0)
        values, vectors = values.cpu(), vectors.cpu()
    torch.testing.assert_close(values, expected.eigenvalues, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(vectors.abs(), expected.eigenvectors.abs(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("function", [torch.linalg.eig, torch.linalg.eigvals])
def test_errors_match_cpu(function):
    first = lambda result: result[0] if isinstance(result, tuple) else result  # noqa: E731
    for bad in [torch.ones(2, 3), torch.ones(3), torch.ones(2, 2, dtype=torch.half),
                torch.ones(2, 2, dtype=torch.bfloat16), torch.ones(2, 2, dtype=torch.int64),
                torch.ones(2, 2, dtype=torch.bool)]:
        assert_like_cpu(lambda device: first(function(bad.to(device))))


def test_non_finite_input_raises():
    # CPU checks eig's input on the host; eigvals on CPU crashes in LAPACK on NaNs.
    a = torch.tensor([[1.0, float("nan")], [0.0, 1.0]])
    with pytest.raises(RuntimeError) as cpu:
        torch.linalg.eig(a)
    for function in (torch.linalg.eig, torch.linalg.eigvals):
        with pytest.raises(RuntimeError, match="input tensor should not contain infs or NaNs"):
            result = function(a.to("tpu"))
            (result[0] if isinstance(result, tuple) else result).cpu()
    assert "input tensor should not contain infs or NaNs" in str(cpu.value)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_input_runs_on_cpu(dtype):
    # zgeev is not lowered: complex input takes the explicit (counted) CPU fallback.
    a = sample((2, 3, 3), torch.float64, seed=17).to(dtype) * (1 + 0.5j)
    torch_tpu.reset_metrics()
    values, vectors = torch.linalg.eig(a.to("tpu"))
    assert "aten::linalg_eig" in torch_tpu.metrics()["fallback_ops"]
    expected_values, expected_vectors = torch.linalg.eig(a)
    assert_same(values, expected_values)
    assert_same(vectors, expected_vectors)
    assert_like_cpu(lambda device: torch.linalg.eigvals(a.to(device)))

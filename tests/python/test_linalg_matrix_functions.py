"""linalg.matrix_exp (scaling and squaring around CPU's degree-18 Taylor polynomial) and
linalg.lstsq (through the one-sided Jacobi SVD, for every LAPACK driver name) against PyTorch
CPU: values, what each driver returns, gradients, and CPU's errors."""

import pytest
import torch

import torch_tpu
from conftest import assert_same, sample


def run_both(fn, *inputs):
    torch_tpu.reset_metrics()
    got = fn(*(x.to("tpu") for x in inputs))
    assert torch_tpu.metrics()["fallback_ops"] == {}
    return got, fn(*inputs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matrix_exp_matches_cpu_across_norms(dtype):
    # Norms from below CPU's lowest Taylor degree threshold to many squarings, and 1x1 and 0x0.
    a = sample((6, 4, 4), dtype, seed=3)
    scales = torch.tensor([1e-9, 1e-3, 0.1, 0.5, 3.0, 20.0], dtype=dtype)
    a = a * scales[:, None, None]
    got, expected = run_both(torch.linalg.matrix_exp, a)
    if dtype == torch.float32:
        # Float32 squarings of large norms amplify rounding, CPU's too: on some hosts CPU's own
        # float32 result is 1.3e-4 off the float64 one. So: 1e-4 of CPU's float64 result (as
        # OpInfo allows), and as close to CPU's float32 result as two such errors allow.
        exact = torch.linalg.matrix_exp(a.double()).float()
        assert_same(got, exact, rtol=1e-4, atol=1e-6)
        assert_same(got, expected, rtol=3e-4, atol=1e-6)
    else:
        assert_same(got, expected, rtol=1e-12, atol=1e-6)
    for shape in ((3, 1, 1), (0, 0), (2, 0, 0)):
        x = sample(shape, dtype, seed=4)
        got, expected = run_both(torch.linalg.matrix_exp, x)
        assert_same(got, expected, rtol=0, atol=0)


def test_matrix_exp_backward_and_errors_match_cpu():
    a = sample((2, 3, 3), torch.float64, seed=5) / 3
    grads = {}
    for device in ("cpu", "tpu"):
        x = a.to(device, copy=True).requires_grad_()
        (torch.linalg.matrix_exp(x) * torch.arange(9.0, dtype=torch.float64, device=device)
         .reshape(3, 3)).sum().backward()
        grads[device] = x.grad
    assert_same(grads["tpu"], grads["cpu"], rtol=1e-10, atol=1e-12)
    for bad in (torch.ones(3, 4), torch.ones(3), torch.ones(2, 2, dtype=torch.int64)):
        messages = []
        for x in (bad, bad.to("tpu")):
            with pytest.raises(RuntimeError) as info:
                torch.linalg.matrix_exp(x)
            messages.append(str(info.value).splitlines()[0])
        assert messages[1] == messages[0]


def well_conditioned(shape, seed):
    generator = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(*shape[:-2], max(shape[-2:]), max(shape[-2:]),
                                       generator=generator, dtype=torch.float64))
    a = q[..., : shape[-2], : shape[-1]] * 2 + 0.1 * torch.randn(shape, generator=generator,
                                                                  dtype=torch.float64)
    return a.float()


@pytest.mark.parametrize("driver", ["gels", "gelsy", "gelsd", "gelss"])
def test_lstsq_matches_cpu_for_each_driver(driver):
    for shape in ((2, 4, 3), (3, 3), (2, 3)):
        a = well_conditioned(shape, seed=6)
        b = sample(shape[:-1] + (2,), torch.float32, seed=7)
        got, expected = run_both(lambda x, y: torch.linalg.lstsq(x, y, driver=driver), a, b)
        for g, e in zip(got, expected, strict=True):
            exact = not e.dtype.is_floating_point
            assert_same(g, e, rtol=0 if exact else 1e-4, atol=0 if exact else 1e-4)


def test_lstsq_rank_deficient_vector_case_and_errors():
    a = sample((5, 3), torch.float64, seed=8)
    a[:, 2] = a[:, 0] + a[:, 1]  # rank 2: gelsy's minimum-norm solution
    b = sample((5,), torch.float64, seed=9)
    got, expected = run_both(lambda x, y: torch.linalg.lstsq(x, y), a, b)
    for g, e in zip(got, expected, strict=True):
        assert_same(g, e, rtol=1e-9, atol=1e-9)
    for args in ((torch.ones(4, 3), torch.ones(5, 2)), (torch.ones(3), torch.ones(3)),
                 (torch.ones(4, 3), torch.ones(4, 2, dtype=torch.float64))):
        messages = []
        for device in ("cpu", "tpu"):
            with pytest.raises(RuntimeError) as info:
                torch.linalg.lstsq(*(x.to(device) for x in args))
            messages.append(str(info.value).splitlines()[0])
        assert messages[1] == messages[0]
    with pytest.raises(RuntimeError, match=r"`driver` should be one of \(gels, gelsy, gelsd"):
        torch.linalg.lstsq(a.to("tpu"), b.to("tpu"), driver="foo")
    # gels assumes full rank; an exactly singular A raises (at the next sync), as on CPU.
    singular = a.clone()
    singular[:, 2] = 0
    with pytest.raises(RuntimeError, match="torch.linalg.lstsq: The least squares solution could "
                                           "not be computed because the input matrix does not "
                                           "have full rank"):
        torch.linalg.lstsq(singular.to("tpu"), b.to("tpu"), driver="gels").solution.cpu()


def test_lstsq_backward_matches_cpu():
    a = well_conditioned((4, 3), seed=10).double()
    b = sample((4, 2), torch.float64, seed=11)
    grads = {}
    for device in ("cpu", "tpu"):
        x, y = (t.to(device, copy=True).requires_grad_() for t in (a, b))
        torch.linalg.lstsq(x, y, driver="gelsd").solution.sum().backward()
        grads[device] = (x.grad, y.grad)
    for g, e in zip(grads["tpu"], grads["cpu"], strict=True):
        assert_same(g, e, rtol=1e-8, atol=1e-10)


def test_lstsq_batch_shapes_follow_cpu():
    # `other` is a batch of vectors only when its shape is input's minus the last dim; otherwise
    # CPU broadcasts input's batch dims against as many leading dims of `other`.
    for a_shape, b_shape in (((1, 4, 3), (4, 2)), ((2, 1, 4, 2), (1, 4, 4)), ((4, 4, 3), (4, 4))):
        a = well_conditioned(a_shape, seed=12)
        b = sample(b_shape, torch.float32, seed=13)
        got, expected = run_both(lambda x, y: torch.linalg.lstsq(x, y, driver="gelsd"), a, b)
        for g, e in zip(got, expected, strict=True):
            assert_same(g, e, rtol=1e-4, atol=1e-4)
    cases = {
        ((2, 1, 4, 3), (3, 4, 2)):
            "The size of tensor a (2) must match the size of tensor b (3) at non-singleton "
            "dimension 0",
        ((5, 1, 4, 3), (5, 4, 2)):
            "The size of tensor a (4) must match the size of tensor b (5) at non-singleton "
            "dimension 1",
        ((3, 4, 3), (1, 4)): "torch.linalg.lstsq: input.size(-2) should match other.size(-2)",
        ((3, 4, 3), (4,)):
            "torch.linalg.lstsq: input.dim() must be greater or equal to other.dim() and "
            "(input.dim() - other.dim()) <= 1",
    }
    for (a_shape, b_shape), message in cases.items():
        for device in ("cpu", "tpu"):
            with pytest.raises(RuntimeError) as info:
                torch.linalg.lstsq(torch.ones(a_shape, device=device),
                                   torch.ones(b_shape, device=device))
            assert str(info.value).splitlines()[0] == message

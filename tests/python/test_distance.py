"""cdist and pdist lowered natively (forward and backward), against PyTorch's CPU results for
p = 0, 1, 2, inf and fractional/general p, broadcast batch dims, CPU's matrix-product path for
euclidean distances between many rows, empty inputs, and CPU's errors."""

import pytest
import torch

import torch_tpu
from conftest import assert_like_cpu, assert_same, sample

X1 = sample((2, 4, 3), torch.float64)
X2 = sample((1, 5, 3), torch.float64, seed=1)
X2[0, 1] = X1[0, 2]  # a zero distance: the gradient CPU defines there is zero


def gradients(make, device, *inputs):
    leaves = [x.detach().to(device).requires_grad_() for x in inputs]
    result = make(*leaves)
    result.backward(torch.linspace(-1, 1, result.numel(), dtype=result.dtype)
                    .reshape(result.shape).to(device))
    return [result] + [leaf.grad for leaf in leaves]


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, float("inf"), 0.5, 1.5, 3.0])
def test_cdist_and_pdist_match_cpu(p):
    torch_tpu.reset_metrics()
    for make, inputs in [(lambda a, b: torch.cdist(a, b, p=p), (X1, X2)),
                         (lambda a: torch.nn.functional.pdist(a, p=p), (X1[0],))]:
        cpu = gradients(make, "cpu", *inputs)
        tpu = gradients(make, "tpu", *inputs)
        for tpu_result, cpu_result in zip(tpu, cpu):
            assert_same(tpu_result, cpu_result)
    assert torch_tpu.metrics()["fallback_ops"] == {}


def test_euclidean_matrix_product_path_matches_cpu():
    # Rows apart from each other: near zero the product form's cancellation error dominates.
    many, few = sample((30, 4), torch.float32), sample((7, 4), torch.float32, seed=1) + 20
    for mode in [None, 1, 2]:
        assert_like_cpu(lambda d: torch.ops.aten._cdist_forward(many.to(d), few.to(d), 2.0, mode),
                        atol=1e-4, rtol=1e-4)


def test_empty_distances_match_cpu():
    assert_like_cpu(lambda d: torch.cdist(torch.empty(0, 3, device=d), torch.ones(2, 3, device=d)))
    assert_like_cpu(lambda d: torch.cdist(torch.ones(2, 0, device=d), torch.ones(4, 0, device=d)))
    assert_like_cpu(lambda d: torch.nn.functional.pdist(torch.ones(1, 3, device=d)))


def test_distance_errors_match_cpu():
    x = torch.ones(2, 3)
    call = torch.ops.aten._cdist_forward
    assert_like_cpu(lambda d: call(x.to(d), x.to(d), -1.0, None),
                    message="aten::_cdist_forward: cdist only supports non-negative p values")
    assert_like_cpu(lambda d: call(x.to(d), x[:, :2].to(d), 2.0, None),
                    message="aten::_cdist_forward: X1 and X2 must have the same number of "
                            "columns. X1: 3 X2: 2")
    assert_like_cpu(lambda d: call(x.bfloat16().to(d), x.bfloat16().to(d), 2.0, None),
                    message="aten::_cdist_forward: \"cdist\" not implemented for 'BFloat16'")
    assert_like_cpu(lambda d: torch.ops.aten._pdist_forward(x.bfloat16().to(d), 2.0),
                    message="aten::_pdist_forward: \"pdist\" not implemented for 'BFloat16'")

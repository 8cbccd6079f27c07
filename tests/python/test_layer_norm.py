"""native_layer_norm and its backward against PyTorch's CPU kernels: rstd as CPU rounds it
(1 / sqrt, each step rounded, not rsqrt), and the backward in CPU's formula, whose rounding shows
once rstd is large (one normalized element: rstd = 1 / sqrt(eps))."""

import pytest
import torch

import torch_tpu


def _layer_norm(x, shape, weight, bias, device):
    on = [None if t is None else t.to(device) for t in (x, weight, bias)]
    return torch.ops.aten.native_layer_norm(on[0], shape, on[1], on[2], 1e-5)


@pytest.mark.parametrize("shape,normalized", [((4, 1), (1,)), ((5, 3), (3,)),
                                              ((2, 3, 4), (3, 4))])
def test_layer_norm_forward_and_backward_match_cpu(shape, normalized):
    generator = torch.Generator().manual_seed(0)
    x, grad = torch.randn(shape, generator=generator), torch.randn(shape, generator=generator)
    weight, bias = torch.randn(normalized, generator=generator), torch.randn(normalized,
                                                                            generator=generator)
    torch_tpu.reset_metrics()
    for w in (weight, None):
        want = _layer_norm(x, normalized, w, bias, "cpu")
        got = _layer_norm(x, normalized, w, bias, "tpu")
        torch.testing.assert_close(got[0].cpu(), want[0])
        torch.testing.assert_close(got[1].cpu(), want[1])
        torch.testing.assert_close(got[2].cpu(), want[2])
        # One normalized element: no rounding in the statistics, so rstd is CPU's bit for bit.
        if normalized == (1,):
            assert torch.equal(got[2].cpu(), want[2])
            if w is not None:
                continue  # dx is rounding noise times rstd^3 (known: ulps of it differ from CPU)
        mask = [True, w is not None, True]
        expected = torch.ops.aten.native_layer_norm_backward(grad, x, normalized, want[1], want[2],
                                                             w, bias, mask)
        result = torch.ops.aten.native_layer_norm_backward(
            grad.to("tpu"), x.to("tpu"), normalized, want[1].to("tpu"), want[2].to("tpu"),
            None if w is None else w.to("tpu"), bias.to("tpu"), mask)
        for r, e in zip(result, expected):
            if e is not None:
                torch.testing.assert_close(r.cpu(), e, atol=1e-6, rtol=1e-5)
    assert torch_tpu.metrics()["fallback_ops"] == {}


def test_one_element_layer_norm_gradient_without_weight_is_cpus():
    """dx = rstd * dy + p * x + q cancels to CPU's exact result (0 or an ulp of rstd * dy)."""
    generator = torch.Generator().manual_seed(1)
    x, grad = torch.randn(64, 1, generator=generator), torch.randn(64, 1, generator=generator)
    _, mean, rstd = _layer_norm(x, (1,), None, None, "cpu")
    expected = torch.ops.aten.native_layer_norm_backward(grad, x, (1,), mean, rstd, None, None,
                                                         [True, False, False])[0]
    result = torch.ops.aten.native_layer_norm_backward(
        grad.to("tpu"), x.to("tpu"), (1,), mean.to("tpu"), rstd.to("tpu"), None, None,
        [True, False, False])[0]
    assert torch.equal(result.cpu(), expected)

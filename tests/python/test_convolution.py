"""Transposed convolution forward and backward against CPU, including output_padding at least
the stride (allowed when below the dilation): those output positions are reached by no input
position, so the input gradient must still have the input's shape."""

import pytest
import torch
import torch.nn.functional as F


@pytest.mark.parametrize("stride,padding,output_padding,dilation,groups", [
    ((2, 2), (1, 0), (1, 0), (1, 1), 1),
    ((3, 2), (1, 2), (2, 3), (4, 4), 2),
])
def test_conv_transpose2d_gradients_match_cpu(stride, padding, output_padding, dilation, groups):
    torch.manual_seed(0)
    x = torch.randn(2, 2, 4, 4, requires_grad=True)
    w = torch.randn(2, 4 // groups, 3, 5, requires_grad=True)
    b = torch.randn(4, requires_grad=True)
    tx, tw, tb = (t.detach().to("tpu").requires_grad_() for t in (x, w, b))
    kwargs = dict(stride=stride, padding=padding, output_padding=output_padding,
                  dilation=dilation, groups=groups)
    expected = F.conv_transpose2d(x, w, b, **kwargs)
    actual = F.conv_transpose2d(tx, tw, tb, **kwargs)
    torch.testing.assert_close(actual.cpu(), expected, rtol=1e-4, atol=1e-4)
    cotangent = torch.randn_like(expected)
    expected.backward(cotangent)
    actual.backward(cotangent.to("tpu"))
    for cpu, tpu in ((x, tx), (w, tw), (b, tb)):
        assert tpu.grad.shape == cpu.grad.shape
        torch.testing.assert_close(tpu.grad.cpu(), cpu.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_convolution_accumulates_in_float32_like_cpu(dtype):
    # Summing 3*3*16 products in the half type itself is off by several ulps; CPU accumulates in
    # f32 and rounds once.
    torch.manual_seed(0)
    x = torch.randn(2, 16, 6, 6).to(dtype)
    w = torch.randn(8, 16, 3, 3).to(dtype)
    b = torch.randn(8).to(dtype)
    expected = F.conv2d(x, w, b, padding=1)
    actual = F.conv2d(x.to("tpu"), w.to("tpu"), b.to("tpu"), padding=1).cpu()
    reference = F.conv2d(x.float(), w.float(), b.float(), padding=1)
    ulp = torch.finfo(dtype).eps * reference.abs().clamp_min(1.0)
    assert ((actual.float() - reference).abs() <= ulp).all()
    torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("spatial,kwargs", [
    (1, dict(stride=2, padding=1)),
    (2, dict(stride=(2, 1), padding=(1, 0), output_padding=(1, 0), dilation=(1, 2), groups=2)),
    (3, dict(stride=2, padding=1, output_padding=1)),
])
def test_float16_transposed_convolution_rounds_like_cpu(spatial, kwargs):
    """CPU's f16 transposed convolution rounds each kernel tap's channel sum to f16 (its column
    buffer) and adds the taps into the output in kernel order, each addition rounded: bit-equal.
    That is ATen's own kernel; on hosts with AVX512-FP16 CPU hands f16 convolutions to oneDNN,
    which rounds once, so the reference is computed with oneDNN off, as other hosts run it."""
    import torch_tpu

    torch.manual_seed(0)
    size = (5, 4, 3)[:spatial]
    x = torch.randn(2, 4, *size).half()
    w = torch.randn(4, 3, *(3,) * spatial).half()
    b = torch.randn(3 * kwargs.get("groups", 1)).half()
    op = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[spatial - 1]
    torch_tpu.reset_metrics()
    with torch.backends.mkldnn.flags(enabled=False):
        expected = op(x, w, b, **kwargs)
    actual = op(x.to("tpu"), w.to("tpu"), b.to("tpu"), **kwargs).cpu()
    assert torch_tpu.metrics()["fallback_ops"] == {}
    assert actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)

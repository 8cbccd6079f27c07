"""torch.fft on tpu: every function decomposes into _fft_r2c/_fft_c2r/_fft_c2c, lowered to
stablehlo.fft. Compared with PyTorch CPU forward and backward, over norm modes, signal lengths
(cropping and zero-padding), dim choices, non-contiguous inputs and transforms over more dims
than stablehlo.fft takes at once."""

import pytest
import torch
import torch_tpu

from conftest import assert_like_cpu, assert_same

TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}
X = torch.randn(3, 4, 6, generator=torch.Generator().manual_seed(0))
Z = torch.complex(X, torch.randn(3, 4, 6, generator=torch.Generator().manual_seed(1)))


@pytest.fixture(autouse=True)
def _no_cpu_fallback():
    torch_tpu.reset_metrics()
    yield
    assert torch_tpu.metrics()["fallback_ops"] == {}


CASES = {
    "fft": lambda x, z: torch.fft.fft(z),
    "fft_real_input_n_padded": lambda x, z: torch.fft.fft(x, n=9, dim=1),
    "ifft_ortho": lambda x, z: torch.fft.ifft(z, norm="ortho"),
    "ifft_forward_cropped": lambda x, z: torch.fft.ifft(z, n=3, norm="forward"),
    "rfft": lambda x, z: torch.fft.rfft(x),
    "rfft_odd_dim0": lambda x, z: torch.fft.rfft(x, dim=0),
    "irfft": lambda x, z: torch.fft.irfft(z),
    "irfft_odd_n": lambda x, z: torch.fft.irfft(z, n=7, norm="ortho"),
    "hfft": lambda x, z: torch.fft.hfft(z, n=8),
    "ihfft": lambda x, z: torch.fft.ihfft(x),
    "fft2": lambda x, z: torch.fft.fft2(z),
    "ifft2_dims_reversed": lambda x, z: torch.fft.ifft2(z, dim=(2, 0)),
    "fftn_all_dims": lambda x, z: torch.fft.fftn(z, norm="forward"),
    "rfft2": lambda x, z: torch.fft.rfft2(x),
    "irfft2": lambda x, z: torch.fft.irfft2(z, s=(4, 10)),
    "rfftn": lambda x, z: torch.fft.rfftn(x, dim=(0, 2)),
    "irfftn": lambda x, z: torch.fft.irfftn(z, norm="ortho"),
    "hfft2": lambda x, z: torch.fft.hfft2(z),
    "ihfftn": lambda x, z: torch.fft.ihfftn(x),
    "fft_transposed_input": lambda x, z: torch.fft.fft(z.transpose(0, 2)),
    "rfft_strided_input": lambda x, z: torch.fft.rfft(x[:, ::2], dim=1),
    "fftn_four_dims": lambda x, z: torch.fft.fftn(z.reshape(3, 2, 2, 6)),
    "rfftn_four_dims": lambda x, z: torch.fft.rfftn(x.reshape(3, 2, 2, 6)),
    "irfftn_four_dims": lambda x, z: torch.fft.irfftn(z.reshape(3, 2, 2, 6)),
    "fftshift_of_fft": lambda x, z: torch.fft.fftshift(torch.fft.fft(z, dim=0), dim=0),
    "rfft_double": lambda x, z: torch.fft.rfft(x.double()),
    "ifft_complex128": lambda x, z: torch.fft.ifft(z.to(torch.complex128), dim=1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward(name):
    assert_like_cpu(lambda d: CASES[name](X.to(d), Z.to(d)), **TOLERANCE)


GRADIENT_CASES = {
    "fft": ("z", lambda s: torch.fft.fft(s, norm="ortho")),
    "rfft": ("x", lambda s: torch.fft.rfft(s)),
    "irfft": ("z", lambda s: torch.fft.irfft(s, n=5)),
    "rfft2": ("x", lambda s: torch.fft.rfft2(s, norm="forward")),
    "ihfft": ("x", lambda s: torch.fft.ihfft(s)),
    "hfft": ("z", lambda s: torch.fft.hfft(s)),
    "fftn_four_dims": ("z", lambda s: torch.fft.fftn(s.reshape(3, 2, 2, 6))),
}


@pytest.mark.parametrize("name", sorted(GRADIENT_CASES))
def test_backward(name):
    which, function = GRADIENT_CASES[name]

    def gradient(device):
        signal = (X if which == "x" else Z).clone().to(device).requires_grad_()
        out = function(signal)
        weights = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).reshape(out.shape)
        loss = (out * weights.to(out.dtype).to(device)).abs().sum()
        return torch.autograd.grad(loss, signal)[0]

    assert_same(gradient("tpu"), gradient("cpu"), **TOLERANCE)


def test_view_as_real_of_rfft_round_trips_through_irfft():
    def make(d):
        spectrum = torch.fft.rfft(X.to(d))
        torch.view_as_real(spectrum)[..., 0, 1] = 0.0  # DC has no imaginary part
        torch.view_as_real(spectrum)[..., 1:, :].mul_(0.5)
        return torch.fft.irfft(spectrum, n=6)
    assert_like_cpu(make, **TOLERANCE)


def test_errors_match_cpu():
    assert_like_cpu(lambda d: torch.fft.fft(Z.to(d), dim=(0, 0)))
    assert_like_cpu(lambda d: torch.fft.rfft(Z.to(d)))
    assert_like_cpu(lambda d: torch.fft.irfft(Z.to(d), n=0))

"""Factories (arange, linspace, eye, zeros, full, tensor, empty) on the device."""

import torch

from conftest import assert_same


def test_factories_match_cpu():
    for args, kwargs in [((10,), {}), ((2, 11, 3), {}), ((0, 1, 0.1), {}), ((5, -3, -2), {}),
                         ((10,), {"dtype": torch.float32}), ((0.5, 4), {"dtype": torch.float64})]:
        assert_same(torch.arange(*args, device="tpu", **kwargs), torch.arange(*args, **kwargs))
    assert_same(torch.linspace(-2, 3, 7, device="tpu"), torch.linspace(-2, 3, 7))
    assert_same(torch.linspace(0, 10, 5, device="tpu", dtype=torch.int64),
                torch.linspace(0, 10, 5, dtype=torch.int64))
    assert_same(torch.eye(3, 4, device="tpu"), torch.eye(3, 4))
    assert_same(torch.eye(2, device="tpu", dtype=torch.bool), torch.eye(2, dtype=torch.bool))
    assert_same(torch.zeros(2, 3, device="tpu"), torch.zeros(2, 3))
    assert_same(torch.ones(4, dtype=torch.int8, device="tpu"), torch.ones(4, dtype=torch.int8))
    assert_same(torch.full((2, 2), 7, device="tpu"), torch.full((2, 2), 7))
    x = torch.randn(3, device="tpu")
    assert_same(torch.zeros_like(x), torch.zeros(3))
    assert_same(torch.full_like(x, 2.5), torch.full((3,), 2.5))
    assert_same(torch.tensor([[1, 2], [3, 4]], device="tpu"), torch.tensor([[1, 2], [3, 4]]))
    assert torch.empty(5, device="tpu").shape == (5,)
    assert torch.empty_strided((2, 3), (1, 2), device="tpu").stride() == (1, 2)


def test_efficient_zero_tensor_is_device_zeros_without_fallback():
    import torch_tpu

    before = dict(torch_tpu.metrics()["fallback_ops"])
    zeros = torch._efficientzerotensor((2, 3), dtype=torch.float64, device="tpu")
    assert zeros.device.type == "tpu" and zeros.dtype == torch.float64
    assert_same(zeros, torch.zeros(2, 3, dtype=torch.float64))
    # Autograd asks for one as sgn's gradient of real inputs.
    x = torch.tensor([0.0, 1.5, -2.0], requires_grad=True)
    tpu_x = x.detach().to("tpu").requires_grad_()
    torch.sgn(x).sum().backward()
    torch.sgn(tpu_x).sum().backward()
    assert_same(tpu_x.grad, x.grad)
    assert torch_tpu.metrics()["fallback_ops"] == before

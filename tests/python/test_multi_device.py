"""Several tpu devices (the CPU plugin with TORCH_TPU_NUM_CPU_DEVICES=2, set in conftest): storages
live on their device, ops run there, copies move data, mixing devices is an error."""

import pytest
import torch

import torch_tpu

pytestmark = pytest.mark.skipif(
    torch.tpu.device_count() < 2, reason="needs TORCH_TPU_NUM_CPU_DEVICES=2 (set by conftest)")


def test_factories_and_results_stay_on_the_requested_device():
    x = torch.ones(3, device="tpu:1")
    assert x.device == torch.device("tpu:1")
    y = torch.arange(6.0, device="tpu:1").reshape(2, 3).t()
    assert y.device == torch.device("tpu:1")
    assert (y + 1).device == torch.device("tpu:1")
    assert torch.equal((y + 1).cpu(), torch.arange(6.0).reshape(2, 3).t() + 1)
    assert torch.equal(x.cpu(), torch.ones(3))


def test_copies_between_devices():
    x = torch.randn(4, 5)
    on_one = x.to("tpu:1")
    on_zero = on_one.to("tpu:0")
    assert on_zero.device == torch.device("tpu:0")
    assert torch.equal(on_zero.cpu(), x)
    view_on_zero = torch.zeros(5, 4, device="tpu:0")
    view_on_zero.t().copy_(on_one)  # a strided destination, source on another device
    assert torch.equal(view_on_zero.cpu(), x.t())


def test_mixing_devices_is_an_error():
    a = torch.ones(3, device="tpu:0")
    b = torch.ones(3, device="tpu:1")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device, but "
                       "found at least two devices, tpu:0 and tpu:1!"):
        a + b
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        b.add_(a)
    assert torch.equal(b.cpu(), torch.ones(3))  # left intact


def test_current_device_and_guard():
    assert torch.tpu.current_device() == 0
    with torch.tpu.device(1):
        assert torch.tpu.current_device() == 1
        assert torch.zeros(2, device="tpu").device == torch.device("tpu:1")
        assert torch.randn(2, device="tpu").device == torch.device("tpu:1")
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device(1)
    try:
        assert torch.ones(2, device="tpu").device == torch.device("tpu:1")
    finally:
        torch.tpu.set_device(0)


def test_resize_keeps_the_storage_on_its_device():
    x = torch.empty(0, device="tpu:1")
    torch.arange(10, out=x)
    assert x.device == torch.device("tpu:1")
    assert x.view(2, 5).device == torch.device("tpu:1")
    assert torch.equal(x.view(2, 5).t().contiguous().cpu(), torch.arange(10).view(2, 5).t())


def test_module_and_training_step_on_the_second_device():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    reference = torch.nn.Linear(4, 3)
    reference.load_state_dict(model.state_dict())
    model = model.to("tpu:1")
    data = torch.randn(8, 4)
    for net, inputs in ((model, data.to("tpu:1")), (reference, data)):
        loss = net(inputs).square().mean()
        loss.backward()
    assert model.weight.grad.device == torch.device("tpu:1")
    torch.testing.assert_close(model.weight.grad.cpu(), reference.weight.grad)

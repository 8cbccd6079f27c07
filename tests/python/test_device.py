"""The tpu device: registration, the torch.tpu module, the getting-started snippet, clear errors for wrong devices and dtypes."""

import pytest
import torch

from conftest import run_python


SNIPPET = """
import torch
device = torch.device("tpu")
tpu_tensor = torch.ones((5, 5)).to(device)
direct_tpu_tensor = torch.randn((5, 5), device="tpu")
result_on_cpu = (tpu_tensor + direct_tpu_tensor).cpu()
print(f"Result Checksum (Sum): {result_on_cpu.sum():.4f}")
expected = (torch.ones((5, 5)) + direct_tpu_tensor.cpu()).sum()
print(f"Expected Checksum (Sum): {expected:.4f}")
"""


def test_getting_started_snippet_runs_with_import_torch_only():
    result = run_python(SNIPPET)
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(": ") for line in result.stdout.strip().splitlines()[-2:])
    assert lines["Result Checksum (Sum)"] == lines["Expected Checksum (Sum)"]
    assert "fallback" not in result.stderr


def test_device_module_mirrors_torch_cuda():
    assert torch.tpu.is_available()
    assert torch.tpu.device_count() >= 1
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device(0)
    with torch.tpu.device(0):
        assert torch.tpu.current_device() == 0
    assert "cpu" in torch.tpu.get_device_name()
    assert torch.bfloat16 in torch.tpu.get_amp_supported_dtype()
    assert torch.tpu._is_in_bad_fork() is False
    torch.tpu.synchronize()
    torch.tpu.empty_cache()
    with pytest.raises(RuntimeError, match="invalid device index 5"):
        torch.tpu.set_device(5)


def test_tensor_methods_and_properties(tpu):
    x = torch.arange(4.0).tpu()
    assert x.is_tpu and x.device == torch.device("tpu", 0)
    assert not torch.ones(1).is_tpu
    assert torch.equal(x.cpu(), torch.arange(4.0))
    storage = x.untyped_storage()
    assert storage.device.type == "tpu"


def test_mixing_devices_is_a_clear_error(tpu):
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device.*cpu tensor of shape \\[3\\]"):
        torch.ones(3, device=tpu) + torch.ones(3)


def test_unsupported_dtype_is_a_clear_error(tpu):
    with pytest.raises(TypeError, match="ComplexHalf is not supported on the tpu device"):
        torch.ones(2, dtype=torch.complex32).to(tpu) + 1

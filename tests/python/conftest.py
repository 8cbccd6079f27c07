import os
import subprocess
import sys

# Two CPU-plugin devices, so multi-device placement is tested; set before torch_tpu starts.
os.environ.setdefault("TORCH_TPU_NUM_CPU_DEVICES", "2")

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_tpu  # noqa: F401  (registers the device even when autoload is disabled)


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter (for settings read once per process)."""
    environment = {**os.environ, **env}
    return subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def tpu():
    return torch.device("tpu")


def assert_same(tpu_result: torch.Tensor, cpu_result: torch.Tensor, **tolerances):
    """A tpu result equals PyTorch's CPU result: dtype, shape and values."""
    assert tpu_result.device.type == "tpu"
    assert tpu_result.dtype == cpu_result.dtype
    assert tpu_result.shape == cpu_result.shape
    torch.testing.assert_close(tpu_result.cpu(), cpu_result, **tolerances)


def sample(shape, dtype, seed=0):
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=generator) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=generator) * 3).to(dtype)
    low = 0 if dtype == torch.uint8 else -5
    return torch.randint(low, 6, shape, generator=generator).to(dtype)

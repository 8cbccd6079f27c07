"""The PJRT runtime as Python sees it: plugin resolution, runtime_info, clear errors."""

import os
import signal
import time

import pytest
import torch

import torch_tpu
from conftest import run_python
from torch_tpu import _plugin


def test_runtime_info_describes_the_cpu_plugin():
    info = torch_tpu.runtime_info()
    assert info["platform_name"] == "cpu"
    assert info["plugin_path"].endswith("xla_cpu_pjrt.so")
    assert os.path.isfile(info["plugin_path"])
    major, minor = (int(part) for part in info["pjrt_api_version"].split("."))
    assert major == 0 and minor >= 1
    assert info["device_count"] == len(info["device_kinds"]) >= 1
    assert set(info["device_kinds"]) == {"cpu"}


def test_cpu_device_count_comes_from_the_environment():
    result = run_python(
        "import torch_tpu; print(torch_tpu.runtime_info()['device_count'])",
        TORCH_TPU_NUM_CPU_DEVICES="3",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "3"


@pytest.mark.parametrize(
    "value, expected",
    [
        ("bogus", "TORCH_TPU_PJRT_PLUGIN='bogus' is not a known plugin"),
        ("/nonexistent/plugin.so", "TORCH_TPU_PJRT_PLUGIN=/nonexistent/plugin.so: no such plugin"),
    ],
)
def test_bad_plugin_choice_is_a_runtime_error_on_first_use(value, expected):
    # Importing must still work (torch autoloads us); the device is what fails, clearly.
    result = run_python(
        "import torch_tpu\n"
        "try:\n    torch_tpu.runtime_info()\n"
        "except RuntimeError as e:\n    print('ERROR:', e)\n",
        TORCH_TPU_PJRT_PLUGIN=value,
    )
    assert result.returncode == 0, result.stderr
    assert expected in result.stdout


def test_missing_plugin_package_names_the_pip_package(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_PJRT_PLUGIN", "cuda")
    monkeypatch.setattr(_plugin, "_package_dir", lambda module: None)
    choice = _plugin.resolve()
    assert choice.path == ""
    assert "TORCH_TPU_PJRT_PLUGIN=cuda" in choice.error
    assert "pip install jax-cuda13-pjrt" in choice.error


def test_file_that_is_not_a_plugin_is_a_runtime_error(tmp_path):
    fake = tmp_path / "fake_plugin.so"
    fake.write_bytes(b"not an ELF file")
    result = run_python(
        "import torch_tpu\n"
        "try:\n    torch_tpu.runtime_info()\n"
        "except RuntimeError as e:\n    print('ERROR:', e)\n",
        TORCH_TPU_PJRT_PLUGIN=str(fake),
    )
    assert result.returncode == 0, result.stderr
    assert f"cannot load PJRT plugin {fake}" in result.stdout


def test_default_is_the_cpu_plugin_without_a_tpu(monkeypatch):
    monkeypatch.delenv("TORCH_TPU_PJRT_PLUGIN", raising=False)
    monkeypatch.delenv("TORCH_TPU_NUM_CPU_DEVICES", raising=False)
    monkeypatch.setattr(_plugin, "_tpu_visible", lambda: False)
    choice = _plugin.resolve()
    assert choice.name == "cpu" and choice.path.endswith("xla_cpu_pjrt.so")
    assert choice.create_options == {"cpu_device_count": 1}


def test_bad_cpu_device_count_is_rejected(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_NUM_CPU_DEVICES", "zero")
    choice = _plugin.resolve()
    assert choice.path == ""
    assert "TORCH_TPU_NUM_CPU_DEVICES='zero' must be a positive integer" in choice.error


def test_forked_child_gets_an_error_not_a_hang():
    # The parent's PJRT threads do not exist in a forked child; PyTorch's DataLoader workers are
    # such children, and PyTorch skips seeding a device whose module reports a bad fork.
    torch.ones(2, device="tpu").cpu()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what using tpu does, then leave without cleanup
        os.close(read)
        try:
            message = f"bad_fork={torch.tpu._is_in_bad_fork()} "
            torch.ones(2, device="tpu").cpu()
            message += "no error"
        except RuntimeError as error:
            message += str(error)
        os.write(write, message.encode())
        os._exit(0)
    os.close(write)
    deadline = time.monotonic() + 60
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            raise AssertionError("the forked child hung using tpu")
        time.sleep(0.05)
    with os.fdopen(read) as pipe:
        report = pipe.read()
    assert report.startswith("bad_fork=True torch_tpu: cannot use the tpu device in a forked "
                             "subprocess"), report
    assert torch.tpu._is_in_bad_fork() is False

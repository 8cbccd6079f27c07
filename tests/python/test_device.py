"""The tpu device: registration, the torch.tpu module, the getting-started snippet, fallback."""

import pytest
import torch

import torch_tpu
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


def test_streams_and_events_exist_for_fsdp(tpu):
    stream = torch.tpu.Stream()
    with torch.tpu.stream(stream):
        assert torch.tpu.current_stream() is stream
        y = torch.ones(3, device=tpu) * 2
    event = stream.record_event()
    torch.tpu.current_stream().wait_event(event)
    torch.tpu.current_stream().wait_stream(stream)
    event.synchronize()
    assert torch.equal(y.cpu(), torch.full((3,), 2.0))


def test_metrics_counts_compiles_and_cache_hits(tpu):
    x = torch.randn(7, 3, device=tpu)
    torch_tpu.reset_metrics()
    for alpha in (0.5, 1.5, 2.5):  # alpha is a runtime argument: one compile
        x.add(x, alpha=alpha)
    metrics = torch_tpu.metrics()
    assert metrics["execute_count"] == 3
    assert metrics["compile_count"] <= 1
    assert metrics["cache_hits_memory"] >= 2
    assert metrics["fallback_ops"] == {}
    assert "execute_count" in torch_tpu.metrics_report()


def test_metrics_lists_exactly_the_counted_counters():
    # Counters nothing increments yet (other cache tiers, fusion) stay out until something counts
    # them; a tool reading a permanent zero would be misled.
    assert set(torch_tpu.metrics()) == {
        "compile_count", "compile_seconds", "execute_count", "cache_hits_memory", "cache_misses",
        "transfer_to_device_bytes", "transfer_to_host_bytes", "fallback_ops", "donated_buffers",
        "donated_bytes"}


def test_learning_rate_changes_do_not_recompile(tpu):
    parameter = torch.randn(10, device=tpu)
    gradient = torch.randn(10, device=tpu)
    parameter.add_(gradient, alpha=-0.1)
    torch_tpu.reset_metrics()
    for lr in (0.01, 0.02, 0.03, 0.04):
        parameter.add_(gradient, alpha=-lr)
    assert torch_tpu.metrics()["compile_count"] == 0


def test_unlowered_op_falls_back_with_one_warning_and_a_count(tpu):
    x = torch.tensor([1.0, 4.0, 9.0], device=tpu)
    torch_tpu.reset_metrics()
    with pytest.warns(UserWarning, match="aten::special_entr"):
        first = torch.special.entr(x)
    second = torch.special.entr(x)
    assert first.device.type == "tpu"
    torch.testing.assert_close(second.cpu(), torch.special.entr(x.cpu()))
    assert torch_tpu.metrics()["fallback_ops"] == {"aten::special_entr.out": 2}


def test_fallback_can_be_forbidden():
    result = run_python(
        "import torch\n"
        "x = torch.ones(3, device='tpu')\n"
        "try:\n    torch.special.entr(x)\n"
        "except NotImplementedError as e:\n    print('ERROR', e)\n",
        TORCH_TPU_FALLBACK="error",
    )
    assert result.returncode == 0, result.stderr
    assert "ERROR tpu: aten::special_entr.out has no tpu lowering" in result.stdout


def test_mixing_devices_is_a_clear_error(tpu):
    with pytest.raises(RuntimeError, match="CPU tensor of shape \\[3\\]"):
        torch.ones(3, device=tpu) + torch.ones(3)


def test_unsupported_dtype_is_a_clear_error(tpu):
    with pytest.raises(TypeError, match="ComplexFloat is not supported on the tpu device"):
        torch.ones(2, dtype=torch.complex64).to(tpu) + 1

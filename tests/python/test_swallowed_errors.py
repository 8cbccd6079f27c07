"""Failures that used to vanish now say why: a plugin that cannot start (a warning, and
torch_tpu.plugin_error()), a growing-shapes family that cannot be padded and an op whose meta
kernel gives no layout (metrics with reasons), the defer_and_fuse graph run at exit (a warning)."""

import json
import os

import pytest
import torch

import torch_tpu
from conftest import assert_same, run_python

_PLUGIN_REPORT = """
import json, warnings
import torch, torch_tpu
from torch_tpu import _plugin
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    available = torch.tpu.is_available()
    count = torch.tpu.device_count()
    again = torch.tpu.is_available()
try:
    torch.ones(2, device="tpu")
    use_error = None
except RuntimeError as error:
    use_error = str(error)
print(json.dumps({"available": available, "count": count, "again": again,
                  "warnings": [str(w.message) for w in caught],
                  "categories": [w.category.__name__ for w in caught],
                  "plugin_error": torch_tpu.plugin_error(), "use_error": use_error,
                  "resolution_error": _plugin.resolve().error}))
"""


def _plugin_report(plugin: str) -> dict:
    result = run_python(_PLUGIN_REPORT, TORCH_TPU_PJRT_PLUGIN=plugin, TORCH_TPU_PRELOAD="0")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def _assert_unavailable_with(report: dict, reason: str) -> None:
    assert report["available"] is False and report["again"] is False and report["count"] == 0
    assert report["plugin_error"] == reason
    # One warning per process, at the first use, naming the reason.
    assert report["warnings"] == [
        "torch_tpu: the tpu device is unavailable (torch.tpu.is_available() is False, "
        f"device_count() is 0): {reason} (torch_tpu.plugin_error() returns this reason)"]
    assert report["categories"] == ["UserWarning"]
    # Using the device raises the same reason.
    assert report["use_error"].split("\n")[0] == reason


def test_a_missing_plugin_keeps_its_error_and_warns_once():
    report = _plugin_report("/nonexistent.so")
    assert report["resolution_error"]  # resolution itself found no file
    _assert_unavailable_with(report, report["resolution_error"])


def test_a_plugin_that_fails_to_load_keeps_its_error_and_warns_once(tmp_path):
    broken = tmp_path / "not_a_plugin.so"
    broken.write_bytes(b"not an ELF file")
    report = _plugin_report(str(broken))
    assert report["resolution_error"] == ""  # the file exists: it fails when loaded
    assert str(broken) in report["plugin_error"]
    _assert_unavailable_with(report, report["plugin_error"])


def test_a_working_plugin_has_no_error():
    assert torch_tpu.plugin_error() is None
    assert torch.tpu.is_available()


@pytest.mark.strict_mode  # growing shapes are a strict/debug launch feature
def test_a_growing_family_that_cannot_be_padded_is_counted_with_its_reason():
    # cat with a legacy empty operand (1-d, size 0) is never padded: its family keeps exact
    # programs, and says so once.
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    results = {}
    for device in ("cpu", "tpu"):
        empty = torch.zeros(0, device=device)
        grown = torch.arange(3.0, device=device).view(1, 3).expand(7, 3).contiguous()
        outputs = []
        for _ in range(6):
            grown = torch.cat([grown, grown[:, -1:] * 2], 1)
            outputs.append(torch.cat([empty, grown.view(-1)]))
        results[device] = outputs
    for tpu_output, cpu_output in zip(results["tpu"], results["cpu"]):
        assert_same(tpu_output, cpu_output)
    assert torch_tpu.metrics()["growing_shapes_disabled"] == {
        "aten::cat: cat of a legacy empty operand (1-d, size 0) is not padded": 1}


def test_an_op_without_a_meta_layout_is_counted_with_its_reason():
    # geqrf has no meta kernel, so its results are laid out contiguously where CPU's are
    # column-major: values agree, strides need not, and the metric says which op and why.
    with pytest.raises(NotImplementedError) as meta_error:
        torch.geqrf(torch.empty(5, 3, device="meta"))
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    a = torch.randn(5, 3)
    q, tau = torch.geqrf(a.to("tpu"))
    expected_q, expected_tau = torch.geqrf(a)
    torch.testing.assert_close(q.cpu(), expected_q, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(tau.cpu(), expected_tau, atol=1e-5, rtol=1e-4)
    reasons = torch_tpu.metrics()["contiguous_layout_fallbacks"]
    assert list(reasons) == [f"aten::geqrf: {str(meta_error.value).splitlines()[0]}"]


def test_the_exit_flush_warns_when_the_pending_graph_fails():
    code = """
import torch, torch_tpu
from torch_tpu import _C
x = torch.ones(4, device="tpu")
torch.tpu.synchronize()
_C._fail_storage(x, "simulated device fault")
torch_tpu.set_eager_mode("defer_and_fuse")
y = x + 1  # pending when the process exits
print("recorded")
"""
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "recorded"
    warnings = [line for line in result.stderr.splitlines() if "RuntimeWarning: " in line]
    assert len(warnings) == 1, result.stderr
    message = warnings[0].split("RuntimeWarning: ", 1)[1]
    assert message.startswith("torch_tpu: the pending defer_and_fuse graph run at exit failed: "
                              "RuntimeError: "), message
    assert message.endswith("simulated device fault"), message


def test_the_exit_flush_is_quiet_when_the_graph_succeeds():
    code = """
import torch, torch_tpu
torch_tpu.set_eager_mode("defer_and_fuse")
y = torch.ones(4, device="tpu") + 1
"""
    result = run_python(code, TORCH_TPU_DEFER_AND_FUSE=os.environ.get("TORCH_TPU_DEFER_AND_FUSE",
                                                                       "0"))
    assert result.returncode == 0 and "torch_tpu" not in result.stderr, result.stderr

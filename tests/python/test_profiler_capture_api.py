"""torch_tpu._internal.profiler: TorchTPU's trace-capture names over torch.profiler."""

import glob
import json
import os

import pytest
import torch

import torch_tpu
from torch_tpu._internal import profiler


def _work():
    a = torch.randn(6, 10)
    b = torch.randn(10, 3)
    with torch_tpu.eager_mode("strict"):  # one program per op, in any mode the suite runs in
        result = (a.to("tpu") @ b.to("tpu")).cpu()
    torch.testing.assert_close(result, a @ b)


def _device_programs(path):
    with open(path) as file:
        events = json.load(file)["traceEvents"]
    return [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]


def test_profile_writes_a_trace_with_device_work(tmp_path):
    directory = tmp_path / "traces"
    with profiler.profile(activities=[profiler.ProfilerActivity.CPU,
                                      profiler.ProfilerActivity.TPU],
                          on_trace_ready=profiler.xprof_trace_handler(directory)) as prof:
        _work()
    (path,) = glob.glob(os.path.join(directory, "*.pt.trace.json"))
    assert "aten::mm" in {e["name"] for e in _device_programs(path)}
    assert prof.key_averages() is not None


def test_start_and_stop_trace(tmp_path):
    profiler.start_trace(tmp_path)
    with pytest.raises(RuntimeError) as error:
        profiler.start_trace(tmp_path)
    assert str(error.value) == (f"a trace into {tmp_path} is already being recorded; "
                                "call stop_trace() first")
    _work()
    path = profiler.stop_trace()
    assert os.path.dirname(path) == str(tmp_path)
    assert "aten::mm" in {e["name"] for e in _device_programs(path)}
    with pytest.raises(RuntimeError) as error:
        profiler.stop_trace()
    assert str(error.value) == "stop_trace() without start_trace()"


def test_refusals():
    with pytest.raises(ValueError) as error:
        with profiler.profile(activities=[profiler.ProfilerActivity.GPU],
                              on_trace_ready=profiler.xprof_trace_handler("/tmp")):
            pass
    assert str(error.value) == ("ProfilerActivity.GPU is not supported on tpu: "
                                "use ProfilerActivity.TPU for device work")
    with pytest.raises(ValueError) as error:
        with profiler.profile():
            pass
    assert str(error.value) == ("profile() needs on_trace_ready, "
                                "e.g. xprof_trace_handler('/tmp/traces')")

"""torch.tpu's torch.cuda-shaped device API beyond the basics (properties, capability, streams,
feature checks, host memory) and torch.accelerator on tpu, compared with what torch.cuda's
documentation promises for the same calls."""

import threading

import pytest
import torch

import torch_tpu
from conftest import run_python


def test_every_name_in_all_exists():
    missing = [name for name in torch.tpu.__all__ if not hasattr(torch.tpu, name)]
    assert missing == []


def test_device_properties_have_torch_cuda_fields(tpu):
    props = torch.tpu.get_device_properties(0)
    # The fields torch.cuda's _CudaDeviceProperties has and memory helpers read.
    assert isinstance(props.name, str) and props.name == torch.tpu.get_device_name(0)
    assert isinstance(props.total_memory, int)
    assert props.total_memory == torch.tpu.mem_get_info(0)[1] > 0
    assert (props.major, props.minor) == torch.tpu.get_device_capability(0)
    assert isinstance(props.multi_processor_count, int) and props.multi_processor_count >= 1
    # What the PJRT plugin reports.
    info = torch_tpu.runtime_info()
    assert props.device_kind == info["device_kinds"][0]
    assert props.platform_name == info["platform_name"]
    assert props.platform_version == info["platform_version"]
    assert props.process_index == 0
    assert 1 <= props.chip_count <= torch.tpu.device_count()
    assert isinstance(props.attributes, dict) and isinstance(props.memory_stats, dict)
    assert props.memory_kinds and all(isinstance(kind, str) for kind in props.memory_kinds)
    assert "total_memory=" in repr(props) and props.name in repr(props)
    if props.memory_stats:  # plugins with PJRT_Device_MemoryStats report a limit
        assert props.memory_stats["bytes_limit"] == props.total_memory


def test_device_properties_take_every_device_spelling(tpu):
    count = torch.tpu.device_count()
    ids = {torch.tpu.get_device_properties(i).id for i in range(count)}
    assert len(ids) == count
    assert torch.tpu.get_device_properties() == torch.tpu.get_device_properties(0)
    assert torch.tpu.get_device_properties("tpu") == torch.tpu.get_device_properties(0)
    last = torch.device("tpu", count - 1)
    assert torch.tpu.get_device_properties(last).id == torch.tpu.get_device_properties(
        count - 1).id
    with pytest.raises(ValueError, match=r"^expected a tpu device, got cpu$"):
        torch.tpu.get_device_properties("cpu")


def test_device_capability_on_the_cpu_plugin_is_zero(tpu):
    if torch_tpu.runtime_info()["platform_name"] != "cpu":
        pytest.skip("the XLA CPU plugin's capability")
    assert torch.tpu.get_device_capability() == (0, 0)
    assert torch.tpu.get_arch_list() == ["cpu"]


def test_arch_list_names_the_device_kinds(tpu):
    assert torch.tpu.get_arch_list() == sorted(set(torch_tpu.runtime_info()["device_kinds"]))


def test_feature_checks(tpu):
    assert torch.tpu.is_bf16_supported() is True
    assert torch.tpu.is_bf16_supported(including_emulation=False) is True
    assert torch.tpu.is_tf32_supported() is False
    a = torch.randn(4, 4, dtype=torch.bfloat16)
    torch.testing.assert_close((a.to(tpu) @ a.to(tpu)).cpu(), a @ a)
    assert torch.tpu.has_half is True
    assert torch.tpu.OutOfMemoryError is torch.OutOfMemoryError
    assert torch.tpu.is_current_stream_capturing() is False


def test_monitoring_calls_without_pjrt_counters_raise(tpu):
    for name in ["utilization", "temperature", "power_draw", "clock_rate", "memory_usage"]:
        words = name.replace("_", " ")
        with pytest.raises(RuntimeError, match=rf"^torch\.tpu\.{name}: the PJRT plugin reports no "
                                               rf"{words} counter \(torch\.cuda reads it from "
                                               r"NVML\)$"):
            getattr(torch.tpu, name)()


def test_init_ipc_collect_and_peer_access(tpu):
    torch.tpu.init()
    assert torch.tpu.is_initialized()
    torch.tpu.ipc_collect()
    count = torch.tpu.device_count()
    assert torch.tpu.can_device_access_peer(0, count - 1)
    assert not torch.tpu.can_device_access_peer(0, count)


def test_initialized_flag_is_torch_cudas():
    # torch.cuda._initialized: false until the process uses the device, then true (what
    # torch.utils.checkpoint reads before stashing the device's RNG state).
    result = run_python(
        "import torch, torch_tpu\n"
        "before = torch.tpu._initialized\n"
        "torch.ones(1, device='tpu')\n"
        "print(before, torch.tpu._initialized, torch.tpu.is_initialized())\n")
    assert result.stdout.split() == ["False", "True", "True"], result.stderr[-2000:]


def test_device_of_switches_to_the_tensors_device(tpu):
    last = torch.tpu.device_count() - 1
    x = torch.ones(2, device=torch.device("tpu", last))
    assert torch.tpu.current_device() == 0
    with torch.tpu.device_of(x):
        assert torch.tpu.current_device() == last
    assert torch.tpu.current_device() == 0
    with torch.tpu.device_of(torch.ones(2)):  # not on tpu: no change
        assert torch.tpu.current_device() == 0


def test_set_stream_is_what_every_api_reads(tpu):
    default = torch.tpu.default_stream()
    assert default.stream_id == 0 and torch.tpu.current_stream() == default
    s = torch.tpu.Stream()
    torch.tpu.set_stream(s)
    try:
        assert torch.tpu.current_stream() is s
        assert torch.accelerator.current_stream() == s
        assert torch.tpu.current_stream(0) is s
        # Another thread has its own current stream, the default.
        seen = []
        thread = threading.Thread(target=lambda: seen.append(torch.tpu.current_stream()))
        thread.start()
        thread.join()
        assert seen == [default]
        y = torch.ones(3, device=tpu) * 2
        assert torch.equal(y.cpu(), torch.full((3,), 2.0))
    finally:
        torch.tpu.set_stream(default)
    assert torch.tpu.current_stream() == default
    torch.tpu.set_stream(None)  # a no-op, as torch.cuda.set_stream(None)
    assert torch.tpu.current_stream() == default


def test_stream_context_restores_and_takes_none(tpu):
    s = torch.tpu.Stream()
    context = torch.tpu.stream(s)
    assert isinstance(context, torch.tpu.StreamContext)
    with context:
        assert torch.tpu.current_stream() is s
        with torch.tpu.StreamContext(None):
            assert torch.tpu.current_stream() is s
    assert torch.tpu.current_stream() == torch.tpu.default_stream()
    with s:  # torch.Stream's own context goes through the same current stream
        assert torch.tpu.current_stream() is s
    assert torch.tpu.current_stream() == torch.tpu.default_stream()


def test_a_stream_on_another_device_is_current_there(tpu):
    last = torch.tpu.device_count() - 1
    s = torch.tpu.Stream(device=last)
    assert s.device == torch.device("tpu", last)
    with torch.tpu.stream(s):
        assert torch.tpu.current_stream(last) is s
    assert torch.tpu.current_device() == 0
    assert torch.tpu.current_stream(last).stream_id == 0


def test_device_generic_stream_without_index_is_on_the_current_device(tpu):
    assert torch.Stream("tpu").device_index == torch.tpu.current_device()


def test_torch_accelerator_calls_work_on_tpu(tpu):
    torch_tpu.reset_metrics()  # counts this test's ops only (the worker ran other files before)
    accelerator = torch.accelerator
    assert accelerator.current_accelerator() == torch.device("tpu")
    assert accelerator.is_available()
    assert accelerator.device_count() == torch.tpu.device_count()
    assert accelerator.current_device_index() == torch.tpu.current_device()
    x = torch.ones(1024, device=tpu) + 1
    accelerator.synchronize()
    assert accelerator.memory_allocated() == torch.tpu.memory_allocated()
    assert accelerator.max_memory_allocated() == torch.tpu.max_memory_allocated()
    assert accelerator.memory_reserved() == torch.tpu.memory_reserved()
    assert accelerator.memory_stats()["allocated_bytes.all.current"] == \
        torch.tpu.memory_allocated()
    total = accelerator.get_memory_info()[1]
    assert total == torch.tpu.mem_get_info()[1]
    accelerator.reset_peak_memory_stats()
    accelerator.reset_accumulated_memory_stats()
    accelerator.empty_cache()
    accelerator.empty_host_cache()
    dtypes = accelerator.get_device_capability()["supported_dtypes"]
    assert {torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool,
            torch.complex64} <= dtypes
    assert torch.qint8 not in dtypes and torch.complex32 not in dtypes
    with accelerator.device_index(torch.tpu.device_count() - 1):
        assert torch.tpu.current_device() == torch.tpu.device_count() - 1
    assert torch.tpu.current_device() == 0
    s = torch.tpu.Stream()
    accelerator.set_stream(s)
    assert torch.tpu.current_stream() is s
    accelerator.set_stream(torch.tpu.default_stream())
    assert torch.equal(x.cpu(), torch.full((1024,), 2.0))
    assert torch_tpu.metrics()["fallback_ops"] == {}


def test_host_memory_stats_count_pinned_memory(tpu):
    torch.tpu.reset_peak_host_memory_stats()
    before = torch.tpu.host_memory_stats()
    pinned = torch.ones(1000).pin_memory()
    assert pinned.is_pinned()
    during = torch.tpu.host_memory_stats()
    assert during["allocated_bytes.current"] == before["allocated_bytes.current"] + 4000
    assert during["allocations.current"] == before["allocations.current"] + 1
    assert during["num_host_alloc"] == before["num_host_alloc"] + 1
    del pinned
    after = torch.tpu.host_memory_stats()
    assert after["allocated_bytes.current"] == before["allocated_bytes.current"]
    assert after["allocated_bytes.peak"] >= before["allocated_bytes.current"] + 4000
    assert after["num_host_free"] == before["num_host_free"] + 1
    torch.tpu.reset_peak_host_memory_stats()
    assert torch.tpu.host_memory_stats()["allocated_bytes.peak"] == after["allocated_bytes.current"]


def test_memory_aliases_and_nested_stats(tpu):
    x = torch.ones(256, device=tpu) * 3
    x.cpu()
    assert torch.tpu.memory_cached() == torch.tpu.memory_reserved()
    assert torch.tpu.max_memory_cached() == torch.tpu.max_memory_reserved()
    flat = torch.tpu.memory_stats()
    nested = torch.tpu.memory_stats_as_nested_dict()
    assert nested["allocated_bytes"]["all"]["current"] == flat["allocated_bytes.all.current"]
    assert nested["num_ooms"] == flat["num_ooms"]

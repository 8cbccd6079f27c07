"""Device memory: torch.tpu.memory_* and torch.accelerator.memory_* from the PJRT buffers alive,
out-of-memory errors, and the capacity the device reports."""

import re

import pytest
import torch

import torch_tpu  # noqa: F401

MIB = 1 << 20

POOLS = ("all", "small_pool", "large_pool")
METRICS = ("current", "peak", "allocated", "freed")
STAT_ARRAYS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes",
               "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes")


# No garbage from earlier tests may be freed while a test measures memory deltas.
pytestmark = pytest.mark.usefixtures("quiet_collector")


def nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def allocated() -> int:
    return torch.tpu.memory_allocated()


def test_allocated_counts_the_buffers_of_live_tensors(tpu):
    before = allocated()
    x = torch.zeros(1024, device=tpu)
    assert allocated() - before == nbytes(torch.zeros(1024))
    y = torch.ones(256, 256, dtype=torch.float64, device=tpu)
    assert allocated() - before == nbytes(torch.zeros(1024)) + nbytes(torch.ones(256, 256,
                                                                                  dtype=torch.float64))
    del x
    assert allocated() - before == nbytes(torch.ones(256, 256, dtype=torch.float64))
    del y
    assert allocated() == before


def test_memory_statistics_track_live_storages(tpu):
    torch.tpu.reset_peak_memory_stats()
    before = allocated()
    x = torch.full((1024,), 3.0, device=tpu)
    assert allocated() - before == 4096
    assert torch.tpu.max_memory_allocated() >= before + 4096
    del x
    assert allocated() == before


def test_views_share_the_buffer_and_clones_do_not(tpu):
    x = torch.randn(64, 64, device=tpu)
    before = allocated()
    view = x.t()[3:, :7]
    assert allocated() == before
    copy = view.clone()
    assert allocated() - before == nbytes(view.cpu().clone())
    del copy, view


def test_an_unwritten_storage_is_requested_but_holds_no_buffer(tpu):
    stats = torch.tpu.memory_stats()
    x = torch.empty(1000, device=tpu)
    now = torch.tpu.memory_stats()
    assert now["requested_bytes.all.current"] - stats["requested_bytes.all.current"] == 4000
    assert now["allocated_bytes.all.current"] == stats["allocated_bytes.all.current"]
    x.fill_(2.0)
    assert allocated() - stats["allocated_bytes.all.current"] == 4000
    del x
    assert torch.tpu.memory_stats()["requested_bytes.all.current"] == \
        stats["requested_bytes.all.current"]


def test_peak_includes_the_result_of_an_out_of_place_op(tpu):
    x = torch.randn(4 * MIB // 4, device=tpu)
    torch.tpu.reset_peak_memory_stats()
    before = allocated()
    assert torch.tpu.max_memory_allocated() == before
    y = x * 2
    assert torch.tpu.max_memory_allocated() - before == nbytes(x)
    del y
    assert allocated() == before
    assert torch.tpu.max_memory_allocated() - before == nbytes(x)
    torch.tpu.reset_max_memory_allocated()
    assert torch.tpu.max_memory_allocated() == before


def test_peak_of_a_donated_in_place_write_is_the_tensor_itself(tpu):
    x = torch.zeros(MIB, device=tpu)
    torch.tpu.synchronize()  # the CPU plugin donates buffers whose producer has finished
    torch.tpu.reset_peak_memory_stats()
    before = allocated()
    x.add_(1)
    # The old buffer is donated to the program that replaces it: no second buffer at any time.
    peak = torch.tpu.max_memory_allocated() - before
    assert peak == 0
    assert allocated() == before
    torch.testing.assert_close(x.cpu(), torch.zeros(MIB).add_(1))


def test_memory_stats_use_pytorch_names_and_count_buffers_per_pool(tpu):
    stats = torch.tpu.memory_stats()
    expected = {f"{name}.{pool}.{metric}" for name in STAT_ARRAYS for pool in POOLS
                for metric in METRICS}
    expected |= {f"oversize_{kind}.{metric}" for kind in ("allocations", "segments")
                 for metric in METRICS}
    expected |= {"max_split_size", "num_alloc_retries", "num_ooms", "num_sync_all_streams",
                 "num_device_alloc", "num_device_free"}
    # Ours, beyond CUDA's: the most temporaries one program run held, and the process's limit.
    expected |= {"program_temporary_bytes.all.peak", "memory_limit_bytes"}
    assert set(stats) == expected
    small = torch.ones(10, device=tpu)
    large = torch.ones(MIB, device=tpu)  # 4 MiB: the large pool starts at 1 MiB, as in PyTorch
    now = torch.tpu.memory_stats()
    delta = {key: now[key] - stats[key] for key in stats}
    assert delta["allocation.all.current"] == 2
    assert delta["allocation.small_pool.current"] == 1
    assert delta["allocation.large_pool.current"] == 1
    assert delta["allocated_bytes.small_pool.current"] == nbytes(small)
    assert delta["allocated_bytes.large_pool.current"] == nbytes(large)
    assert delta["num_device_alloc"] == 2
    # Nothing is cached: reserved and active memory are the allocated memory.
    for name in ("reserved_bytes", "active_bytes"):
        assert now[f"{name}.all.current"] == now["allocated_bytes.all.current"]
    assert torch.tpu.memory_reserved() == allocated()
    assert torch.tpu.max_memory_reserved() == now["reserved_bytes.all.peak"]
    del small, large
    after = torch.tpu.memory_stats()
    assert after["num_device_free"] - now["num_device_free"] == 2
    assert after["allocated_bytes.all.freed"] - now["allocated_bytes.all.freed"] == 4 * (MIB + 10)


def test_reset_accumulated_memory_stats_zeroes_totals(tpu):
    x = torch.ones(100, device=tpu)
    torch.tpu.reset_accumulated_memory_stats()
    stats = torch.tpu.memory_stats()
    assert stats["allocated_bytes.all.allocated"] == 0
    assert stats["allocated_bytes.all.freed"] == 0
    assert stats["num_device_alloc"] == 0
    assert stats["allocated_bytes.all.current"] >= nbytes(x)
    del x


def test_empty_cache_keeps_live_tensors(tpu):
    x = torch.arange(10.0, device=tpu)
    before = allocated()
    torch.tpu.empty_cache()
    assert allocated() == before
    assert torch.equal(x.cpu(), torch.arange(10.0))


def test_memory_summary_shows_the_statistics(tpu):
    x = torch.ones(3 * MIB, dtype=torch.uint8, device=tpu)
    summary = torch.tpu.memory_summary()
    stats = torch.tpu.memory_stats()
    buffers = next(line for line in summary.splitlines() if line.startswith("Device buffers"))
    assert buffers.split()[2:] == [str(stats[f"allocation.all.{metric}"]) for metric in METRICS]
    assert summary.splitlines()[0].startswith("tpu:0 memory")
    assert "from large pool" in summary
    assert "from large pool" not in torch.tpu.memory_summary(abbreviated=True)
    del x


def host_memory_bytes(field: str) -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(field)


def test_mem_get_info_reports_host_memory_on_the_cpu_plugin(tpu):
    if "cpu" not in torch.tpu.get_device_name().lower():
        pytest.skip("the CPU plugin's capacity is host memory")
    free, total = torch.tpu.mem_get_info()
    assert total == host_memory_bytes("MemTotal")
    assert 0 < free <= total


def test_torch_accelerator_memory_api(tpu):
    assert torch.accelerator.current_accelerator().type == "tpu"
    x = torch.zeros(2048, device=tpu)
    assert torch.accelerator.memory_allocated() == allocated()
    before = torch.accelerator.memory_allocated()
    y = torch.ones(4096, device=tpu)
    assert torch.accelerator.memory_allocated() - before == nbytes(y)
    assert torch.accelerator.max_memory_allocated() >= before + nbytes(y)
    assert torch.accelerator.memory_reserved() == torch.tpu.memory_reserved()
    stats = torch.accelerator.memory_stats()
    assert stats["allocated_bytes.all.current"] == allocated()
    ours = torch.tpu.memory_stats()
    # torch.tpu's statistics are the allocator's plus two of ours (test above).
    assert set(ours) - set(stats) == {"program_temporary_bytes.all.peak", "memory_limit_bytes"}
    assert {key: value for key, value in stats.items()} == {key: ours[key] for key in stats}
    del y
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == allocated()
    torch.accelerator.reset_accumulated_memory_stats()
    assert torch.accelerator.memory_stats()["allocated_bytes.all.allocated"] == 0
    free, total = torch.accelerator.get_memory_info()
    assert total == torch.tpu.mem_get_info()[1]
    assert 0 < free <= total
    torch.accelerator.empty_cache()
    assert torch.equal(x.cpu(), torch.zeros(2048))


def oom_message(nbytes_requested: int) -> str:
    unit = "PiB" if nbytes_requested >= 2**50 else "TiB"
    human = f"{nbytes_requested / 2**(50 if unit == 'PiB' else 40):.2f} {unit}"
    return (rf"^tpu out of memory: tried to allocate {re.escape(human)} \({nbytes_requested} "
            r"bytes\) on tpu:0, which has \d+(\.\d\d)? (bytes|KiB|MiB|GiB|TiB) free of "
            r"\d+(\.\d\d)? (bytes|KiB|MiB|GiB|TiB) of (host memory \(the plugin's buffers live in "
            r"host RAM\)|device memory); tpu tensors hold \d+(\.\d\d)? (bytes|KiB|MiB|GiB|TiB)\."
            # What holds memory follows on lines of its own (test_memory_limit.py checks them).
            r"(\n.*)*$")


@pytest.mark.strict_mode  # bit-for-bit after the error: fusion may contract a multiply-add
@pytest.mark.parametrize("factory", [torch.empty, torch.zeros, torch.ones])
def test_allocating_more_than_the_device_has_raises_out_of_memory(tpu, factory):
    ooms = torch.tpu.memory_stats()["num_ooms"]
    with pytest.raises(torch.OutOfMemoryError, match=oom_message(4 * 10**12)):
        factory(10**12, device=tpu)
    assert torch.tpu.memory_stats()["num_ooms"] == ooms + 1
    # The device stays usable.
    a = torch.randn(5, 7)
    assert torch.equal((a.to(tpu) * 3 + 1).cpu(), a * 3 + 1)


def test_out_of_memory_names_the_element_size_and_is_a_runtime_error(tpu):
    with pytest.raises(RuntimeError, match=oom_message(8 * 10**12)):
        torch.empty(10**6, 10**6, dtype=torch.float64, device=tpu)
    assert issubclass(torch.OutOfMemoryError, RuntimeError)


def test_resizing_beyond_the_device_raises_out_of_memory(tpu):
    x = torch.arange(4.0, device=tpu)
    # 4 PB: more than any host can map, so the CPU refuses it too, overcommit or not.
    with pytest.raises(torch.OutOfMemoryError, match=oom_message(4 * 10**15)):
        x.resize_(10**15)
    # As on the CPU, the failed resize leaves the sizes set and the storage as it was.
    cpu = torch.arange(4.0)
    with pytest.raises(RuntimeError):
        cpu.resize_(10**15)
    assert x.shape == cpu.shape
    assert x.untyped_storage().nbytes() == cpu.untyped_storage().nbytes()
    y = torch.arange(4.0, device=tpu)
    assert torch.equal((y + 1).cpu(), torch.arange(4.0) + 1)


def test_allocations_that_fit_are_not_refused(tpu):
    free, _ = torch.tpu.mem_get_info()
    size = min(64 * MIB, free // 4)  # well above the size from which capacity is checked
    x = torch.ones(size, dtype=torch.uint8, device=tpu)
    assert x.sum().item() == size

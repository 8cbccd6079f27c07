"""torch.tpu streams and events: ordering and host-timed events."""

import time

import pytest
import torch

import torch_tpu


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


def test_timed_events_measure_host_time_between_records(tpu):
    start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    before = time.perf_counter()
    start.record()
    time.sleep(0.05)
    end.record()
    measured = (time.perf_counter() - before) * 1000
    elapsed = start.elapsed_time(end)
    assert 50 <= elapsed <= measured
    assert end.elapsed_time(start) == pytest.approx(-elapsed)


def test_a_timed_event_completes_after_the_work_launched_before_it(tpu):
    a = torch.randn(768, 768)
    x = a.to(tpu)
    start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    start.record()
    for _ in range(4):
        x = x @ x / 768
    end.record(torch.tpu.current_stream())
    # The stamp is taken once the matmuls are done: their result is ready without waiting.
    assert torch_tpu._C._is_ready(x)
    assert end.query()
    assert start.elapsed_time(end) > 0
    expected = a
    for _ in range(4):
        expected = expected @ expected / 768
    torch.testing.assert_close(x.cpu(), expected, rtol=1e-3, atol=1e-3)


def test_device_generic_torch_event_times_like_torch_tpu_event(tpu):
    # torch.Event / torch.accelerator code paths go through the device guard, not torch.tpu.
    a = torch.randn(512, 512)
    x = a.to(tpu)
    start, end = torch.Event("tpu", enable_timing=True), torch.Event("tpu", enable_timing=True)
    before = time.perf_counter()
    start.record()
    for _ in range(3):
        x = x @ x / 512
    time.sleep(0.02)
    end.record()
    measured = (time.perf_counter() - before) * 1000
    assert torch_tpu._C._is_ready(x)
    assert 20 <= start.elapsed_time(end) <= measured
    assert end.query()
    expected = a
    for _ in range(3):
        expected = expected @ expected / 512
    torch.testing.assert_close(x.cpu(), expected, rtol=1e-3, atol=1e-3)
    untimed = torch.Event("tpu")
    untimed.record()
    with pytest.raises(ValueError, match="enable_timing=True"):
        untimed.elapsed_time(end)


def test_stream_record_event_times_too(tpu):
    stream = torch.tpu.Stream()
    start = stream.record_event(torch.tpu.Event(enable_timing=True))
    end = stream.record_event(torch.tpu.Event(enable_timing=True))
    assert start.elapsed_time(end) >= 0


def test_elapsed_time_needs_timing_and_records(tpu):
    untimed, timed = torch.tpu.Event(), torch.tpu.Event(enable_timing=True)
    untimed.record()
    timed.record()
    with pytest.raises(RuntimeError, match=r"^tpu Event.elapsed_time: both events must be created "
                                           r"with enable_timing=True$"):
        untimed.elapsed_time(timed)
    with pytest.raises(RuntimeError, match=r"^tpu Event.elapsed_time: both events must be "
                                           r"recorded first$"):
        timed.elapsed_time(torch.tpu.Event(enable_timing=True))


def test_a_timed_record_raises_pending_device_errors(tpu):
    x = torch.ones(4, device=tpu)
    torch_tpu._C._fail_storage(x, "injected device fault")
    y = x + 1
    with pytest.raises(RuntimeError, match="injected device fault"):
        torch.tpu.Event(enable_timing=True).record()
    del y
    assert torch.equal((torch.ones(2, device=tpu) * 2).cpu(), torch.full((2,), 2.0))

"""Streams and events of ``torch.tpu`` (re-exported there).

Device work is ordered by its data dependencies (PJRT buffers), so work on different streams is
already correctly ordered; streams scope work for APIs that expect them. The current stream of a
thread and device lives in the device guard (C++), the one ``torch.accelerator.current_stream``,
``torch.Stream.__enter__`` and ``torch.tpu.current_stream`` all read, so every API agrees.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import torch

from torch_tpu import _C
from torch_tpu import tpu as _tpu  # device helpers; read at call time (tpu.py imports this file)

__all__ = ["Stream", "Event", "StreamContext", "current_stream", "default_stream", "set_stream",
           "stream", "is_current_stream_capturing"]

# The Stream objects handed out, by (device index, stream id): current_stream() returns the very
# object that was made current, as code comparing with `is` expects.
_live_streams: "weakref.WeakValueDictionary[tuple[int, int], Stream]" = \
    weakref.WeakValueDictionary()


class Stream(torch.Stream):
    """A tpu stream (see the module docstring for what it orders)."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs):
        if kwargs.get("stream_id") is not None:
            made = super().__new__(cls, **kwargs)
        else:
            made = super().__new__(cls, device=torch.device("tpu", _tpu._index(device)),
                                   priority=priority)
        return _live_streams.setdefault((made.device_index, made.stream_id), made)

    def wait_event(self, event: "Event") -> None:
        event.wait(self)

    def wait_stream(self, stream: "Stream") -> None:
        pass  # data dependencies already order the work

    def record_event(self, event: "Event | None" = None) -> "Event":
        event = event or Event()
        event.record(self)
        return event

    def synchronize(self) -> None:
        _tpu.synchronize()

    def query(self) -> bool:
        return _C._all_work_done()


def _as_tpu_stream(generic: torch.Stream) -> Stream:
    found = _live_streams.get((generic.device_index, generic.stream_id))
    if found is not None:
        return found
    return Stream(stream_id=generic.stream_id, device_index=generic.device_index,
                  device_type=generic.device_type)


def current_stream(device: Any = None) -> Stream:
    """The calling thread's current stream on ``device`` (the default stream until one is set)."""
    return _as_tpu_stream(torch._C._accelerator_getStream(_tpu._index(device)))


def default_stream(device: Any = None) -> Stream:
    """The default stream of ``device`` (stream id 0)."""
    generic = torch._C._accelerator_getStream(_tpu._index(device))
    return _as_tpu_stream(torch.Stream(stream_id=0, device_index=generic.device_index,
                                       device_type=generic.device_type))


def set_stream(stream: torch.Stream | None) -> None:
    """Make ``stream`` the current stream of its device for the calling thread (and its device
    the current device, as ``torch.accelerator.set_stream``). ``None`` does nothing."""
    if stream is None:
        return
    torch._C._accelerator_setStream(stream)


class StreamContext:
    """Makes ``stream`` current inside the block and restores the previous current stream (and
    device) on exit; ``None`` makes it a no-op, as ``torch.cuda.StreamContext``."""

    def __init__(self, stream: torch.Stream | None):
        self.stream = stream
        self._restore: list[Stream] = []
        self._previous_device = -1

    def __enter__(self):
        if self.stream is None:
            return self.stream
        self._previous_device = _tpu.current_device()
        # The stream's own device and the current one each get their stream back on exit.
        self._restore = [current_stream(self.stream.device_index)]
        if self.stream.device_index != self._previous_device:
            self._restore.append(current_stream(self._previous_device))
        set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc) -> bool:
        if self.stream is None:
            return False
        for previous in self._restore:
            set_stream(previous)
        if _tpu.current_device() != self._previous_device:
            _tpu.set_device(self._previous_device)
        return False


def stream(s: torch.Stream | None) -> StreamContext:
    """Make ``s`` the current stream of its device inside the block."""
    return StreamContext(s)


def is_current_stream_capturing() -> bool:
    """False: tpu has no stream capture (CUDA graphs); torch.compile builds whole programs."""
    return False


class Event:
    """A tpu event: stands for everything launched before :meth:`record`. :meth:`query` is
    conservative: it reports done once all launched work has finished.

    With ``enable_timing=True`` the event is timed on the host: :meth:`record` waits for the work
    launched so far and stamps the clock when it has completed (so it is a synchronization point
    that raises pending asynchronous device errors). :meth:`elapsed_time` is the time between two
    such stamps, in milliseconds. Events without timing never block.
    """

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self.recorded = False
        self._completed_at: float | None = None

    def record(self, stream: Stream | None = None) -> None:
        if self.enable_timing:
            _tpu.synchronize()
            self._completed_at = time.perf_counter()
        self.recorded = True

    def wait(self, stream: Stream | None = None) -> None:
        pass  # data dependencies already order the work

    def query(self) -> bool:
        return _C._all_work_done()

    def synchronize(self) -> None:
        _tpu.synchronize()

    def elapsed_time(self, end_event: "Event") -> float:
        """Milliseconds from this event's completion to ``end_event``'s."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("tpu Event.elapsed_time: both events must be created with "
                               "enable_timing=True")
        if self._completed_at is None or end_event._completed_at is None:
            raise RuntimeError("tpu Event.elapsed_time: both events must be recorded first")
        return (end_event._completed_at - self._completed_at) * 1000.0

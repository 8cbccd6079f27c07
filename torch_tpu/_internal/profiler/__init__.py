"""Trace capture under the names TorchTPU scripts use (`torch_tpu._internal.profiler`).

Everything here is a thin layer over `torch.profiler` with `ProfilerActivity.PrivateUse1`, which
records the tpu's device work (program executions, compiles with their cache tier, transfers,
collectives) beside the CPU ops; see docs/profiling.md. What it writes is a Chrome/Perfetto trace
(`<dir>/<host>_<pid>.<n>.pt.trace.json`), not an XProf directory.

    from torch_tpu._internal import profiler
    with profiler.profile(activities=[profiler.ProfilerActivity.CPU,
                                      profiler.ProfilerActivity.TPU],
                          on_trace_ready=profiler.xprof_trace_handler("/tmp/traces")):
        train_step()

or `profiler.start_trace("/tmp/traces")` ... `profiler.stop_trace()`.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import os
import socket
from collections.abc import Callable, Iterator
from typing import Any

import torch.profiler

__all__ = ["ProfilerActivity", "profile", "start_trace", "stop_trace", "xprof_trace_handler"]


class ProfilerActivity(enum.Enum):
    """What to record: host-side ops (CPU) and device work (TPU). GPU is not a tpu activity."""

    CPU = 1
    TPU = 2
    GPU = 3


def _torch_activities(activities) -> list[torch.profiler.ProfilerActivity]:
    chosen = []
    for activity in activities:
        if activity == ProfilerActivity.GPU:
            raise ValueError("ProfilerActivity.GPU is not supported on tpu: "
                             "use ProfilerActivity.TPU for device work")
        if not isinstance(activity, ProfilerActivity):
            raise TypeError(f"expected a torch_tpu._internal.profiler.ProfilerActivity, "
                            f"got {activity!r}")
        chosen.append(torch.profiler.ProfilerActivity.CPU if activity == ProfilerActivity.CPU
                      else torch.profiler.ProfilerActivity.PrivateUse1)
    return chosen


def xprof_trace_handler(dir_name: os.PathLike | str) -> Callable[[Any], str]:
    """An `on_trace_ready` for `profile`: the trace goes into `dir_name` (created if needed)."""
    directory = os.fspath(dir_name)

    def handler(prof: Any) -> str:
        return directory

    return handler


_trace_numbers = itertools.count()


def _write_trace(prof: torch.profiler.profile, directory: str) -> str:
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{socket.gethostname()}_{os.getpid()}."
                                   f"{next(_trace_numbers)}.pt.trace.json")
    prof.export_chrome_trace(path)
    return path


@contextlib.contextmanager
def profile(activities: list[ProfilerActivity] | None = None,
            on_trace_ready: Callable[[Any], str] | None = None,
            **kwargs) -> Iterator[torch.profiler.profile]:
    """Records the block with torch.profiler and writes the trace where `on_trace_ready` says.

    `activities` defaults to CPU and TPU. `on_trace_ready(prof)` returns the directory to write to
    (`xprof_trace_handler`); it is called with the finished profiler. Other keyword arguments go
    to `torch.profiler.profile` (record_shapes, with_stack, ...). Yields the torch profiler, so
    `prof.key_averages()` works after the block.
    """
    if on_trace_ready is None:
        raise ValueError("profile() needs on_trace_ready, e.g. xprof_trace_handler('/tmp/traces')")
    chosen = _torch_activities(activities or [ProfilerActivity.CPU, ProfilerActivity.TPU])
    with torch.profiler.profile(activities=chosen, **kwargs) as prof:
        yield prof
    _write_trace(prof, os.fspath(on_trace_ready(prof)))


_open: tuple[torch.profiler.profile, str] | None = None


def start_trace(log_dir: os.PathLike | str,
                activities: list[ProfilerActivity] | None = None, **kwargs) -> None:
    """Starts recording (CPU and TPU by default) until `stop_trace()`; one trace at a time."""
    global _open
    if _open is not None:
        raise RuntimeError(f"a trace into {_open[1]} is already being recorded; "
                           "call stop_trace() first")
    chosen = _torch_activities(activities or [ProfilerActivity.CPU, ProfilerActivity.TPU])
    prof = torch.profiler.profile(activities=chosen, **kwargs)
    prof.start()
    _open = (prof, os.fspath(log_dir))


def stop_trace() -> str:
    """Stops the trace `start_trace()` began, writes it and returns the file's path."""
    global _open
    if _open is None:
        raise RuntimeError("stop_trace() without start_trace()")
    prof, directory = _open
    _open = None
    prof.stop()
    return _write_trace(prof, directory)

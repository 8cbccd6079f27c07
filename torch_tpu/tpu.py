"""``torch.tpu``: the tpu device module, shaped like ``torch.cuda``."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch

from torch_tpu import _C

__all__ = [
    "is_available", "device_count", "current_device", "set_device", "device", "synchronize",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
    "set_rng_state", "get_rng_state_all", "set_rng_state_all", "get_device_name",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "memory_stats", "memory_summary", "mem_get_info", "reset_peak_memory_stats",
    "reset_max_memory_allocated", "reset_max_memory_cached", "reset_accumulated_memory_stats",
    "empty_cache",
    "get_amp_supported_dtype", "is_initialized", "Stream", "Event", "current_stream",
    "default_stream", "stream", "default_generators",
]


def is_available() -> bool:
    """Whether a tpu device can be used (the PJRT plugin loads and reports devices). When it
    cannot, the first call warns why and ``torch_tpu.plugin_error()`` returns the reason."""
    return _C._device_count() > 0


def is_initialized() -> bool:
    """Whether the PJRT runtime has started."""
    return _C._runtime_is_initialized()


def device_count() -> int:
    """Number of tpu devices visible to this process; 0 when the runtime cannot start (see
    :func:`is_available`)."""
    return _C._device_count()


def current_device() -> int:
    """Index of the current tpu device of this thread."""
    return _C._current_device()


def _index(device: Any) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "tpu":
        raise ValueError(f"expected a tpu device, got {device}")
    return current_device() if device.index is None else device.index


def set_device(device: Any) -> None:
    """Make ``device`` the current tpu device of this thread."""
    _C._set_device(_index(device))


class device:
    """Context manager that changes the current tpu device."""

    def __init__(self, device: Any):
        self.index = _index(device)
        self.previous = -1

    def __enter__(self):
        self.previous = current_device()
        if self.index != self.previous:
            set_device(self.index)

    def __exit__(self, *exc):
        if self.previous != self.index:
            set_device(self.previous)
        return False


def synchronize(device: Any = None) -> None:
    """Wait for all launched tpu work; raises the first asynchronous device error, if any."""
    _C._synchronize()


# --- random numbers ------------------------------------------------------------------------------

class _DefaultGenerators:
    def __getitem__(self, index: int) -> torch.Generator:
        if not 0 <= index < max(device_count(), 1):
            raise IndexError(f"no tpu device {index}")
        return _C._default_generator(index)

    def __len__(self) -> int:
        return max(device_count(), 1)

    def __iter__(self):
        return (self[i] for i in range(len(self)))


default_generators = _DefaultGenerators()


def _get_generator(device: torch.device) -> torch.Generator:
    """The default generator of ``device`` (what PyTorch's graph-safe RNG asks each device
    module for, as ``torch.cuda._get_generator``)."""
    return default_generators[_index(device)]


def manual_seed(seed: int) -> None:
    """Seed the current tpu device's generator."""
    default_generators[current_device()].manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed every tpu device's generator."""
    for generator in default_generators:
        generator.manual_seed(int(seed))


def seed() -> None:
    """Seed the current device's generator with a non-deterministic random number."""
    default_generators[current_device()].seed()


def seed_all() -> None:
    """Seed every tpu generator with non-deterministic random numbers."""
    for generator in default_generators:
        generator.seed()


def initial_seed() -> int:
    """The current device generator's seed."""
    return default_generators[current_device()].initial_seed()


def get_rng_state(device: Any = "tpu") -> torch.Tensor:
    """The generator state of ``device`` as a CPU uint8 tensor."""
    return default_generators[_index(device)].get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "tpu") -> None:
    """Restore a state returned by :func:`get_rng_state` (a CPU ByteTensor, as for CUDA: a state
    on another device raises the TypeError ``Generator.set_state`` raises)."""
    default_generators[_index(device)].set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [generator.get_state() for generator in default_generators]


def set_rng_state_all(new_states) -> None:
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


def _is_in_bad_fork() -> bool:
    """True in a child forked after this process started the PJRT runtime, which cannot be used
    there (PyTorch then skips seeding the device in DataLoader workers, as for CUDA)."""
    return _C._runtime_in_bad_fork()


# --- devices and memory --------------------------------------------------------------------------

def get_device_name(device: Any = None) -> str:
    """What is really underneath the tpu device: the PJRT platform and device kind."""
    info = _C._runtime_info()
    kinds = info["device_kinds"]
    index = _index(device)
    kind = kinds[index] if index < len(kinds) else kinds[0]
    return f"{info['platform_name']} ({kind}) via PJRT"


# Device memory is counted from the PJRT buffers that hold tensor storage, at their on-device size,
# for as long as anything holds them: a storage's buffer replaced by a write stays counted while a
# program still reads it, so peaks show what a step really needs. A storage that was allocated but
# never written (torch.empty) holds no device buffer yet; it shows in "requested_bytes" only.
# There is no cache of our own (PJRT frees a buffer as soon as its last holder lets go), so
# reserved memory equals allocated memory.

def memory_stats(device: Any = None) -> dict[str, int]:
    """Memory statistics of ``device`` under the names :func:`torch.cuda.memory_stats` uses.

    ``allocated_bytes.{all,small_pool,large_pool}.{current,peak,allocated,freed}`` and the counts
    ``allocation.*`` describe device buffers; ``requested_bytes.*`` the bytes of live storages;
    ``reserved_bytes.*``, ``segment.*`` and ``active*`` mirror the allocated ones;
    ``num_ooms`` counts out-of-memory errors raised, ``num_device_alloc``/``num_device_free``
    buffers created and released. Small pool: buffers under 1 MiB.
    """
    return dict(_C._memory_stats(_index(device)))


def memory_allocated(device: Any = None) -> int:
    """Bytes of device buffers holding tpu tensor storage on ``device``."""
    return _C._memory_stats(_index(device))["allocated_bytes.all.current"]


def max_memory_allocated(device: Any = None) -> int:
    """Peak of :func:`memory_allocated` since start or the last :func:`reset_peak_memory_stats`."""
    return _C._memory_stats(_index(device))["allocated_bytes.all.peak"]


def memory_reserved(device: Any = None) -> int:
    """Device memory held for tpu tensors; equals :func:`memory_allocated` (nothing is cached)."""
    return _C._memory_stats(_index(device))["reserved_bytes.all.current"]


def max_memory_reserved(device: Any = None) -> int:
    """Peak of :func:`memory_reserved` since start or the last :func:`reset_peak_memory_stats`."""
    return _C._memory_stats(_index(device))["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: Any = None) -> None:
    """Restart every ``*.peak`` statistic from its current value."""
    _C._reset_peak_memory_stats(_index(device))


def reset_max_memory_allocated(device: Any = None) -> None:
    """Restart :func:`max_memory_allocated` (and every other peak) from the current value."""
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device: Any = None) -> None:
    """Restart :func:`max_memory_reserved` (and every other peak) from the current value."""
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device: Any = None) -> None:
    """Zero the ``*.allocated``/``*.freed`` totals and the ``num_*`` counters."""
    _C._reset_accumulated_memory_stats(_index(device))


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """``(free, total)`` bytes of ``device``.

    From the plugin's ``PJRT_Device_MemoryStats`` when it reports a memory limit (TPU, GPU). The
    XLA CPU plugin does not, and its buffers are host memory: there this is ``MemAvailable`` and
    ``MemTotal`` of ``/proc/meminfo``. ``(0, 0)`` when neither is available.
    """
    free, total, _ = _C._mem_get_info(_index(device))
    return free, total


def empty_cache() -> None:
    """Release cached device memory: there is none to release, PJRT frees a buffer as soon as its
    last holder lets go."""


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """:func:`memory_stats` of ``device`` as a readable table (current, peak, allocated and freed
    totals per statistic; ``abbreviated`` leaves out the per-pool rows)."""
    index = _index(device)
    stats = memory_stats(index)
    rows = [("Allocated memory", "allocated_bytes", True), ("Requested memory", "requested_bytes",
            True), ("Reserved memory", "reserved_bytes", True), ("Device buffers", "allocation",
            False)]
    pools = [("all", "")] if abbreviated else [("all", ""), ("large_pool", "  from large pool"),
                                               ("small_pool", "  from small pool")]

    def show(value: int, is_bytes: bool) -> str:
        if not is_bytes:
            return str(value)
        for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
            if abs(value) < 1024 or unit == "TiB":
                return f"{value} {unit}" if unit == "B" else f"{value:.2f} {unit}"
            value /= 1024
        return ""

    header = f"{'tpu:' + str(index) + ' memory':<26}{'current':>14}{'peak':>14}" \
             f"{'allocated':>14}{'freed':>14}"
    lines = [header, "-" * len(header)]
    for title, key, is_bytes in rows:
        for pool, suffix in pools:
            values = [show(stats[f"{key}.{pool}.{kind}"], is_bytes)
                      for kind in ("current", "peak", "allocated", "freed")]
            label = title if pool == "all" else suffix
            lines.append(f"{label:<26}" + "".join(f"{value:>14}" for value in values))
    free, total = mem_get_info(index)
    lines.append("-" * len(header))
    lines.append(f"out-of-memory errors: {stats['num_ooms']}    free: {show(free, True)} of "
                 f"{show(total, True)}")
    return "\n".join(lines) + "\n"


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]


# --- streams and events --------------------------------------------------------------------------

class Stream(torch.Stream):
    """A tpu stream. Device work is ordered by its data dependencies (PJRT buffers), so work on
    different streams is already correctly ordered; streams scope it for APIs that expect them."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs):
        if kwargs.get("stream_id") is not None:
            return super().__new__(cls, **kwargs)
        with globals()["device"](device if device is not None else current_device()):
            return super().__new__(cls, device=torch.device("tpu", current_device()),
                                   priority=priority)

    def wait_event(self, event: "Event") -> None:
        event.wait(self)

    def wait_stream(self, stream: "Stream") -> None:
        pass  # data dependencies already order the work

    def record_event(self, event: "Event | None" = None) -> "Event":
        event = event or Event()
        event.record(self)
        return event

    def synchronize(self) -> None:
        synchronize()

    def query(self) -> bool:
        return _C._all_work_done()


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
            synchronize()
            self._completed_at = time.perf_counter()
        self.recorded = True

    def wait(self, stream: Stream | None = None) -> None:
        pass  # data dependencies already order the work

    def query(self) -> bool:
        return _C._all_work_done()

    def synchronize(self) -> None:
        synchronize()

    def elapsed_time(self, end_event: "Event") -> float:
        """Milliseconds from this event's completion to ``end_event``'s."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("tpu Event.elapsed_time: both events must be created with "
                               "enable_timing=True")
        if self._completed_at is None or end_event._completed_at is None:
            raise RuntimeError("tpu Event.elapsed_time: both events must be recorded first")
        return (end_event._completed_at - self._completed_at) * 1000.0


_current_streams: dict[int, Stream] = {}


def current_stream(device: Any = None) -> Stream:
    index = _index(device)
    if index not in _current_streams:
        _current_streams[index] = default_stream(index)
    return _current_streams[index]


_default_streams: dict[int, Stream] = {}


def default_stream(device: Any = None) -> Stream:
    index = _index(device)
    if index not in _default_streams:
        _default_streams[index] = Stream(index)
    return _default_streams[index]


@contextlib.contextmanager
def stream(s: Stream | None):
    """Make ``s`` the current stream of its device inside the block."""
    if s is None:
        yield
        return
    index = s.device_index
    previous = _current_streams.get(index)
    _current_streams[index] = s
    try:
        yield
    finally:
        if previous is None:
            _current_streams.pop(index, None)
        else:
            _current_streams[index] = previous


def __getattr__(name: str) -> Any:
    # torch.tpu.pallas (custom JAX kernels) loads on first use: importing torch_tpu stays free of
    # the torch.library registrations it makes, and JAX loads only when a kernel is traced.
    if name == "pallas":
        import torch_tpu.pallas

        return torch_tpu.pallas
    raise AttributeError(f"module 'torch.tpu' has no attribute {name!r}")

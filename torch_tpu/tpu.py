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
    # torch.cuda calls scripts and libraries make (streams: _streams.py; properties and feature
    # checks: _device_properties.py; matmul precision: _precision.py)
    "set_stream", "StreamContext", "is_current_stream_capturing", "device_of", "init",
    "ipc_collect", "can_device_access_peer", "memory_cached", "max_memory_cached",
    "memory_stats_as_nested_dict", "host_memory_stats", "reset_peak_host_memory_stats",
    "OutOfMemoryError", "get_device_properties", "get_device_capability", "get_arch_list",
    "is_bf16_supported", "is_tf32_supported", "utilization", "temperature", "power_draw",
    "clock_rate", "memory_usage", "Precision", "precision",
]


def is_available() -> bool:
    """Whether a tpu device can be used (the PJRT plugin loads and reports devices). When it
    cannot, the first call warns why and ``torch_tpu.plugin_error()`` returns the reason."""
    return _C._device_count() > 0


def is_initialized() -> bool:
    """Whether this process has started using the device (as ``torch.cuda.is_initialized``).
    Warm-start preloading, which may start the runtime at import on a thread of its own, does not
    count: torch's ``DeviceMesh`` sets each rank's device only while this is false."""
    return _C._runtime_is_in_use()


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


# --- more of torch.cuda's surface ----------------------------------------------------------------

class device_of(device):  # noqa: N801  (named as torch.cuda.device_of)
    """Context manager that makes the device of ``obj`` (a tensor or storage) current; a no-op
    for objects that are not on a tpu device."""

    def __init__(self, obj: Any):
        on_tpu = obj.device.type == "tpu"
        super().__init__(obj.device if on_tpu else current_device())


def init() -> None:
    """Start the tpu runtime now (it otherwise starts on first use); raises why it cannot."""
    _C._runtime_info()


def ipc_collect() -> None:
    """Nothing to collect: tpu tensors are not shared between processes through device IPC
    handles (``torch.multiprocessing`` moves their contents through host memory)."""


def can_device_access_peer(device: Any, peer_device: Any) -> bool:
    """Whether tensors of ``peer_device`` can be copied to ``device`` directly: true for any two
    tpu devices of this process (PJRT copies between them)."""
    count = device_count()
    return 0 <= _index(device) < count and 0 <= _index(peer_device) < count


def memory_cached(device: Any = None) -> int:
    """Deprecated alias of :func:`memory_reserved` (as in torch.cuda)."""
    return memory_reserved(device)


def max_memory_cached(device: Any = None) -> int:
    """Deprecated alias of :func:`max_memory_reserved` (as in torch.cuda)."""
    return max_memory_reserved(device)


def memory_stats_as_nested_dict(device: Any = None) -> dict[str, Any]:
    """:func:`memory_stats` nested at its dots (``stats["allocated_bytes"]["all"]["peak"]``)."""
    nested: dict[str, Any] = {}
    for key, value in memory_stats(device).items():
        *parents, leaf = key.split(".")
        node = nested
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    return nested


def host_memory_stats() -> dict[str, int]:
    """Statistics of pinned host memory (``pin_memory()``) under torch.cuda's names: bytes and
    blocks currently allocated (``allocated_bytes.current``, ``allocations.current``), their
    peaks and totals, ``num_host_alloc``/``num_host_free``. Nothing is cached, so active equals
    allocated."""
    return dict(_C._host_memory_stats())


def reset_peak_host_memory_stats() -> None:
    """Restart the peaks of :func:`host_memory_stats` from the current values."""
    _C._reset_peak_host_memory_stats()


OutOfMemoryError = torch.OutOfMemoryError
has_half = True


def __getattr__(name: str) -> Any:
    # torch.tpu.pallas (custom JAX kernels) loads on first use: importing torch_tpu stays free of
    # the torch.library registrations it makes, and JAX loads only when a kernel is traced.
    if name == "pallas":
        import torch_tpu.pallas

        return torch_tpu.pallas
    raise AttributeError(f"module 'torch.tpu' has no attribute {name!r}")


# Split by concern; these modules read this one's device helpers at call time.
from torch_tpu._device_properties import (  # noqa: E402
    clock_rate, get_arch_list, get_device_capability, get_device_properties, is_bf16_supported,
    is_tf32_supported, memory_usage, power_draw, temperature, utilization)
from torch_tpu._precision import Precision, precision  # noqa: E402
from torch_tpu._streams import (  # noqa: E402
    Event, Stream, StreamContext, current_stream, default_stream, is_current_stream_capturing,
    set_stream, stream)

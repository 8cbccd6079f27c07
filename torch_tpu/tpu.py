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
    "empty_cache", "memory_snapshot", "program_memory_stats", "set_per_process_memory_fraction",
    "get_per_process_memory_fraction",
    "get_amp_supported_dtype", "is_initialized", "Stream", "Event", "current_stream",
    "default_stream", "stream", "default_generators",
    # torch.cuda calls scripts and libraries make (streams: _streams.py; properties and feature
    # checks: _device_properties.py; memory: _memory.py; matmul precision: _precision.py)
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


OutOfMemoryError = torch.OutOfMemoryError
has_half = True


def __getattr__(name: str) -> Any:
    # torch.cuda's flag, read live: torch.utils.checkpoint and torch.random.fork_rng stash and
    # restore a device's RNG state only when its module's `_initialized` is true, so without it
    # a checkpointed block's recomputed dropout on tpu would draw a new mask.
    if name == "_initialized":
        return is_initialized()
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
from torch_tpu._memory import (  # noqa: E402
    empty_cache, get_per_process_memory_fraction, host_memory_stats, max_memory_allocated,
    max_memory_cached, max_memory_reserved, mem_get_info, memory_allocated, memory_cached,
    memory_reserved, memory_snapshot, memory_stats, memory_stats_as_nested_dict, memory_summary,
    program_memory_stats, reset_accumulated_memory_stats, reset_max_memory_allocated,
    reset_max_memory_cached, reset_peak_host_memory_stats, reset_peak_memory_stats,
    set_per_process_memory_fraction)
from torch_tpu._precision import Precision, precision  # noqa: E402
from torch_tpu._streams import (  # noqa: E402
    Event, Stream, StreamContext, current_stream, default_stream, is_current_stream_capturing,
    set_stream, stream)

"""``torch.tpu``: the tpu device module, shaped like ``torch.cuda``."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from torch_tpu import _C

__all__ = [
    "is_available", "device_count", "current_device", "set_device", "device", "synchronize",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
    "set_rng_state", "get_rng_state_all", "set_rng_state_all", "get_device_name",
    "memory_allocated", "max_memory_allocated", "reset_peak_memory_stats", "empty_cache",
    "get_amp_supported_dtype", "is_initialized", "Stream", "Event", "current_stream",
    "default_stream", "stream", "default_generators",
]


def is_available() -> bool:
    """Whether a tpu device can be used (the PJRT plugin loads and reports devices)."""
    return _C._device_count() > 0


def is_initialized() -> bool:
    """Whether the PJRT runtime has started."""
    return _C._runtime_is_initialized()


def device_count() -> int:
    """Number of tpu devices visible to this process."""
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
    """Restore a state returned by :func:`get_rng_state`."""
    default_generators[_index(device)].set_state(new_state.cpu())


def get_rng_state_all() -> list[torch.Tensor]:
    return [generator.get_state() for generator in default_generators]


def set_rng_state_all(new_states) -> None:
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


def _is_in_bad_fork() -> bool:
    # The PJRT client is not fork-safe once started, but nothing in a fresh child needs it.
    return False


# --- devices and memory --------------------------------------------------------------------------

def get_device_name(device: Any = None) -> str:
    """What is really underneath the tpu device: the PJRT platform and device kind."""
    info = _C._runtime_info()
    kinds = info["device_kinds"]
    index = _index(device)
    kind = kinds[index] if index < len(kinds) else kinds[0]
    return f"{info['platform_name']} ({kind}) via PJRT"


def memory_allocated(device: Any = None) -> int:
    """Bytes held by live tpu storages of ``device``."""
    return _C._memory_allocated(_index(device))


def max_memory_allocated(device: Any = None) -> int:
    """Peak of :func:`memory_allocated` since start or the last reset."""
    return _C._max_memory_allocated(_index(device))


def reset_peak_memory_stats(device: Any = None) -> None:
    _C._reset_peak_memory_stats(_index(device))


def empty_cache() -> None:
    """Release cached device memory. PJRT frees buffers as soon as tensors die, so this is a no-op."""


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
    conservative: it reports done once all launched work has finished."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.recorded = False

    def record(self, stream: Stream | None = None) -> None:
        self.recorded = True

    def wait(self, stream: Stream | None = None) -> None:
        pass  # data dependencies already order the work

    def query(self) -> bool:
        return _C._all_work_done()

    def synchronize(self) -> None:
        synchronize()


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

"""What ``torch.tpu`` reports about its devices (re-exported there): properties, capability,
arch list, feature checks, and the ``torch.cuda`` monitoring calls the PJRT plugin has no
counters for.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import torch

from torch_tpu import _C
from torch_tpu import tpu as _tpu  # device helpers; read at call time (tpu.py imports this file)

__all__ = ["get_device_properties", "get_device_capability", "get_arch_list",
           "is_bf16_supported", "is_tf32_supported", "utilization", "temperature", "power_draw",
           "clock_rate", "memory_usage"]


@dataclasses.dataclass(frozen=True)
class _TpuDeviceProperties:
    """What the PJRT plugin reports about one tpu device, shaped like torch.cuda's
    ``_CudaDeviceProperties`` where the notions exist (name, major, minor, total_memory,
    multi_processor_count).

    ``total_memory`` is the device memory limit the plugin reports (``PJRT_Device_MemoryStats``
    ``bytes_limit``: the HBM of a TPU device), or for the XLA CPU plugin, whose buffers are host
    memory, ``MemTotal``: the same number as ``torch.tpu.mem_get_info()[1]``.
    ``major``/``minor``: see :func:`get_device_capability`. ``multi_processor_count``: the compute
    cores of the device (the plugin's ``core_count``/``num_cores`` attribute, else 1).
    ``chip_count``: the chips the process's devices sit on (devices with distinct ``coords``
    attributes; each device counts as one chip when the plugin reports no coordinates).
    ``attributes``: every attribute the plugin reports for the device (libtpu: ``coords``,
    ``core_on_chip``...), ``memory_stats``: the plugin's ``PJRT_Device_MemoryStats`` (empty for
    plugins without them), ``memory_kinds``: the memory spaces the device addresses, its default
    one first.
    """

    name: str
    device_kind: str
    platform_name: str
    platform_version: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    chip_count: int
    id: int
    local_hardware_id: int
    process_index: int
    attributes: dict = dataclasses.field(repr=False)
    memory_stats: dict = dataclasses.field(repr=False)
    memory_kinds: tuple = dataclasses.field(repr=False)

    def __repr__(self) -> str:
        return (f"_TpuDeviceProperties(name='{self.name}', device_kind='{self.device_kind}', "
                f"major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // (1024 * 1024)}MB, "
                f"multi_processor_count={self.multi_processor_count}, "
                f"chip_count={self.chip_count})")


def _capability(description: dict) -> tuple[int, int]:
    attributes = description["attributes"]
    if "compute_capability" in attributes:  # the XLA CUDA plugin: "9.0"
        major, _, minor = str(attributes["compute_capability"]).partition(".")
        return int(major), int(minor or 0)
    if description["platform_name"].lower() == "tpu":
        generation = re.search(r"(\d+)", description["kind"])  # "TPU v5 lite", "TPU7x"
        if generation:
            return int(generation.group(1)), 0
    return 0, 0


def _chip_count() -> int:
    coordinates = set()
    for index in range(_tpu.device_count()):
        coords = _C._device_description(index)["attributes"].get("coords")
        coordinates.add(tuple(coords) if coords is not None else ("device", index))
    return len(coordinates)


def get_device_properties(device: Any = None) -> _TpuDeviceProperties:
    """Properties of ``device`` (default: the current tpu device) as the PJRT plugin reports
    them; see :class:`_TpuDeviceProperties`."""
    index = _tpu._index(device)
    description = _C._device_description(index)
    attributes = dict(description["attributes"])
    major, minor = _capability(description)
    cores = attributes.get("core_count", attributes.get("num_cores", 1))
    return _TpuDeviceProperties(
        name=_tpu.get_device_name(index), device_kind=description["kind"],
        platform_name=description["platform_name"],
        platform_version=description["platform_version"], major=major, minor=minor,
        total_memory=_C._mem_get_info(index)[1],
        multi_processor_count=int(cores) if isinstance(cores, int) else 1,
        chip_count=_chip_count(), id=description["id"],
        local_hardware_id=description["local_hardware_id"],
        process_index=description["process_index"], attributes=attributes,
        memory_stats=dict(description["memory_stats"]),
        memory_kinds=tuple(description["memory_kinds"]))


def get_device_capability(device: Any = None) -> tuple[int, int]:
    """``(major, minor)`` of ``device``, the shape of ``torch.cuda.get_device_capability``.

    A TPU has no CUDA compute capability: on libtpu ``major`` is the TPU generation from the
    device kind ("TPU v5 lite" -> 5, "TPU v6 lite" -> 6) and ``minor`` is 0. Under the XLA CUDA
    plugin it is the GPU's compute capability; under the XLA CPU plugin ``(0, 0)``. For the dtypes
    a device supports, see ``torch.accelerator.get_device_capability()``.
    """
    return _capability(_C._device_description(_tpu._index(device)))


def get_arch_list() -> list[str]:
    """The device kinds of this process's devices (``["TPU v5 lite"]``, ``["cpu"]``): programs
    are compiled for the device at hand by the plugin's XLA compiler, not ahead for a list of
    architectures. Empty when no tpu device is available."""
    if not _tpu.is_available():
        return []
    return sorted(set(_C._runtime_info()["device_kinds"]))


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Whether bfloat16 tensors work on the tpu device: true whenever a device is available (every
    PJRT plugin's XLA compiler supports bf16; TPUs compute it natively)."""
    return _tpu.is_available()


def is_tf32_supported() -> bool:
    """False: TF32 is an NVIDIA format. The tpu counterpart of ``torch.backends.cuda.matmul``
    precision choices is ``torch.set_float32_matmul_precision`` / ``torch.tpu.precision``."""
    return False


def _no_counter(name: str) -> RuntimeError:
    return RuntimeError(f"torch.tpu.{name}: the PJRT plugin reports no {name.replace('_', ' ')} "
                        "counter (torch.cuda reads it from NVML)")


def utilization(device: Any = None) -> int:
    """Not available: raises RuntimeError (PJRT exposes no utilization counter)."""
    raise _no_counter("utilization")


def temperature(device: Any = None) -> int:
    """Not available: raises RuntimeError (PJRT exposes no temperature sensor)."""
    raise _no_counter("temperature")


def power_draw(device: Any = None) -> int:
    """Not available: raises RuntimeError (PJRT exposes no power counter)."""
    raise _no_counter("power_draw")


def clock_rate(device: Any = None) -> int:
    """Not available: raises RuntimeError (PJRT exposes no clock rate)."""
    raise _no_counter("clock_rate")


def memory_usage(device: Any = None) -> int:
    """Not available: raises RuntimeError (NVML's memory-controller utilization has no PJRT
    counterpart; see :func:`torch.tpu.memory_allocated` and :func:`torch.tpu.mem_get_info`)."""
    raise _no_counter("memory_usage")

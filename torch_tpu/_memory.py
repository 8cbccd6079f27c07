"""``torch.tpu``'s memory functions (re-exported there), shaped like ``torch.cuda``'s: statistics,
peaks, the summary and snapshot, the programs' own memory needs, and the per-process limit.
``docs/memory.md`` says what each number counts.
"""

from __future__ import annotations

from typing import Any

from torch_tpu import _C
from torch_tpu import tpu as _tpu  # device helpers; read at call time (tpu.py imports this file)

__all__ = [
    "memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved",
    "max_memory_reserved", "reset_peak_memory_stats", "reset_max_memory_allocated",
    "reset_max_memory_cached", "reset_accumulated_memory_stats", "mem_get_info", "empty_cache",
    "memory_summary", "memory_snapshot", "program_memory_stats",
    "set_per_process_memory_fraction", "get_per_process_memory_fraction", "memory_cached",
    "max_memory_cached", "memory_stats_as_nested_dict", "host_memory_stats",
    "reset_peak_host_memory_stats",
]

# How many buffers and programs memory_summary() lists.
_SUMMARY_ROWS = 8


def _show_bytes(value: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return ""


def _one_line(text: str, width: int = 72) -> str:
    line = text.split("\n", 1)[0]
    return line if len(line) <= width else line[:width - 3] + "..."


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
    return dict(_C._memory_stats(_tpu._index(device)))


def memory_allocated(device: Any = None) -> int:
    """Bytes of device buffers holding tpu tensor storage on ``device``."""
    return _C._memory_stats(_tpu._index(device))["allocated_bytes.all.current"]


def max_memory_allocated(device: Any = None) -> int:
    """Peak of :func:`memory_allocated` since start or the last :func:`reset_peak_memory_stats`."""
    return _C._memory_stats(_tpu._index(device))["allocated_bytes.all.peak"]


def memory_reserved(device: Any = None) -> int:
    """Device memory held for tpu tensors; equals :func:`memory_allocated` (nothing is cached)."""
    return _C._memory_stats(_tpu._index(device))["reserved_bytes.all.current"]


def max_memory_reserved(device: Any = None) -> int:
    """Peak of :func:`memory_reserved` since start or the last :func:`reset_peak_memory_stats`."""
    return _C._memory_stats(_tpu._index(device))["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: Any = None) -> None:
    """Restart every ``*.peak`` statistic from its current value."""
    _C._reset_peak_memory_stats(_tpu._index(device))


def reset_max_memory_allocated(device: Any = None) -> None:
    """Restart :func:`max_memory_allocated` (and every other peak) from the current value."""
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device: Any = None) -> None:
    """Restart :func:`max_memory_reserved` (and every other peak) from the current value."""
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device: Any = None) -> None:
    """Zero the ``*.allocated``/``*.freed`` totals and the ``num_*`` counters."""
    _C._reset_accumulated_memory_stats(_tpu._index(device))


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """``(free, total)`` bytes of ``device``.

    From the plugin's ``PJRT_Device_MemoryStats`` when it reports a memory limit (TPU, GPU). The
    XLA CPU plugin does not, and its buffers are host memory: there this is ``MemAvailable`` and
    ``MemTotal`` of ``/proc/meminfo``. ``(0, 0)`` when neither is available.
    """
    free, total, _ = _C._mem_get_info(_tpu._index(device))
    return free, total


def empty_cache() -> None:
    """Release cached device memory: there is none to release, PJRT frees a buffer as soon as its
    last holder lets go."""


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """:func:`memory_stats` of ``device`` as a readable table (current, peak, allocated and freed
    totals per statistic; ``abbreviated`` leaves out the per-pool rows), then the largest live
    buffers with the op or graph that produced each, and the programs that need the most
    temporaries while they run."""
    index = _tpu._index(device)
    stats = memory_stats(index)
    rows = [("Allocated memory", "allocated_bytes", True), ("Requested memory", "requested_bytes",
            True), ("Reserved memory", "reserved_bytes", True), ("Device buffers", "allocation",
            False)]
    pools = [("all", "")] if abbreviated else [("all", ""), ("large_pool", "  from large pool"),
                                               ("small_pool", "  from small pool")]

    def show(value: int, is_bytes: bool) -> str:
        return _show_bytes(value) if is_bytes else str(value)

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
    limit = stats.get("memory_limit_bytes", 0)
    lines.append(f"out-of-memory errors: {stats['num_ooms']}    free: {show(free, True)} of "
                 f"{show(total, True)}" + (f"    limit: {show(limit, True)}" if limit else ""))
    lines.append("largest program temporaries since the peak reset: "
                 f"{show(stats.get('program_temporary_bytes.all.peak', 0), True)}")
    buffers = _C._live_buffers(index)
    if buffers:
        lines.append("-" * len(header))
        lines.append(f"largest live buffers ({len(buffers)} in all):")
        for _, size, producer in buffers[:_SUMMARY_ROWS]:
            lines.append(f"  {_show_bytes(size):>12}  {_one_line(producer or 'a copy to the device')}")
    programs = [p for p in program_memory_stats(limit=_SUMMARY_ROWS) if p["temporary_bytes"]]
    if programs:
        lines.append("-" * len(header))
        lines.append("programs needing the most temporaries while they run:")
        for program in programs:
            lines.append(f"  {_show_bytes(program['temporary_bytes']):>12}  "
                         f"{_one_line(program['program'])}")
    return "\n".join(lines) + "\n"




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


def memory_snapshot() -> list[dict[str, Any]]:
    """Every live device buffer of every tpu device, in :func:`torch.cuda.memory_snapshot`'s
    format: one segment per buffer (PJRT allocates each buffer on its own; nothing is cached or
    split), holding one ``"active_allocated"`` block. ``"producer"`` (segment and block) names the
    op or graph whose run produced the buffer (``None``: a copy to the device). ``"frames"`` are
    empty: no allocation history is recorded."""
    segments = []
    for index in range(_tpu.device_count()):
        for address, size, producer in _C._live_buffers(index):
            block = {"address": address, "size": size, "requested_size": size,
                     "state": "active_allocated", "frames": [], "producer": producer}
            segments.append({
                "device": index, "address": address, "total_size": size, "allocated_size": size,
                "active_size": size, "requested_size": size, "stream": 0,
                "segment_type": "large" if size >= 1 << 20 else "small",
                "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
                "producer": producer, "blocks": [block]})
    return segments


def program_memory_stats(limit: int = 0) -> list[dict[str, Any]]:
    """What the compiler reports about the device memory of each program this process has run and
    still holds, most temporaries first (at most ``limit``; 0: all). Each entry: ``"program"``
    (the op or graph that first ran it), ``"temporary_bytes"`` (held only while it runs, beyond
    its arguments and outputs), ``"argument_bytes"``, ``"output_bytes"``, ``"alias_bytes"``
    (outputs that reuse donated arguments), ``"generated_code_bytes"``, ``"peak_bytes"`` (the
    compiler's own peak; 0 when the plugin does not report one). Empty when the PJRT plugin does
    not report compiled memory statistics."""
    return list(_C._program_memory_stats(limit))


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """Limit this process to ``fraction`` of ``device``'s memory (as
    :func:`torch.cuda.set_per_process_memory_fraction`): an allocation, or a program run whose
    outputs and temporaries would pass the limit, raises ``torch.OutOfMemoryError`` before
    anything runs, and every tensor keeps its value. The total is :func:`mem_get_info`'s."""
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    index = _tpu._index(device)
    _, total = mem_get_info(index)
    _C._set_memory_limit(index, max(int(fraction * total), 1) if total else 0)


def get_per_process_memory_fraction(device: Any = None) -> float:
    """The fraction set by :func:`set_per_process_memory_fraction` (1.0 when none was set)."""
    index = _tpu._index(device)
    limit = _C._memory_limit(index)
    _, total = mem_get_info(index)
    return limit / total if limit and total else 1.0

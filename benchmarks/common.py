"""Shared helpers for benchmarks: timing, JSON and PNG output under benchmarks/results/."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def settle() -> None:
    """Waits for the optimized builds of the programs warmup ran twice (tiered compilation,
    csrc/exec/tiered_compilation.h): steady-state timings then measure what a long run reaches,
    not the quick builds a process starts with. Nothing to do without torch_tpu."""
    torch_tpu = sys.modules.get("torch_tpu")
    if torch_tpu is not None:
        torch_tpu._C._wait_for_tier_ups()


def time_per_call(function, sync, *, warmup: int = 20, repeats: int = 7, number: int = 200) -> float:
    """Median seconds per call over `repeats` runs of `number` calls, synchronizing each run
    (after `warmup` calls and settle())."""
    for _ in range(warmup):
        function()
    sync()
    settle()
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            function()
        sync()
        runs.append((time.perf_counter() - start) / number)
    return statistics.median(runs)


def floor_seconds(run, *, number: int, repeats: int = 5) -> float:
    """The floor of one `run()`: the programs it launched (every one, in order: a compiled
    step's forward, backward and optimizer graphs; a fused step's graph; an eager op's program)
    executed again back to back from C++ with their inputs already bound (no Python, no
    dispatch, no binding), seconds per run: the device time of the step."""
    return recorded_floor(run, number=number, repeats=repeats)[0]


def recorded_floor(run, *, number: int, repeats: int = 5) -> tuple[float, int]:
    """floor_seconds and the number of programs one `run()` launched."""
    import torch
    import torch_tpu

    torch.tpu.synchronize()
    torch_tpu._C._set_launch_recording(True)
    try:
        run()
        torch.tpu.synchronize()
        launches = torch_tpu._C._recorded_launch_count()
        torch_tpu._C._replay_recorded_launches(number)  # warm
        return min(torch_tpu._C._replay_recorded_launches(number) for _ in range(repeats)), launches
    finally:
        torch_tpu._C._set_launch_recording(False)


def write_results(name: str, payload: dict, plot) -> tuple[Path, Path | None]:
    """Write `payload` as JSON and, when matplotlib is installed, `plot(axes)` as a PNG."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    json_path = RESULTS / f"{name}.json"
    json_path.write_text(json.dumps(payload, indent=2))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return json_path, None
    figure, axes = plt.subplots(figsize=(9, 4.5))
    plot(axes)
    figure.tight_layout()
    png_path = RESULTS / f"{name}.png"
    figure.savefig(png_path, dpi=110)
    return json_path, png_path


def machine() -> dict:
    return {"cpus": os.cpu_count(), "threads": int(os.environ.get("OMP_NUM_THREADS", "0") or 0)}

"""Peak memory of an AdamW training step on a ~100M-parameter float32 model: tpu vs the lower bound.

    .venv/bin/python benchmarks/memory.py [--layers 6] [--width 4096] [--batch 8] [--steps 3]

The model is a stack of `--layers` Linear(width, width) + ReLU layers (6 x 4096 x 4096 = 100.7M
parameters). A step is zero_grad(set_to_none=True), forward, mean-square loss, backward and
AdamW.step. The first step creates the optimizer state; the peak is then measured over the
following steps with torch.tpu.max_memory_allocated() after torch.tpu.reset_peak_memory_stats()
(device buffers alive, including a buffer replaced by a write while the program that reads it
runs). The lower bound is what any implementation must hold at the optimizer step: parameters,
gradients and AdamW's two moment estimates (4 x parameter bytes). PyTorch CPU's peak for the same
steps is measured from the CPU allocator's total through torch.profiler's memory events. Writes
benchmarks/results/memory.{json,png}.
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

import torch_tpu  # noqa: F401
from common import machine, write_results

MIB = 2**20


def build(width: int, layers: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[module for _ in range(layers)
                           for module in (nn.Linear(width, width), nn.ReLU())])


def step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> None:
    optimizer.zero_grad(set_to_none=True)
    loss = model(x).square().mean()
    loss.backward()
    optimizer.step()


def tpu_peak(args) -> dict:
    device = torch.device("tpu")
    model = build(args.width, args.layers).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(args.batch, args.width).to(device)
    torch.tpu.synchronize()
    resident_model = torch.tpu.memory_allocated()
    torch.tpu.reset_peak_memory_stats()
    start = time.perf_counter()
    step(model, optimizer, x)  # creates AdamW's state
    torch.tpu.synchronize()
    first_seconds = time.perf_counter() - start
    first_peak = torch.tpu.max_memory_allocated()
    torch.tpu.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(args.steps - 1):
        step(model, optimizer, x)
    torch.tpu.synchronize()
    steady_seconds = (time.perf_counter() - start) / max(args.steps - 1, 1)
    result = {
        "resident_before_first_step_bytes": resident_model,
        "first_step_peak_bytes": first_peak,
        "steady_step_peak_bytes": torch.tpu.max_memory_allocated(),
        "resident_after_step_bytes": torch.tpu.memory_allocated(),
        "first_step_seconds": first_seconds,
        "steady_step_seconds": steady_seconds,
        "metrics": {key: value for key, value in torch_tpu.metrics().items()
                    if key.startswith("donated")},
    }
    del model, optimizer, x
    gc.collect()
    return result


def cpu_peak(args) -> dict | None:
    """Peak of the CPU allocator's live bytes during the steady steps, from the profiler's memory
    events (None when the profiler does not report them). The profile starts before the model is
    built so that every block, and so every free, is known to it."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, profile_memory=True) as profile:
        model = build(args.width, args.layers)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randn(args.batch, args.width)
        step(model, optimizer, x)
        with torch.profiler.record_function("steady_steps"):
            for _ in range(args.steps - 1):
                step(model, optimizer, x)
        del model, optimizer, x
    with tempfile.TemporaryDirectory() as directory:
        trace = Path(directory) / "trace.json"
        profile.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text()).get("traceEvents", [])
    gc.collect()
    window = next((event for event in events if event.get("name") == "steady_steps"), None)
    if window is None:
        return None
    begin, end = window["ts"], window["ts"] + window["dur"]
    totals = [event["args"]["Total Allocated"] for event in events
              if event.get("name") == "[memory]" and "Total Allocated" in event.get("args", {})
              and event["args"].get("Device Type", 0) == 0 and begin <= event["ts"] <= end]
    return {"steady_step_peak_bytes": max(totals)} if totals else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3, help="steps in all (the first warms up)")
    parser.add_argument("--label", default="with donation", help="what this run measures")
    args = parser.parse_args()

    parameters = args.layers * (args.width * args.width + args.width)
    parameter_bytes = parameters * 4
    lower_bound = 4 * parameter_bytes  # parameters + gradients + exp_avg + exp_avg_sq
    tpu = tpu_peak(args)
    cpu = cpu_peak(args)
    payload = {
        "benchmark": "memory", "label": args.label, "machine": machine(),
        "device": torch.tpu.get_device_name(),
        "config": vars(args), "parameters": parameters, "parameter_bytes": parameter_bytes,
        "lower_bound_bytes": lower_bound, "tpu": tpu, "cpu": cpu,
        "tpu_peak_over_lower_bound": tpu["steady_step_peak_bytes"] / lower_bound,
    }

    rows = [("lower bound: params + grads + 2 AdamW states", lower_bound),
            ("tpu: first step peak (creates AdamW state)", tpu["first_step_peak_bytes"]),
            ("tpu: steady step peak", tpu["steady_step_peak_bytes"]),
            ("tpu: resident after a step", tpu["resident_after_step_bytes"])]
    if cpu:
        rows.append(("PyTorch CPU: steady step peak", cpu["steady_step_peak_bytes"]))
    print(f"{parameters / 1e6:.1f}M parameters, float32, AdamW, batch {args.batch} ({args.label})")
    for name, value in rows:
        print(f"  {name:<46} {value / MIB:9.1f} MiB  {value / lower_bound:5.2f}x")
    print(f"  tpu step time: first {tpu['first_step_seconds']:.2f} s, "
          f"steady {tpu['steady_step_seconds']:.2f} s")

    def plot(axes):
        names = [name for name, _ in rows]
        values = [value / MIB for _, value in rows]
        colors = ["#999999"] + ["#4c72b0"] * 3 + ["#dd8452"] * (len(rows) - 4)
        axes.barh(names[::-1], values[::-1], color=colors[::-1])
        axes.set_xlabel("MiB")
        axes.set_title(f"AdamW step, {parameters / 1e6:.0f}M float32 parameters ({args.label})")
        axes.set_xlim(0, max(values) * 1.12)
        for index, value in enumerate(values[::-1]):
            axes.text(value, index, f" {value:.0f}", va="center")

    json_path, png_path = write_results("memory", payload, plot)
    print(f"wrote {json_path}" + (f" and {png_path}" if png_path else ""))


if __name__ == "__main__":
    main()

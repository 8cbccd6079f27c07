"""Peak device memory of training steps on tpu in strict, defer-and-fuse and compiled modes, next
to PyTorch CPU's peak for the same steps, in one run.

    .venv/bin/python benchmarks/memory.py [--steps 3] [--only adamw,mingpt,llama]

Workloads:
  adamw   a stack of 6 Linear(4096, 4096) + ReLU (100.7M float32 parameters), AdamW: the optimizer
          step dominates. Lower bound: parameters + gradients + AdamW's two moments (4 x
          parameter bytes), what any implementation holds at the step.
  mingpt  examples/mingpt.py at dim 256, 4 layers, 4 heads, block 128, batch 16: activations.
  llama   Hugging Face LlamaForCausalLM (transformers, when installed; hidden 256, 4 layers, 4
          heads, 2 kv heads, vocab 2048), sequence 128, batch 8; also with activation
          checkpointing (gradient_checkpointing_enable, non-reentrant) and with saved
          activations offloaded to the host (torch.autograd.graph.save_on_cpu).

A step is zero_grad(set_to_none=True), forward, loss, backward, optimizer.step. The first steps
warm up (and create the optimizer state); the peak is then measured over the last step:
torch.tpu.max_memory_allocated() after reset_peak_memory_stats() (live buffers plus each
program's own temporaries while it runs, docs/memory.md), and for CPU the CPU allocator's live
bytes from torch.profiler's memory events. Writes benchmarks/results/memory.{json,png}.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

import torch_tpu
import torch_tpu.aot
from common import machine, write_results

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import mingpt  # noqa: E402

MIB = 2**20
MODES = ("strict", "defer_and_fuse", "compiled")


# --- workloads: build(device) -> (model, optimizer, batch); loss(model, batch) -> scalar ---------

def adamw_workload(device):
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(4096, 4096), nn.ReLU())])
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return model, optimizer, torch.randn(8, 4096).to(device)


def adamw_loss(model, batch):
    return model(batch).square().mean()


def mingpt_workload(device):
    model = mingpt.build(0, block=128, layers=4, heads=4, dim=256).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    x, y = mingpt.make_batches(1, 16, 128, 0)[0]
    return model, optimizer, (x.to(device), y.to(device))


def mingpt_loss(model, batch):
    return model(*batch)[1]


def llama_workload(device, activations="keep"):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=2048, hidden_size=256, intermediate_size=688,
                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, attn_implementation="sdpa")
    model = LlamaForCausalLM(config).train()
    if activations == "checkpoint":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    tokens = torch.randint(0, 2048, (8, 128), generator=torch.Generator().manual_seed(0))
    return model, optimizer, tokens.to(device)


def llama_loss(model, tokens):
    return model(input_ids=tokens, labels=tokens).loss


def step(model, optimizer, batch, loss_fn, offload=False):
    optimizer.zero_grad(set_to_none=True)
    pin = batch[0].device.type != "cpu" if isinstance(batch, tuple) else batch.device.type != "cpu"
    saving = torch.autograd.graph.save_on_cpu(pin_memory=pin) if offload \
        else contextlib.nullcontext()
    with saving:
        loss = loss_fn(model, batch)
    loss.backward()
    optimizer.step()
    return loss


# --- measurement ---------------------------------------------------------------------------------

_COMPILE_FOR_TPU = """
import json, sys, torch_tpu.aot
text = open(sys.argv[1]).read()
print(json.dumps(torch_tpu.aot.compile_module(sys.argv[2], text).memory))
"""


def on_tpu_compiler(captured, target="v5e") -> list | None:
    """The measured step's programs with temporaries, compiled again by libtpu for `target`
    (deviceless AOT, docs/tpu.md): what the same programs need on a TPU next to what the XLA CPU
    compiler gave them. Each compile runs in a child process: a libtpu crash (it has segfaulted
    in its fusion pass on one of these programs) costs that row only. None when libtpu is not
    installed."""
    if importlib.util.find_spec("libtpu") is None:
        return None
    on_cpu = {p["program"]: p for p in torch.tpu.program_memory_stats()}
    rows = []
    for description, text in captured:
        cpu = on_cpu.get(description)
        if cpu is None or cpu["temporary_bytes"] < MIB:
            continue
        row = {"program": description[:80], "xla_cpu_temporary_bytes": cpu["temporary_bytes"]}
        with tempfile.NamedTemporaryFile("w", suffix=".mlir") as module:
            module.write(text)
            module.flush()
            child = subprocess.run([sys.executable, "-c", _COMPILE_FOR_TPU, module.name, target],
                                   capture_output=True, text=True, timeout=900)
        if child.returncode == 0:
            memory = json.loads(child.stdout.strip().splitlines()[-1])
            row.update({f"{target}_temporary_bytes": memory["temp_bytes"],
                        f"{target}_argument_bytes": memory["argument_bytes"],
                        f"{target}_output_bytes": memory["output_bytes"]})
        else:
            row[f"{target}_error"] = f"libtpu exited with {child.returncode}: " + \
                (child.stderr.strip().splitlines() or [""])[-1][:200]
        rows.append(row)
    return rows


def tpu_peak(build, loss_fn, mode, steps, offload=False) -> dict:
    model, optimizer, batch = build("tpu")
    forward = torch.compile(model, backend="tpu") if mode == "compiled" else model
    context = torch_tpu.eager_mode("defer_and_fuse") if mode == "defer_and_fuse" \
        else contextlib.nullcontext()
    with context:
        start = time.perf_counter()
        for _ in range(steps - 1):
            step(forward, optimizer, batch, loss_fn, offload)
        torch.tpu.synchronize()
        warmup_seconds = time.perf_counter() - start
        torch.tpu.reset_peak_memory_stats()
        resident = torch.tpu.memory_allocated()
        start = time.perf_counter()
        with torch_tpu.aot.capture_modules() as captured:
            loss = step(forward, optimizer, batch, loss_fn, offload).item()
            torch.tpu.synchronize()
        seconds = time.perf_counter() - start
        peak = torch.tpu.max_memory_allocated()
        temporaries = torch.tpu.memory_stats()["program_temporary_bytes.all.peak"]
    tpu_compiler = on_tpu_compiler(captured) if mode != "strict" else None
    parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    del model, optimizer, batch, forward
    gc.collect()
    torch.tpu.synchronize()
    return {"peak_bytes": peak, "resident_before_step_bytes": resident,
            "largest_program_temporaries_bytes": temporaries, "parameter_bytes": parameter_bytes,
            "loss": loss, "warmup_seconds": warmup_seconds, "step_seconds": seconds,
            "programs_on_v5e": tpu_compiler}


def cpu_peak(build, loss_fn, steps, offload=False) -> dict | None:
    """The CPU allocator's peak live bytes over the last step, from the profiler's memory events.
    The profile starts before the model is built so that every block, and so every free, is
    known to it."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, profile_memory=True) as profile:
        model, optimizer, batch = build("cpu")
        for _ in range(steps - 1):
            step(model, optimizer, batch, loss_fn, offload)
        with torch.profiler.record_function("measured_step"):
            loss = step(model, optimizer, batch, loss_fn, offload).item()
        del model, optimizer, batch
    with tempfile.TemporaryDirectory() as directory:
        trace = Path(directory) / "trace.json"
        profile.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text()).get("traceEvents", [])
    gc.collect()
    window = next((event for event in events if event.get("name") == "measured_step"), None)
    if window is None:
        return None
    begin, end = window["ts"], window["ts"] + window["dur"]
    totals = [event["args"]["Total Allocated"] for event in events
              if event.get("name") == "[memory]" and "Total Allocated" in event.get("args", {})
              and event["args"].get("Device Type", 0) == 0 and begin <= event["ts"] <= end]
    return {"peak_bytes": max(totals), "loss": loss} if totals else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3, help="steps per run (the last is measured)")
    parser.add_argument("--only", default="adamw,mingpt,llama")
    args = parser.parse_args()
    chosen = args.only.split(",")
    has_transformers = importlib.util.find_spec("transformers") is not None

    workloads = {"adamw": (adamw_workload, adamw_loss, {}),
                 "mingpt": (mingpt_workload, mingpt_loss, {})}
    if has_transformers:
        workloads["llama"] = (llama_workload, llama_loss, {
            "checkpoint": (lambda d: llama_workload(d, "checkpoint"), False),
            "offload": (llama_workload, True)})
    results = {}
    for name, (build, loss_fn, variants) in workloads.items():
        if name not in chosen:
            continue
        entry = {"cpu": cpu_peak(build, loss_fn, args.steps)}
        for mode in MODES:
            entry[mode] = tpu_peak(build, loss_fn, mode, args.steps)
        cpu = entry["cpu"]["peak_bytes"] if entry["cpu"] else None
        entry["ratio_to_cpu"] = {mode: entry[mode]["peak_bytes"] / cpu for mode in MODES} \
            if cpu else None
        for variant, (variant_build, offload) in variants.items():
            variant_cpu = cpu_peak(variant_build, loss_fn, args.steps, offload)
            variant_tpu = tpu_peak(variant_build, loss_fn, "strict", args.steps, offload)
            entry[variant] = {
                "cpu": variant_cpu, "strict": variant_tpu,
                "cpu_saving_bytes": cpu - variant_cpu["peak_bytes"] if cpu and variant_cpu
                else None,
                "tpu_saving_bytes": entry["strict"]["peak_bytes"] - variant_tpu["peak_bytes"]}
        results[name] = entry
    if "adamw" in results:
        parameter_bytes = results["adamw"]["strict"]["parameter_bytes"]
        results["adamw"]["lower_bound_bytes"] = 4 * parameter_bytes
        results["adamw"]["ratio_to_lower_bound"] = {
            mode: results["adamw"][mode]["peak_bytes"] / (4 * parameter_bytes) for mode in MODES}

    payload = {"benchmark": "memory", "machine": machine(),
               "device": torch.tpu.get_device_name(), "steps": args.steps, "results": results}
    for name, entry in results.items():
        cpu = entry["cpu"]["peak_bytes"] if entry["cpu"] else None
        print(f"{name}: peak of a steady training step (MiB; ratio to PyTorch CPU's)")
        if cpu:
            print(f"  {'PyTorch CPU':<34} {cpu / MIB:9.1f}")
        if "lower_bound_bytes" in entry:
            print(f"  {'lower bound (params+grads+AdamW)':<34} {entry['lower_bound_bytes'] / MIB:9.1f}"
                  f"  {entry['lower_bound_bytes'] / cpu:5.2f}x")
        for mode in MODES:
            peak = entry[mode]["peak_bytes"]
            print(f"  {'tpu ' + mode:<34} {peak / MIB:9.1f}  {peak / cpu:5.2f}x" if cpu else
                  f"  {'tpu ' + mode:<34} {peak / MIB:9.1f}")
        for mode in MODES:
            for row in entry[mode].get("programs_on_v5e") or []:
                on_v5e = f"{row['v5e_temporary_bytes'] / MIB:.1f} MiB" \
                    if "v5e_temporary_bytes" in row else row["v5e_error"]
                print(f"    {mode}: {row['program'][:44]}: temporaries XLA:CPU "
                      f"{row['xla_cpu_temporary_bytes'] / MIB:.1f} MiB, libtpu v5e {on_v5e}")
        for variant in ("checkpoint", "offload"):
            if variant in entry:
                v = entry[variant]
                print(f"  {variant}: CPU {v['cpu']['peak_bytes'] / MIB:.1f} MiB "
                      f"(saves {v['cpu_saving_bytes'] / MIB:.1f}), tpu strict "
                      f"{v['strict']['peak_bytes'] / MIB:.1f} MiB "
                      f"(saves {v['tpu_saving_bytes'] / MIB:.1f})")

    def plot(axes):
        labels, values, colors = [], [], []
        palette = {"cpu": "#dd8452", "strict": "#4c72b0", "defer_and_fuse": "#55a868",
                   "compiled": "#8172b2"}
        for name, entry in results.items():
            cpu = entry["cpu"]["peak_bytes"] if entry["cpu"] else None
            if not cpu:
                continue
            for key in ("cpu",) + MODES:
                labels.append(f"{name} {key}")
                values.append((entry[key]["peak_bytes"]) / cpu)
                colors.append(palette[key])
        axes.barh(labels[::-1], values[::-1], color=colors[::-1])
        axes.axvline(1.0, color="#999999", linewidth=1)
        axes.set_xlabel("steady training-step peak / PyTorch CPU's peak")
        axes.set_title("Peak memory of a training step")
        for index, value in enumerate(values[::-1]):
            axes.text(value, index, f" {value:.2f}x", va="center")

    json_path, png_path = write_results("memory", payload, plot)
    print(f"wrote {json_path}" + (f" and {png_path}" if png_path else ""))


if __name__ == "__main__":
    main()

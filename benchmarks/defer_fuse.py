"""Defer-and-fuse vs strict eager vs PyTorch CPU eager, one run.

    .venv/bin/python benchmarks/defer_fuse.py [--number 5] [--repeats 3] [--warmup 3]

Workloads (forward + backward, plus an AdamW step for minGPT), each timed per step with a
synchronization at the end of every timing run, warmup steps (compilation) excluded:
  block   LayerNorm -> Linear -> GELU -> Linear -> residual, an elementwise-heavy MLP block,
          and an SGD-momentum step;
  mingpt  a training step of examples/mingpt.py at its default size;
  resnet  a training step of examples/resnet.py (benchmarks/train_step.py's sizes).
Each step ends with a synchronization, as a training loop that reads its loss does (a graph per
step); --no-step-sync synchronizes only after each timing run, letting steps fuse together.
Prints milliseconds per step, programs executed per step and bytes moved per step for each mode,
and, where a defer-and-fuse step is one program, its floor (that program replayed back to back
from C++ with its inputs bound) and the host overhead (step time - floor); writes
benchmarks/results/defer_fuse.{json,png}.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import torch_tpu
from common import floor_seconds, machine, time_per_call, write_results
from train_step import gpt_step, resnet_step  # the steps train_step.py times


def block_step(device: torch.device, args):
    torch.manual_seed(0)
    norm, up, down = nn.LayerNorm(args.dim), nn.Linear(args.dim, 4 * args.dim), nn.Linear(4 * args.dim, args.dim)
    model = nn.ModuleList([norm, up, down]).to(device)
    x = torch.randn(args.batch * args.block, args.dim, device=device)
    # The update keeps the step's work alive: with every gradient dropped, a fused graph has no
    # live result and XLA removes all of it.
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    def step():
        h = down(torch.nn.functional.gelu(up(norm(x)))) + x
        optimizer.zero_grad(set_to_none=True)
        h.square().mean().backward()
        optimizer.step()
    return step


def synchronized(step):
    def run():
        step()
        torch.tpu.synchronize()
    return run


def measure_tpu(factory, mode: str, args) -> dict:
    timing = dict(warmup=args.warmup, repeats=args.repeats, number=args.number)
    with torch_tpu.eager_mode(mode):
        step = factory(torch.device("tpu"), args)
        if args.step_sync:
            step = synchronized(step)
        seconds = time_per_call(step, torch.tpu.synchronize, **timing)
        torch_tpu.reset_metrics()
        for _ in range(args.number):
            step()
        torch.tpu.synchronize()
        metrics = torch_tpu.metrics()
        one_program = metrics["execute_count"] == args.number
        floor_ms = floor_seconds(step, number=args.number, repeats=args.repeats) * 1e3 \
            if one_program else None
    per_step = {key: metrics[key] / args.number for key in
                ("execute_count", "compile_count", "transfer_to_device_bytes", "transfer_to_host_bytes",
                 "fused_ops")}
    return {"ms": seconds * 1e3, **per_step, "fuse_cuts": metrics["fuse_cuts"],
            "floor_ms": floor_ms,
            "host_overhead_ms": seconds * 1e3 - floor_ms if floor_ms is not None else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--block", type=int, default=32, help="tokens per sequence")
    parser.add_argument("--dim", type=int, default=64, help="model width")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation)")
    parser.add_argument("--repeats", type=int, default=3, help="timing runs (the median is kept)")
    parser.add_argument("--number", type=int, default=5, help="steps per timing run")
    parser.add_argument("--width", type=float, default=0.25, help="ResNet channel multiplier")
    parser.add_argument("--blocks", type=int, default=1, help="ResNet BasicBlocks per stage")
    parser.add_argument("--no-step-sync", dest="step_sync", action="store_false",
                        help="synchronize only after each timing run (steps may fuse together)")
    args = parser.parse_args()

    rows = []
    for name, factory in [("block", block_step), ("mingpt", gpt_step), ("resnet", resnet_step)]:
        timing = dict(warmup=args.warmup, repeats=args.repeats, number=args.number)
        cpu_ms = time_per_call(factory(torch.device("cpu"), args), lambda: None, **timing) * 1e3
        strict = measure_tpu(factory, "strict", args)
        fused = measure_tpu(factory, "defer_and_fuse", args)
        rows.append({"workload": name, "cpu_ms": cpu_ms, "strict": strict, "fuse": fused,
                     "fuse_speedup_over_strict": strict["ms"] / fused["ms"],
                     "fuse_vs_cpu": cpu_ms / fused["ms"]})

    print(f"defer-and-fuse vs strict vs CPU eager, batch {args.batch}x{args.block}, dim {args.dim}, "
          f"plugin {torch.tpu.get_device_name()}")
    print(f"{'workload':<10}{'cpu ms':>9}{'strict ms':>11}{'fuse ms':>9}{'fuse/strict':>13}{'cpu/fuse':>10}"
          f"{'programs strict':>17}{'programs fuse':>15}")
    for row in rows:
        print(f"{row['workload']:<10}{row['cpu_ms']:>9.2f}{row['strict']['ms']:>11.2f}{row['fuse']['ms']:>9.2f}"
              f"{row['fuse_speedup_over_strict']:>12.2f}x{row['fuse_vs_cpu']:>9.2f}x"
              f"{row['strict']['execute_count']:>17.1f}{row['fuse']['execute_count']:>15.1f}")
    print("fused step floor (its one program replayed from C++) and host overhead (step - floor):")
    for row in rows:
        fuse = row["fuse"]
        if fuse["floor_ms"] is None:
            print(f"  {row['workload']:<10} not one program per step")
        else:
            print(f"  {row['workload']:<10} floor {fuse['floor_ms']:.2f} ms, host overhead "
                  f"{fuse['host_overhead_ms']:.2f} ms ({fuse['host_overhead_ms'] / fuse['ms']:.0%})")

    def plot(axes):
        positions = range(len(rows))
        for shift, key, label in [(-0.27, "cpu", "CPU eager"), (0.0, "strict", "tpu strict"),
                                  (0.27, "fuse", "tpu defer_and_fuse")]:
            values = [row["cpu_ms"] if key == "cpu" else row[key]["ms"] for row in rows]
            axes.bar([p + shift for p in positions], values, 0.27, label=label)
        axes.set_xticks(list(positions), [f"{row['workload']} (fuse {row['fuse_speedup_over_strict']:.1f}x strict)"
                                          for row in rows])
        axes.set_ylabel("milliseconds per step")
        axes.set_title("Defer-and-fuse vs strict eager vs CPU eager")
        axes.legend()

    paths = write_results("defer_fuse", {"config": vars(args), "rows": rows, "machine": machine()}, plot)
    print("wrote", *[str(p) for p in paths if p])


if __name__ == "__main__":
    main()

"""Training-step time under torch.compile(backend="tpu") vs tpu strict eager vs PyTorch CPU eager
vs inductor on CPU vs torchax and JAX (the same XLA CPU compiler, the whole step in one jax.jit),
one run, next to each tpu step's floor.

    .venv/bin/python benchmarks/compile.py [--number 5] [--repeats 3] [--warmup 3] [--no-inductor]
                                           [--workloads mingpt resnet mlp] [--no-torchax]

A step is forward + backward + AdamW step (the same step functions as benchmarks/train_step.py:
examples/mingpt.py, examples/resnet.py, benchmarks/models.py's 4-block residual MLP), compiled
whole where a column says so. "first" is the cold first step (Dynamo tracing and XLA compilation
included; a warm process's first compiled step: benchmarks/compile_cost.py, the *_compiled
workloads). "tpu defer_and_fuse" is eager code in the DeferAndFuse mode. Every step ends
synchronized.

The floor of a tpu step is the programs one step launched (a compiled step's forward, backward,
seed gradient and optimizer graphs; a fused step's graph; every eager op's program), executed
again back to back from C++ with their inputs bound, nothing from Python in between
(common.recorded_floor): the device time. Host overhead = step - floor; the share of the step it
takes is what carries over to a TPU, whose device time is far shorter.

Peers: "torchax jit" is the same torch model run by torchax 0.0.13 (benchmarks/torchax_step.py,
in a subprocess; installed on first use), forward + `jax.value_and_grad` + optax AdamW in one
`jax.jit`; "jax jit" (minGPT only, benchmarks/jax_mingpt.py) is minGPT written in JAX. Both need
JAX (the kernels extra that setup installs) and are skipped with a note without it. Writes
benchmarks/results/compile.{json,png}.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch
import torch._dynamo

import torch_tpu
from common import machine, recorded_floor, time_per_call, write_results
from train_step import gpt_step, mingpt, mlp_step, resnet_step

WORKLOADS = {"mingpt": gpt_step, "resnet": resnet_step, "mlp": mlp_step}


def measure(factory, device, compiled_backend, args, sync, mode="strict"):
    """(first step s, median step s, floor s, programs in the floor, executions per step); the
    last three are None off tpu."""
    torch._dynamo.reset()
    with torch_tpu.eager_mode(mode):
        step = factory(device, args)
        if compiled_backend is not None:
            step = torch.compile(step, backend=compiled_backend)

        def synchronized_step():
            # Each step ends synchronized, as a loop reading its loss: tpu work (a fused graph
            # in defer_and_fuse mode) never spills into the next step's timing.
            step()
            sync()
        start = time.perf_counter()
        synchronized_step()
        first = time.perf_counter() - start
        torch_tpu.reset_metrics()
        seconds = time_per_call(synchronized_step, sync, warmup=args.warmup, repeats=args.repeats,
                                number=args.number)
        floor = launches = executions = None
        if device.type == "tpu":
            steps = args.warmup + args.repeats * args.number
            executions = torch_tpu.metrics()["execute_count"] / steps
            floor, launches = recorded_floor(synchronized_step, number=args.number,
                                             repeats=args.repeats)
    return first, seconds, floor, launches, executions


def measure_torchax(workload: str, args) -> tuple[float, float]:
    """benchmarks/torchax_step.py in its own process (torchax renames the PrivateUse1 backend)."""
    script = Path(__file__).resolve().parent / "torchax_step.py"
    options = ["--workload", workload]
    for name in ("batch", "block", "dim", "width", "blocks", "warmup", "repeats", "number"):
        options += [f"--{name}", str(getattr(args, name))]
    completed = subprocess.run([sys.executable, str(script), *options], capture_output=True,
                               text=True)
    if completed.returncode != 0:
        raise RuntimeError(completed.stderr.strip().splitlines()[-1])
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    return result["first_s"], result["step_s"]


def measure_jax(args) -> tuple[float, float]:
    """The JAX minGPT step from the same initial weights and batch as `gpt_step`."""
    import jax_mingpt

    config = {"layers": 2, "heads": 2}
    model = mingpt.build(0, block=args.block, dim=args.dim)
    x, y = mingpt.make_batches(1, args.batch, args.block, 0)[0]
    jax_mingpt.check_against_torch(model, 3e-3, x, y, config)
    import jax.numpy as jnp

    step = jax_mingpt.make_step(config, lr=3e-3)
    state = {"params": {k: jnp.asarray(v) for k, v in jax_mingpt.params_from_torch(model).items()}}
    state["optimizer"] = jax_mingpt.initial_state(state["params"])
    tokens, targets = jnp.asarray(x.numpy()), jnp.asarray(y.numpy())

    def run():
        state["params"], state["optimizer"], state["loss"] = step(
            state["params"], state["optimizer"], tokens, targets)

    def sync():
        state["loss"].block_until_ready()

    start = time.perf_counter()
    run()
    sync()
    first = time.perf_counter() - start
    return first, time_per_call(run, sync, warmup=args.warmup, repeats=args.repeats,
                                number=args.number), None, None, 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--block", type=int, default=32, help="GPT context length")
    parser.add_argument("--dim", type=int, default=64, help="GPT width")
    parser.add_argument("--width", type=float, default=0.25, help="ResNet channel multiplier")
    parser.add_argument("--blocks", type=int, default=1, help="ResNet BasicBlocks per stage")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--number", type=int, default=5)
    parser.add_argument("--no-inductor", action="store_true", help="skip inductor on CPU")
    parser.add_argument("--no-torchax", action="store_true", help="skip the torchax peer")
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="torch.compile")

    cpu, tpu = torch.device("cpu"), torch.device("tpu")
    variants = [("cpu eager", cpu, None, lambda: None, "strict"),
                ("tpu strict eager", tpu, None, torch.tpu.synchronize, "strict"),
                ("tpu defer_and_fuse", tpu, None, torch.tpu.synchronize, "defer_and_fuse"),
                ("tpu compiled", tpu, "tpu", torch.tpu.synchronize, "strict")]
    if not args.no_inductor:
        variants.insert(1, ("cpu inductor", cpu, "inductor", lambda: None, "strict"))
    rows = []

    def add(model, name, measure_row):
        try:
            first, seconds, floor, launches, executions = measure_row()
            error = None
        except Exception as exception:  # report and keep going
            first, seconds, floor, launches, executions = float("nan"), float("nan"), None, None, None
            error = f"{type(exception).__name__}: {str(exception)[:300]}"
        row = {"model": model, "variant": name, "first_s": first, "step_ms": seconds * 1e3,
               "executions_per_step": executions, "error": error,
               "floor_ms": None if floor is None else floor * 1e3,
               "programs_in_floor": launches}
        if floor is not None:
            row["host_overhead_ms"] = row["step_ms"] - row["floor_ms"]
            row["host_share"] = row["host_overhead_ms"] / row["step_ms"]
        rows.append(row)

    for model in args.workloads:
        for name, device, backend, sync, mode in variants:
            add(model, name, lambda: measure(WORKLOADS[model], device, backend, args, sync, mode))
        if not args.no_torchax:
            add(model, "torchax jit (cpu)", lambda: (*measure_torchax(model, args), None, None, 1.0))
        if model == "mingpt":
            add(model, "jax jit (cpu)", lambda: measure_jax(args))
    for model in args.workloads:
        base = next(r["step_ms"] for r in rows if r["model"] == model and r["variant"] == "cpu eager")
        for row in rows:
            if row["model"] == model:
                row["vs_cpu_eager"] = row["step_ms"] / base

    print(f"train step (forward+backward+AdamW), batch {args.batch}, "
          f"plugin {torch.tpu.get_device_name()}")
    print(f"{'model':<8}{'variant':<20}{'first s':>9}{'step ms':>10}{'x cpu eager':>12}"
          f"{'execs/step':>12}{'floor ms':>10}{'host ms':>9}{'host %':>8}")
    for row in rows:
        executions = row["executions_per_step"]
        floor = "" if row["floor_ms"] is None else f"{row['floor_ms']:.2f}"
        host = "" if row["floor_ms"] is None else f"{row['host_overhead_ms']:.2f}"
        share = "" if row["floor_ms"] is None else f"{row['host_share']:.0%}"
        print(f"{row['model']:<8}{row['variant']:<20}{row['first_s']:>9.2f}{row['step_ms']:>10.2f}"
              f"{row['vs_cpu_eager']:>12.2f}{'' if executions is None else f'{executions:.1f}':>12}"
              f"{floor:>10}{host:>9}{share:>8}")
        if row["error"]:
            print(f"  failed: {row['error']}")
    for model in args.workloads:
        by_name = {row["variant"]: row for row in rows if row["model"] == model}
        compiled = by_name.get("tpu compiled")
        for peer in ("torchax jit (cpu)", "jax jit (cpu)"):
            if compiled and peer in by_name and not by_name[peer]["error"]:
                print(f"{model}: tpu compiled step = {compiled['step_ms'] / by_name[peer]['step_ms']:.2f}x "
                      f"{peer}'s (goal <= 1.0); host overhead {compiled.get('host_share', float('nan')):.0%} "
                      f"of the step (goal <= 15%)")

    def plot(axes):
        names = [name for name, *_ in variants] + ["torchax jit (cpu)", "jax jit (cpu)"]
        width = 0.8 / len(names)
        for k, name in enumerate(names):
            values = [next((r["step_ms"] for r in rows if r["model"] == m and r["variant"] == name),
                           float("nan")) for m in args.workloads]
            axes.bar([p + (k - len(names) / 2 + 0.5) * width for p in range(len(args.workloads))],
                     values, width, label=name)
        axes.set_xticks(range(len(args.workloads)), args.workloads)
        axes.set_yscale("log")
        axes.set_ylabel("milliseconds per training step (log)")
        axes.set_title(f"torch.compile: training step time, batch {args.batch}")
        axes.legend()

    paths = write_results("compile", {"config": vars(args), "rows": rows, "machine": machine()}, plot)
    print("wrote", *[str(p) for p in paths if p])


if __name__ == "__main__":
    main()

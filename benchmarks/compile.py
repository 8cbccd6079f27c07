"""Training-step time under torch.compile(backend="tpu") vs tpu strict eager vs PyTorch CPU eager
vs inductor on CPU vs the same minGPT written in JAX and jitted on the CPU, one run.

    .venv/bin/python benchmarks/compile.py [--number 5] [--repeats 3] [--warmup 3] [--no-inductor]

A step is forward + backward + AdamW step (the same step functions as benchmarks/train_step.py),
compiled whole where a column says so. "first" is the cold first step (Dynamo tracing and XLA
compilation included). The JAX column (benchmarks/jax_mingpt.py, minGPT only) is the reference
for what the XLA CPU compiler does with the whole step; it needs `.venv/bin/pip install
'jax[cpu]'` and is skipped with a note without it. Writes benchmarks/results/compile.{json,png}.
"tpu defer_and_fuse" is eager code in the DeferAndFuse mode. Every step ends synchronized.
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
import torch._dynamo

import torch_tpu
from common import machine, time_per_call, write_results
from train_step import gpt_step, mingpt, resnet_step


def measure(factory, device, compiled_backend, args, sync, mode="strict"):
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
    return first, seconds


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
                                number=args.number)


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
    for model, factory in [("mingpt", gpt_step), ("resnet", resnet_step)]:
        for name, device, backend, sync, mode in variants:
            try:
                first, seconds = measure(factory, device, backend, args, sync, mode)
                error = None
            except Exception as exception:  # report and keep going
                first, seconds = float("nan"), float("nan")
                error = f"{type(exception).__name__}: {str(exception)[:200]}"
            metrics = torch_tpu.metrics()
            rows.append({"model": model, "variant": name, "first_s": first, "step_ms": seconds * 1e3,
                         "executions_per_step": (metrics["execute_count"] /
                                                 max(1, args.number * args.repeats + args.warmup)
                                                 if device.type == "tpu" else None),
                         "error": error})
    try:
        first, seconds = measure_jax(args)
        error = None
    except Exception as exception:  # jax missing, or a mismatch: report it
        first, seconds = float("nan"), float("nan")
        error = f"{type(exception).__name__}: {str(exception)[:300]}"
    rows.append({"model": "mingpt", "variant": "jax jit (cpu)", "first_s": first,
                 "step_ms": seconds * 1e3, "executions_per_step": 1.0, "error": error})
    for model in ("mingpt", "resnet"):
        base = next(r["step_ms"] for r in rows if r["model"] == model and r["variant"] == "cpu eager")
        for row in rows:
            if row["model"] == model:
                row["vs_cpu_eager"] = row["step_ms"] / base

    print(f"train step (forward+backward+AdamW), batch {args.batch}, "
          f"plugin {torch.tpu.get_device_name()}")
    print(f"{'model':<8}{'variant':<20}{'first s':>9}{'step ms':>10}{'x cpu eager':>12}"
          f"{'execs/step':>12}")
    for row in rows:
        executions = row["executions_per_step"]
        print(f"{row['model']:<8}{row['variant']:<20}{row['first_s']:>9.2f}{row['step_ms']:>10.2f}"
              f"{row['vs_cpu_eager']:>12.2f}{'' if executions is None else f'{executions:.1f}':>12}")
        if row["error"]:
            print(f"  failed: {row['error']}")
    by_name = {row["variant"]: row for row in rows if row["model"] == "mingpt"}
    if "jax jit (cpu)" in by_name and "tpu compiled" in by_name:
        ratio = by_name["jax jit (cpu)"]["step_ms"] / by_name["tpu compiled"]["step_ms"]
        print(f"minGPT: tpu compiled runs at {ratio:.2f}x the JAX step's speed (goal >= 0.95)")

    def plot(axes):
        names = [name for name, *_ in variants] + ["jax jit (cpu)"]
        width = 0.8 / len(names)
        for k, name in enumerate(names):
            values = [next((r["step_ms"] for r in rows if r["model"] == m and r["variant"] == name),
                           float("nan")) for m in ("mingpt", "resnet")]
            axes.bar([p + (k - len(names) / 2 + 0.5) * width for p in range(2)], values, width,
                     label=name)
        axes.set_xticks([0, 1], ["minGPT", "ResNet"])
        axes.set_yscale("log")
        axes.set_ylabel("milliseconds per training step (log)")
        axes.set_title(f"torch.compile: training step time, batch {args.batch}")
        axes.legend()

    paths = write_results("compile", {"config": vars(args), "rows": rows, "machine": machine()}, plot)
    print("wrote", *[str(p) for p in paths if p])


if __name__ == "__main__":
    main()

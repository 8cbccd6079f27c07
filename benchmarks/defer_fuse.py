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
Prints milliseconds per step, programs executed per step and bytes moved per step for each mode
(defer-and-fuse twice: as it runs, following the step it recorded before, exec/deferred_replay.cc,
with "replayed" graphs per step; and with replay off, recording every graph exactly), and,
where a defer-and-fuse step is one program, its floor (that program replayed back to back
from C++ with its inputs bound) and the host overhead (step time - floor). Then, alone:
  record cost   a chain of --chain 64x64 adds issued without a sync: microseconds per op to
                record it (defer-and-fuse, replaying and with replay off) vs to launch it
                (strict) vs CPU eager's add;
  read          an op whose result the host reads at once, `(x + 1).sum().item()`: microseconds
                per read in each mode, CPU eager's and JAX jit's (when installed) beside them;
  growing       a decoder step over a KV cache grown by torch.cat (--decode-steps lengths from 6,
                the host reading each step's output), each mode in a fresh process with empty
                cache tiers: programs built as the length grows (defer-and-fuse's fused
                programs, strict's one-op programs; both share programs per bucket of the
                length), steps per second of a second pass over the same lengths and, for
                defer-and-fuse, its graphs that replayed the step of the length before and a
                third pass with replay off. HF models: benchmarks/generation.py.
Writes benchmarks/results/defer_fuse.{json,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

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


def measure_tpu(factory, mode: str, args, replay: bool = True) -> dict:
    timing = dict(warmup=args.warmup, repeats=args.repeats, number=args.number)
    torch_tpu._C._set_fuse_replay(replay)
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
    torch_tpu._C._set_fuse_replay(True)
    per_step = {key: metrics.get(key, 0) / args.number for key in
                ("execute_count", "compile_count", "transfer_to_device_bytes", "transfer_to_host_bytes",
                 "fused_ops", "fused_replays")}
    return {"ms": seconds * 1e3, **per_step, "fuse_cuts": metrics["fuse_cuts"],
            "floor_ms": floor_ms,
            "host_overhead_ms": seconds * 1e3 - floor_ms if floor_ms is not None else None}


def record_cost(args) -> dict:
    """Microseconds per op of a chain of adds, issued without waiting for any result."""
    def chain(device):
        x = torch.randn(64, 64, device=device)

        def run():
            y = x
            for _ in range(args.chain):
                y = y + x
            return y
        return run

    per_op = {}
    for mode in ("cpu", "strict", "defer_and_fuse", "defer_and_fuse (no replay)"):
        device = torch.device("cpu" if mode == "cpu" else "tpu")
        torch_tpu._C._set_fuse_replay(mode != "defer_and_fuse (no replay)")
        with torch_tpu.eager_mode({"cpu": "strict", "strict": "strict"}.get(mode, "defer_and_fuse")):
            run = chain(device)
            sync = torch.tpu.synchronize
            for _ in range(3):  # compiles the programs (strict: one; defer: the chain's graph)
                run()
                sync()
            timings = []
            for _ in range(args.repeats * 3):
                start = time.perf_counter()
                run()
                timings.append(time.perf_counter() - start)  # issue/record only: no sync
                sync()
        per_op[mode] = statistics.median(timings) / args.chain * 1e6
    torch_tpu._C._set_fuse_replay(True)
    return {"ops": args.chain, "us_per_op": per_op,
            "record_vs_launch": per_op["defer_and_fuse"] / per_op["strict"]}


def read_round_trip(args) -> dict:
    """Microseconds per `(x + 1).sum().item()` on a 4x64 tensor: an op issued and its result read
    back by the host at once, what a loop that reads a loss or a generated token pays per read.
    JAX's peer (`jit` of the same expression, `float()` of its result) on its CPU client when
    jax is installed."""
    x_cpu = torch.randn(4, 64)
    per_read = {}
    for mode in ("cpu", "strict", "defer_and_fuse"):
        x = x_cpu.to("cpu" if mode == "cpu" else "tpu")
        with torch_tpu.eager_mode("strict" if mode == "cpu" else mode):
            for _ in range(50):
                (x + 1).sum().item()
            timings = []
            for _ in range(args.repeats * 3):
                start = time.perf_counter()
                for _ in range(200):
                    (x + 1).sum().item()
                timings.append((time.perf_counter() - start) / 200)
        per_read[mode] = statistics.median(timings) * 1e6
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return {"us_per_read": per_read}
    f = jax.jit(lambda v: (v + 1).sum())
    x = jnp.asarray(x_cpu.numpy())
    for _ in range(50):
        float(f(x))
    timings = []
    for _ in range(args.repeats * 3):
        start = time.perf_counter()
        for _ in range(200):
            float(f(x))
        timings.append((time.perf_counter() - start) / 200)
    per_read["jax jit"] = statistics.median(timings) * 1e6
    return {"us_per_read": per_read}


REPORTED_LENGTHS = (16, 32, 64, 128, 256, 512)


def growing_steps(device, count):
    """A decoder step over a KV cache grown by torch.cat, `count` times; the host reads each
    step's output. Returns the programs built by each reported length (and the last step) and
    the seconds of each step (metrics are read outside the timed steps)."""
    generator = torch.Generator().manual_seed(0)
    dim = 64
    q = torch.randn(4, 1, dim, generator=generator).to(device)
    weight = (torch.randn(dim, dim, generator=generator) / dim ** 0.5).to(device)
    keys = torch.randn(4, 5, dim, generator=generator).to(device)
    row = torch.randn(4, 1, dim, generator=generator).to(device)
    built, times = {}, []
    for step in range(count):
        start = time.perf_counter()
        keys = torch.cat([keys, torch.tanh(row @ weight)], 1)
        scores = torch.softmax(q @ keys.transpose(1, 2) * dim ** -0.5, -1)
        row = (scores @ keys) + q
        row.cpu()
        times.append(time.perf_counter() - start)
        length = keys.shape[1]
        if length in REPORTED_LENGTHS or step == count - 1:
            metrics = torch_tpu.metrics()
            # Programs this process built: fused programs, or one-op plans compiled or loaded.
            built[length] = (metrics.get("fused_programs", 0) if torch_tpu.get_eager_mode() ==
                             "defer_and_fuse" else metrics["compile_count"])
    return built, times


def growing_child(mode: str, steps: int) -> None:
    """Runs in a fresh process with empty cache tiers (see growing_decoder)."""
    if mode == "cpu":
        steps_per_s = steps / sum(growing_steps(torch.device("cpu"), steps)[1])
        print(json.dumps({"steps_per_s": steps_per_s}))
        return
    extra = {}
    with torch_tpu.eager_mode(mode):
        built, _ = growing_steps(torch.device("tpu"), steps)
        replays_before = torch_tpu.metrics().get("fused_replays", 0)
        _, times = growing_steps(torch.device("tpu"), steps)  # every length's program exists
        if mode == "defer_and_fuse":
            # Graphs that followed the step of the length before (replay across a bucket's
            # lengths), and the same pass with replay off.
            extra["replayed"] = torch_tpu.metrics().get("fused_replays", 0) - replays_before
            torch_tpu._C._set_fuse_replay(False)
            try:
                extra["steps_per_s_replay_off"] = steps / sum(
                    growing_steps(torch.device("tpu"), steps)[1])
            finally:
                torch_tpu._C._set_fuse_replay(True)
    print(json.dumps({
        # Programs built when the cache has reached each length (5 + steps so far).
        "programs_at_length": {length: built[length] for length in REPORTED_LENGTHS
                               if length in built},
        "programs": built[max(built)],
        "steps_per_s": steps / sum(times),
        **extra,
    }))


def growing_decoder(args) -> dict:
    """Programs built and steps per second of the growing decoder, each mode in a fresh process
    with empty cache tiers (so every program it needs is built), as generation.py runs HF's."""
    result = {"steps": args.decode_steps, "first_length": 6}
    for mode in ("cpu", "strict", "defer_and_fuse"):
        with tempfile.TemporaryDirectory() as shared:
            env = {**os.environ, "TORCH_TPU_SHARED_CACHE_DIR": shared}
            env.pop("TORCH_TPU_CACHE_DIR", None)
            env.pop("TORCH_TPU_DEFER_AND_FUSE", None)
            child = subprocess.run(
                [sys.executable, __file__, "--growing-child", mode,
                 "--decode-steps", str(args.decode_steps)],
                env=env, capture_output=True, text=True, timeout=1800)
        if child.returncode != 0:
            result[mode] = {"error": child.stderr.strip().splitlines()[-1][:200]}
            continue
        result[mode] = json.loads(child.stdout.strip().splitlines()[-1])
    return result


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
    parser.add_argument("--chain", type=int, default=400, help="adds in the record-cost chain")
    parser.add_argument("--decode-steps", type=int, default=250, help="growing decoder steps")
    parser.add_argument("--growing-child", choices=["cpu", "strict", "defer_and_fuse"],
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.growing_child:
        growing_child(args.growing_child, args.decode_steps)
        return

    rows = []
    for name, factory in [("block", block_step), ("mingpt", gpt_step), ("resnet", resnet_step)]:
        timing = dict(warmup=args.warmup, repeats=args.repeats, number=args.number)
        cpu_ms = time_per_call(factory(torch.device("cpu"), args), lambda: None, **timing) * 1e3
        strict = measure_tpu(factory, "strict", args)
        fused = measure_tpu(factory, "defer_and_fuse", args)
        recorded = measure_tpu(factory, "defer_and_fuse", args, replay=False)
        rows.append({"workload": name, "cpu_ms": cpu_ms, "strict": strict, "fuse": fused,
                     "fuse_no_replay": recorded,
                     "replay_speedup": recorded["ms"] / fused["ms"],
                     "fuse_speedup_over_strict": strict["ms"] / fused["ms"],
                     "fuse_vs_cpu": cpu_ms / fused["ms"]})

    print(f"defer-and-fuse vs strict vs CPU eager, batch {args.batch}x{args.block}, dim {args.dim}, "
          f"plugin {torch.tpu.get_device_name()}")
    print(f"{'workload':<10}{'cpu ms':>9}{'strict ms':>11}{'fuse ms':>9}{'fuse/strict':>13}{'cpu/fuse':>10}"
          f"{'programs strict':>17}{'programs fuse':>15}{'no replay ms':>14}{'replayed':>10}")
    for row in rows:
        print(f"{row['workload']:<10}{row['cpu_ms']:>9.2f}{row['strict']['ms']:>11.2f}{row['fuse']['ms']:>9.2f}"
              f"{row['fuse_speedup_over_strict']:>12.2f}x{row['fuse_vs_cpu']:>9.2f}x"
              f"{row['strict']['execute_count']:>17.1f}{row['fuse']['execute_count']:>15.1f}"
              f"{row['fuse_no_replay']['ms']:>14.2f}{row['fuse']['fused_replays']:>10.2f}")
    print("fused step floor (its one program replayed from C++) and host overhead (step - floor):")
    for row in rows:
        fuse = row["fuse"]
        if fuse["floor_ms"] is None:
            print(f"  {row['workload']:<10} not one program per step")
        else:
            print(f"  {row['workload']:<10} floor {fuse['floor_ms']:.2f} ms, host overhead "
                  f"{fuse['host_overhead_ms']:.2f} ms ({fuse['host_overhead_ms'] / fuse['ms']:.0%})")

    recording = record_cost(args)
    print(f"record cost, a chain of {recording['ops']} 64x64 adds, us per op: " +
          ", ".join(f"{mode} {us:.2f}" for mode, us in recording["us_per_op"].items()) +
          f" (recording / strict launch: {recording['record_vs_launch']:.2f})")
    reads = read_round_trip(args)
    print("host read round trip, (x + 1).sum().item() of a 4x64 tensor, us per read: " +
          ", ".join(f"{mode} {us:.1f}" for mode, us in reads["us_per_read"].items()))
    growing = growing_decoder(args)
    print(f"growing KV cache, lengths 6..{5 + growing['steps']}, fresh caches; steps/s of a "
          f"second pass:  CPU eager {growing['cpu'].get('steps_per_s', 0):.0f} steps/s")
    for mode in ("strict", "defer_and_fuse"):
        row = growing[mode]
        if "error" in row:
            print(f"  {mode:<15} error: {row['error']}")
            continue
        lengths = ", ".join(f"{length}: {count}" for length, count in
                            row["programs_at_length"].items())
        replay = (f"; {row['replayed']} of {growing['steps']} graphs replayed, "
                  f"{row['steps_per_s_replay_off']:.0f} steps/s with replay off"
                  if "replayed" in row else "")
        print(f"  {mode:<15} {row['steps_per_s']:.0f} steps/s, programs built by length "
              f"{lengths}{replay}")

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

    paths = write_results("defer_fuse", {"config": vars(args), "rows": rows,
                                         "record_cost": recording, "read_round_trip": reads,
                                         "growing": growing,
                                         "machine": machine()}, plot)
    print("wrote", *[str(p) for p in paths if p])


if __name__ == "__main__":
    main()

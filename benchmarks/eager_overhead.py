"""Per-op latency of small-tensor ops in strict eager mode: tpu vs PyTorch CPU eager, one run.

    .venv/bin/python benchmarks/eager_overhead.py [--size 64] [--number 300] [--threads N]

For every op it also measures the floor: the same compiled program executed in a C++ loop straight
through PJRT with the same argument buffers (no PyTorch, no signature, no result wrapping).
Prints microseconds per op, tpu/CPU and tpu/floor ratios, in-place vs out-of-place twins, and
writes benchmarks/results/eager_overhead[_threadsN].{json,png}. Goals: geomean tpu/CPU <= 2x,
tpu within 15% of the floor, in-place ops <= 1.3x their out-of-place twins, and device-side index
checks costing <= 5% on index-taking ops (measured against a child run with
TORCH_TPU_DEVICE_CHECKS=0).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

import torch_tpu
from common import floor_seconds, machine, time_per_call, write_results

OPS = {
    "add": lambda a, b, i: torch.add(a, b),
    "add_alpha": lambda a, b, i: torch.add(a, b, alpha=0.5),
    "mul_scalar": lambda a, b, i: a * 1.5,
    "add_ (in-place)": lambda a, b, i: a.add_(b, alpha=1e-9),
    "mul_ (in-place)": lambda a, b, i: a.mul_(1.0),
    "clone": lambda a, b, i: a.clone(),
    "copy_ (in-place)": lambda a, b, i: a.copy_(b),
    "relu-like where": lambda a, b, i: torch.where(a > 0, a, b),
    "sum": lambda a, b, i: a.sum(),
    "mean(dim)": lambda a, b, i: a.mean(dim=1),
    "mm": lambda a, b, i: a @ b,
    "t().contiguous()": lambda a, b, i: a.t().contiguous(),
    "index_select": lambda a, b, i: a.index_select(0, i),
    "gather": lambda a, b, i: a.gather(0, i.view(-1, 1).expand(-1, a.shape[1])),
    "embedding": lambda a, b, i: torch.nn.functional.embedding(i, a),
    "a[i]": lambda a, b, i: a[i],
    "view+slice+mul": lambda a, b, i: a[1:, ::2] * b[1:, ::2],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=64, help="square tensor side")
    parser.add_argument("--number", type=int, default=300, help="calls per timing run")
    parser.add_argument("--ops", default="", help="comma-separated subset of ops to run")
    parser.add_argument("--json-out", default="", help="write the rows here (used for the child run)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch.set_num_threads for the CPU side (0: PyTorch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    cpu = [torch.randn(args.size, args.size), torch.randn(args.size, args.size),
           torch.randint(0, args.size, (8,))]
    tpu = [t.to("tpu") for t in cpu]
    selected = {name: op for name, op in OPS.items()
                if not args.ops or name in args.ops.split(",")}
    rows = []
    for name, op in selected.items():
        cpu_seconds = time_per_call(lambda: op(*cpu), lambda: None, number=args.number)
        tpu_seconds = time_per_call(lambda: op(*tpu), torch.tpu.synchronize, number=args.number)
        torch.tpu.synchronize()
        floor = floor_seconds(lambda: op(*tpu), number=args.number)
        rows.append({"op": name, "cpu_us": cpu_seconds * 1e6, "tpu_us": tpu_seconds * 1e6,
                     "floor_us": floor * 1e6, "ratio": tpu_seconds / cpu_seconds,
                     "over_floor": tpu_seconds / floor})

    if args.json_out:
        with open(args.json_out, "w") as out:
            json.dump(rows, out)
        return

    index_ops = [name for name in ("index_select", "gather", "embedding", "a[i]")
                 if name in selected]
    with tempfile.TemporaryDirectory() as scratch:
        child_json = os.path.join(scratch, "rows.json")
        subprocess.run([sys.executable, __file__, "--size", str(args.size), "--number",
                        str(args.number), "--ops", ",".join(index_ops), "--json-out", child_json]
                       + (["--threads", str(args.threads)] if args.threads else []),
                       env={**os.environ, "TORCH_TPU_DEVICE_CHECKS": "0"}, check=True,
                       stderr=subprocess.DEVNULL)
        with open(child_json) as rows_file:
            unchecked = {row["op"]: row["tpu_us"] for row in json.load(rows_file)}
    for row in rows:
        if row["op"] in unchecked:
            row["tpu_us_without_checks"] = unchecked[row["op"]]

    print(f"eager overhead, {args.size}x{args.size} float32, strict mode, "
          f"plugin {torch.tpu.get_device_name()}")
    print(f"{'op':<20}{'cpu us':>10}{'tpu us':>10}{'floor us':>10}{'tpu/cpu':>10}{'tpu/floor':>10}")
    for row in rows:
        print(f"{row['op']:<20}{row['cpu_us']:>10.1f}{row['tpu_us']:>10.1f}{row['floor_us']:>10.1f}"
              f"{row['ratio']:>10.2f}{row['over_floor']:>10.2f}")

    def geomean(values):
        product = 1.0
        for value in values:
            product *= value
        return product ** (1 / len(values))

    geometric_mean = geomean([row["ratio"] for row in rows])
    over_floor = geomean([row["over_floor"] for row in rows])
    by_name = {row["op"]: row for row in rows}
    twins = {"add_ (in-place)": "add", "mul_ (in-place)": "mul_scalar", "copy_ (in-place)": "clone"}
    twin_ratios = {name: by_name[name]["tpu_us"] / by_name[twin]["tpu_us"]
                   for name, twin in twins.items() if name in by_name and twin in by_name}
    print(f"threads: {torch.get_num_threads()}")
    print(f"geometric mean ratio tpu/cpu: {geometric_mean:.2f}x (goal: <= 2x)")
    print(f"geometric mean ratio tpu/floor: {over_floor:.2f}x (goal: <= 1.15x)")
    for name, ratio in twin_ratios.items():
        print(f"{name} vs {twins[name]}: {ratio:.2f}x (goal: <= 1.3x)")
    checked = [row["tpu_us"] / row["tpu_us_without_checks"] for row in rows
               if "tpu_us_without_checks" in row]
    check_cost = geomean(checked) if checked else float("nan")
    print(f"device-side index checks on index ops: {check_cost:.3f}x (goal: <= 1.05x)")
    metrics = torch_tpu.metrics()
    print(f"compiles: {metrics['compile_count']}, executions: {metrics['execute_count']}, "
          f"fallbacks: {metrics['fallback_ops']}")

    def plot(axes):
        names = [row["op"] for row in rows]
        positions = range(len(rows))
        axes.bar([p - 0.3 for p in positions], [row["cpu_us"] for row in rows], 0.3, label="CPU eager")
        axes.bar([p + 0.0 for p in positions], [row["tpu_us"] for row in rows], 0.3, label="tpu strict eager")
        axes.bar([p + 0.3 for p in positions], [row["floor_us"] for row in rows], 0.3,
                 label="floor: same program, C++ loop over PJRT")
        axes.set_xticks(list(positions), names, rotation=30, ha="right")
        axes.set_ylabel("microseconds per op")
        axes.set_yscale("log")
        axes.set_title(f"Eager per-op latency, {args.size}x{args.size} float32 (geomean ratio {geometric_mean:.1f}x)")
        axes.legend()

    name = "eager_overhead" + (f"_threads{args.threads}" if args.threads else "")
    paths = write_results(name, {"size": args.size, "threads": torch.get_num_threads(),
                                 "rows": rows, "geometric_mean_ratio": geometric_mean,
                                 "geometric_mean_over_floor": over_floor,
                                 "in_place_vs_out_of_place": twin_ratios,
                                 "index_check_cost": check_cost,
                                 "machine": machine()}, plot)
    print("wrote", *[str(p) for p in paths if p])


if __name__ == "__main__":
    main()

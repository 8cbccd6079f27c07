"""Per-op latency of small-tensor ops in strict eager mode: tpu vs PyTorch CPU eager, one run.

    .venv/bin/python benchmarks/eager_overhead.py [--size 64] [--number 300]

Prints a table of microseconds per op and the tpu/CPU ratio, and writes
benchmarks/results/eager_overhead.{json,png}. The ratio target is <= 3x.
"""

from __future__ import annotations

import argparse

import torch

import torch_tpu
from common import machine, time_per_call, write_results

OPS = {
    "add": lambda a, b, i: torch.add(a, b),
    "add_alpha": lambda a, b, i: torch.add(a, b, alpha=0.5),
    "mul_scalar": lambda a, b, i: a * 1.5,
    "add_ (in-place)": lambda a, b, i: a.add_(b, alpha=1e-9),
    "relu-like where": lambda a, b, i: torch.where(a > 0, a, b),
    "sum": lambda a, b, i: a.sum(),
    "mean(dim)": lambda a, b, i: a.mean(dim=1),
    "mm": lambda a, b, i: a @ b,
    "t().contiguous()": lambda a, b, i: a.t().contiguous(),
    "index_select": lambda a, b, i: a.index_select(0, i),
    "view+slice+mul": lambda a, b, i: a[1:, ::2] * b[1:, ::2],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=64, help="square tensor side")
    parser.add_argument("--number", type=int, default=300, help="calls per timing run")
    args = parser.parse_args()

    torch.manual_seed(0)
    cpu = [torch.randn(args.size, args.size), torch.randn(args.size, args.size),
           torch.randint(0, args.size, (8,))]
    tpu = [t.to("tpu") for t in cpu]
    rows = []
    for name, op in OPS.items():
        cpu_seconds = time_per_call(lambda: op(*cpu), lambda: None, number=args.number)
        tpu_seconds = time_per_call(lambda: op(*tpu), torch.tpu.synchronize, number=args.number)
        rows.append({"op": name, "cpu_us": cpu_seconds * 1e6, "tpu_us": tpu_seconds * 1e6,
                     "ratio": tpu_seconds / cpu_seconds})

    print(f"eager overhead, {args.size}x{args.size} float32, strict mode, "
          f"plugin {torch.tpu.get_device_name()}")
    print(f"{'op':<20}{'cpu us':>10}{'tpu us':>10}{'tpu/cpu':>10}")
    for row in rows:
        print(f"{row['op']:<20}{row['cpu_us']:>10.1f}{row['tpu_us']:>10.1f}{row['ratio']:>10.1f}")
    geometric_mean = 1.0
    for row in rows:
        geometric_mean *= row["ratio"]
    geometric_mean **= 1 / len(rows)
    print(f"geometric mean ratio tpu/cpu: {geometric_mean:.1f}x (goal: <= 3x)")
    metrics = torch_tpu.metrics()
    print(f"compiles: {metrics['compile_count']}, executions: {metrics['execute_count']}, "
          f"fallbacks: {metrics['fallback_ops']}")

    def plot(axes):
        names = [row["op"] for row in rows]
        positions = range(len(rows))
        axes.bar([p - 0.2 for p in positions], [row["cpu_us"] for row in rows], 0.4, label="CPU eager")
        axes.bar([p + 0.2 for p in positions], [row["tpu_us"] for row in rows], 0.4, label="tpu strict eager")
        axes.set_xticks(list(positions), names, rotation=30, ha="right")
        axes.set_ylabel("microseconds per op")
        axes.set_yscale("log")
        axes.set_title(f"Eager per-op latency, {args.size}x{args.size} float32 (geomean ratio {geometric_mean:.1f}x)")
        axes.legend()

    paths = write_results("eager_overhead", {"size": args.size, "rows": rows,
                                             "geometric_mean_ratio": geometric_mean,
                                             "machine": machine()}, plot)
    print("wrote", *[str(p) for p in paths if p])


if __name__ == "__main__":
    main()

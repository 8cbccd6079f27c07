"""Training-step time of the example models: tpu (strict eager) vs PyTorch CPU eager, one run.

    .venv/bin/python benchmarks/train_step.py [--number 5] [--repeats 3] [--warmup 3]

A step is forward + backward + AdamW step on a fixed batch, synchronized at the end of each timing
run (`torch.tpu.synchronize()` on tpu); warmup steps (which include XLA compilation on tpu) are
excluded. Models: examples/mingpt.py and examples/resnet.py at their default sizes. Prints a table
of milliseconds per step and the tpu/CPU ratio, the CPU fallbacks seen on tpu, and writes
benchmarks/results/train_step.{json,png}.
"""

from __future__ import annotations

import argparse
import warnings
import sys
from pathlib import Path

import torch
from torch.nn import functional as F

import torch_tpu
from common import machine, time_per_call, write_results

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import mingpt  # noqa: E402
import resnet  # noqa: E402
import models  # noqa: E402  (benchmarks/models.py)


def gpt_step(device: torch.device, args):
    model = mingpt.build(0, block=args.block, dim=args.dim).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x, y = (t.to(device) for t in mingpt.make_batches(1, args.batch, args.block, 0)[0])

    def step():
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return step


def resnet_step(device: torch.device, args):
    model = resnet.build(0, width=args.width, blocks=args.blocks).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    x, y = (t.to(device) for t in resnet.make_batches(1, args.batch, 0)[0])

    def step():
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return step


def mlp_step(device: torch.device, args):
    """A 4-block residual MLP (benchmarks/models.py), batch 16, width 128, AdamW."""
    model = models.residual_mlp(0).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = models.residual_mlp_batch(0).to(device)

    def step():
        loss = models.residual_mlp_loss(model(x))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--block", type=int, default=32, help="GPT context length")
    parser.add_argument("--dim", type=int, default=64, help="GPT width")
    parser.add_argument("--width", type=float, default=0.25, help="ResNet channel multiplier")
    parser.add_argument("--blocks", type=int, default=1, help="ResNet BasicBlocks per stage")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation)")
    parser.add_argument("--repeats", type=int, default=3, help="timing runs (the median is kept)")
    parser.add_argument("--number", type=int, default=5, help="steps per timing run")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="tpu: .* is not lowered")  # the table lists fallbacks

    tpu = torch.device("tpu")
    rows = []
    for name, factory in [("mingpt", gpt_step), ("resnet", resnet_step)]:
        timing = dict(warmup=args.warmup, repeats=args.repeats, number=args.number)
        cpu_seconds = time_per_call(factory(torch.device("cpu"), args), lambda: None, **timing)
        torch_tpu.reset_metrics()
        try:
            tpu_seconds = time_per_call(factory(tpu, args), torch.tpu.synchronize, **timing)
            error = None
        except Exception as exception:  # an op the backend cannot run yet: report, keep going
            tpu_seconds, error = float("nan"), f"{type(exception).__name__}: {str(exception)[:200]}"
        metrics = torch_tpu.metrics()
        rows.append({"model": name, "cpu_ms": cpu_seconds * 1e3, "tpu_ms": tpu_seconds * 1e3,
                     "ratio": tpu_seconds / cpu_seconds, "compiles": metrics["compile_count"],
                     "fallback_ops": dict(metrics["fallback_ops"]), "error": error})

    print(f"train step (forward+backward+AdamW), batch {args.batch}, strict eager, "
          f"plugin {torch.tpu.get_device_name()}")
    print(f"{'model':<10}{'cpu ms':>10}{'tpu ms':>10}{'tpu/cpu':>10}{'compiles':>10}{'fallback calls':>16}")
    for row in rows:
        print(f"{row['model']:<10}{row['cpu_ms']:>10.2f}{row['tpu_ms']:>10.2f}{row['ratio']:>10.1f}"
              f"{row['compiles']:>10}{sum(row['fallback_ops'].values()):>16}")
    for row in rows:
        if row["fallback_ops"]:
            print(f"{row['model']} CPU fallbacks: {row['fallback_ops']}")
        if row["error"]:
            print(f"{row['model']} failed on tpu: {row['error']}")

    def plot(axes):
        positions = range(len(rows))
        axes.bar([p - 0.2 for p in positions], [row["cpu_ms"] for row in rows], 0.4, label="CPU eager")
        axes.bar([p + 0.2 for p in positions], [row["tpu_ms"] for row in rows], 0.4, label="tpu strict eager")
        axes.set_xticks(list(positions), [f"{row['model']} ({row['ratio']:.1f}x)" for row in rows])
        axes.set_ylabel("milliseconds per training step")
        axes.set_title(f"Training step time, batch {args.batch} (forward + backward + AdamW)")
        axes.legend()

    paths = write_results("train_step", {"config": vars(args), "rows": rows, "machine": machine()}, plot)
    print("wrote", *[str(p) for p in paths if p])


if __name__ == "__main__":
    main()

"""What the compilation cache saves: time to the first finished training step, cold vs warm.

    .venv/bin/python benchmarks/compile_cache.py [--models mingpt resnet]

Each model runs in three fresh processes: cold (empty shared and persistent tiers), warm tier 2
(the shared directory the cold run filled, no persistent tier) and warm tier 3 (an empty shared
directory, the persistent directory the cold run filled). A step is forward + backward + AdamW at
the examples' default sizes; the time runs from building the model to the synchronized end of the
first step. Prints a table and writes benchmarks/results/compile_cache.{json,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import machine, write_results

CHILD = r'''
import json, sys, time, warnings
from pathlib import Path
import torch
from torch.nn import functional as F
import torch_tpu
sys.path.insert(0, str(Path(sys.argv[1]) / "examples"))
import mingpt, resnet
warnings.filterwarnings("ignore")
device = torch.device("tpu")
start = time.perf_counter()
if sys.argv[2] == "mingpt":
    model = mingpt.build(0).to(device)
    x, y = (t.to(device) for t in mingpt.make_batches(1, 8, 32, 0)[0])
    loss_of = lambda: model(x, y)[1]
else:
    model = resnet.build(0, width=0.25, blocks=1).to(device)
    x, y = (t.to(device) for t in resnet.make_batches(1, 8, 0)[0])
    loss_of = lambda: F.cross_entropy(model(x), y)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
loss = loss_of()
optimizer.zero_grad(set_to_none=True)
loss.backward()
optimizer.step()
torch.tpu.synchronize()
seconds = time.perf_counter() - start
metrics = torch_tpu.metrics()
print(json.dumps({"seconds": seconds, "compiles": metrics["compile_count"],
                  "compile_seconds": metrics["compile_seconds"],
                  "hits_shared": metrics["cache_hits_shared"],
                  "hits_remote": metrics["cache_hits_remote"]}))
'''


def run(model: str, shared: Path, remote: Path | None) -> dict:
    env = {**os.environ, "TORCH_TPU_SHARED_CACHE_DIR": str(shared)}
    env.pop("TORCH_TPU_CACHE_DIR", None)
    if remote is not None:
        env["TORCH_TPU_CACHE_DIR"] = str(remote)
    root = Path(__file__).resolve().parent.parent
    completed = subprocess.run([sys.executable, "-c", CHILD, str(root), model], env=env,
                               capture_output=True, text=True, check=True)
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["mingpt", "resnet"])
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for model in args.models:
            base = Path(scratch) / model
            cold = run(model, base / "shared", base / "remote")
            warm_shared = run(model, base / "shared", None)
            warm_remote = run(model, base / "other_shared", base / "remote")
            for name, result in [("cold", cold), ("warm tier 2", warm_shared),
                                 ("warm tier 3", warm_remote)]:
                rows.append({"model": model, "run": name, **result,
                             "speedup": cold["seconds"] / result["seconds"]})
    print(f"{'model':<8}{'run':<13}{'first step s':>13}{'compiles':>10}{'compile s':>11}"
          f"{'speedup':>9}")
    for row in rows:
        print(f"{row['model']:<8}{row['run']:<13}{row['seconds']:>13.2f}{row['compiles']:>10}"
              f"{row['compile_seconds']:>11.2f}{row['speedup']:>9.1f}")

    def plot(axes):
        labels = [f"{row['model']}\n{row['run']}" for row in rows]
        axes.bar(range(len(rows)), [row["seconds"] for row in rows])
        axes.set_xticks(range(len(rows)), labels, fontsize=8)
        axes.set_ylabel("seconds to the first finished training step")
        axes.set_title("Compilation cache: cold vs warm shared (tier 2) vs warm persistent (tier 3)")

    paths = write_results("compile_cache", {"rows": rows, "machine": machine()}, plot)
    print("wrote", *[str(p) for p in paths if p])


if __name__ == "__main__":
    main()

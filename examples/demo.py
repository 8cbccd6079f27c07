"""The main demo: the getting-started snippet, then a short minGPT training run on the `tpu` device."""

import pprint
import sys
from pathlib import Path

import torch

import torch_tpu

print("== runtime ==")
pprint.pprint(torch_tpu.runtime_info(), sort_dicts=False)
print("device name:", torch.tpu.get_device_name())

print("\n== getting started ==")
# The product's getting-started snippet, as written (only `import torch` is needed).
device = torch.device("tpu")
tpu_tensor = torch.ones((5, 5)).to(device)
direct_tpu_tensor = torch.randn((5, 5), device="tpu")
result_on_cpu = (tpu_tensor + direct_tpu_tensor).cpu()
print(f"Result Checksum (Sum): {result_on_cpu.sum():.4f}")

print("\n== training minGPT on tpu ==")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import mingpt  # noqa: E402  (examples/mingpt.py)

torch_tpu.reset_metrics()
losses = mingpt.train("tpu", steps=30, seed=0)
for step, loss in enumerate(losses):
    if step % 5 == 0 or step == len(losses) - 1:
        print(f"step {step:2d}  loss {loss:.4f}")
assert losses[-1] < 0.8 * losses[0], "the loss did not go down"
fallbacks = torch_tpu.metrics()["fallback_ops"]
print("ops that ran on the CPU fallback:", fallbacks or "none")
print("\n== metrics ==")
print(torch_tpu.metrics_report())

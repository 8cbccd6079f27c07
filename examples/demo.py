"""The main demo: the getting-started snippet, then a short training run on the `tpu` device."""

import pprint

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

print("\n== training a linear model on tpu ==")
torch.manual_seed(0)
true_weight = torch.randn(8, 1)
features = torch.randn(256, 8)
targets = features @ true_weight + 0.1 * torch.randn(256, 1)
model = torch.nn.Linear(8, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
x, y = features.to(device), targets.to(device)
for step in range(30):
    optimizer.zero_grad()
    error = model(x) - y
    loss = (error * error).mean()
    loss.backward()
    optimizer.step()
    if step % 5 == 0 or step == 29:
        print(f"step {step:2d}  loss {loss.item():.5f}")
distance = (model.weight.detach().cpu().t() - true_weight).abs().max().item()
print(f"max |learned - true weight| = {distance:.4f}")
print("\n== metrics ==")
print(torch_tpu.metrics_report())

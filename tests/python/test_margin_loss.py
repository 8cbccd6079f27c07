"""multi_margin_loss lowered natively (forward and backward), against PyTorch's CPU results:
p = 1 and 2, margins, class weights, every reduction, unbatched input."""

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from conftest import assert_same, sample


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("p,margin,weighted", [(1, 1.0, False), (2, 0.5, True), (1, 2.0, True)])
def test_multi_margin_loss_matches_cpu(reduction, p, margin, weighted):
    x = sample((5, 4), torch.float32) / 3
    target = torch.tensor([0, 3, 1, 1, 2])
    weight = torch.tensor([0.5, 1.0, 2.0, 1.5]) if weighted else None
    torch_tpu.reset_metrics()
    for inputs, labels in ((x, target), (x[1], target[1])):
        results = {}
        for device in ("cpu", "tpu"):
            leaf = inputs.to(device).detach().requires_grad_()
            loss = F.multi_margin_loss(leaf, labels.to(device), p=p, margin=margin,
                                       weight=None if weight is None else weight.to(device),
                                       reduction=reduction)
            loss.backward(sample(loss.shape, torch.float32, seed=1).to(device))
            results[device] = (loss, leaf.grad)
        for got, expected in zip(results["tpu"], results["cpu"]):
            assert_same(got, expected, rtol=1e-5, atol=1e-6)
    assert torch_tpu.metrics()["fallback_ops"] == {}

"""multi_margin_loss and multilabel_margin_loss lowered natively (forward and backward), against
PyTorch's CPU results: p = 1 and 2, margins, class weights, every reduction, unbatched input;
multilabel targets ending at the first -1, repeated targets, and CPU's errors."""

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from conftest import assert_like_cpu, assert_same, sample


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


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss_matches_cpu(reduction):
    x = sample((3, 4), torch.float64) / 3
    # Targets end at the first -1 (later entries are ignored); a repeated target counts twice.
    target = torch.tensor([[3, 0, -1, 1], [1, 1, 2, -1], [-1, 2, 0, 0]])
    torch_tpu.reset_metrics()
    for inputs, labels in ((x, target), (x[0], target[0])):
        results = {}
        for device in ("cpu", "tpu"):
            leaf = inputs.to(device).detach().requires_grad_()
            loss = F.multilabel_margin_loss(leaf, labels.to(device), reduction=reduction)
            loss.backward(sample(loss.shape, torch.float64, seed=1).to(device))
            results[device] = (loss, leaf.grad)
        for got, expected in zip(results["tpu"], results["cpu"]):
            assert_same(got, expected)
    assert torch_tpu.metrics()["fallback_ops"] == {}


def test_multilabel_margin_loss_errors_match_cpu():
    x, target = torch.ones(2, 4), torch.tensor([[0, 1, -1, 0], [2, 0, 1, 3]])
    assert_like_cpu(lambda d: F.multilabel_margin_loss(x.to(d), target[:, :3].to(d)),
                    message="aten::multilabel_margin_loss_forward: inconsistent target size: "
                            "[2, 3] for input of size: [2, 4]")
    assert_like_cpu(lambda d: F.multilabel_margin_loss(x.bfloat16().to(d), target.to(d)),
                    message="aten::multilabel_margin_loss_forward: "
                            "\"multilabel_margin_loss_forward_out_frame\" not implemented for "
                            "'BFloat16'")
    with pytest.raises(RuntimeError, match="argument #2 'target' is out of range"):
        F.multilabel_margin_loss(x.to("tpu"), (target + 1).to("tpu")).cpu()

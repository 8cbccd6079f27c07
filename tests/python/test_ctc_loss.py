"""ctc_loss lowered natively (forward and backward, loops over time on the device), against
PyTorch's CPU results: padded and concatenated targets, repeated labels, a nonzero blank, empty
targets, every reduction, infeasible alignments with and without zero_infinity, and CPU's
errors."""

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from conftest import assert_like_cpu, assert_same, sample

LOG_PROBS = sample((6, 3, 5), torch.float64).log_softmax(2)
PADDED = torch.tensor([[1, 2, 2], [3, 0, 0], [4, 4, 1]])
CONCATENATED = torch.tensor([1, 2, 2, 3, 4, 1])
TARGET_LENGTHS = torch.tensor([3, 1, 2])


def loss_and_gradient(device, targets, input_lengths, **kwargs):
    leaf = LOG_PROBS.to(device).detach().requires_grad_()
    loss = F.ctc_loss(leaf, targets.to(device), input_lengths, TARGET_LENGTHS, **kwargs)
    loss.sum().backward()
    return loss, leaf.grad


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_ctc_loss_matches_cpu(reduction):
    torch_tpu.reset_metrics()
    # The reductions act on the same per-entry losses: one target layout each is enough.
    for targets in (PADDED, CONCATENATED) if reduction == "none" else (PADDED,):
        expected = loss_and_gradient("cpu", targets, torch.tensor([6, 5, 4]),
                                     reduction=reduction)
        got = loss_and_gradient("tpu", targets, torch.tensor([6, 5, 4]), reduction=reduction)
        for tpu_result, cpu_result in zip(got, expected):
            assert_same(tpu_result, cpu_result)
    assert torch_tpu.metrics()["fallback_ops"] == {}


@pytest.mark.parametrize("zero_infinity", [False, True])
def test_infeasible_ctc_loss_matches_cpu(zero_infinity):
    # One time step cannot emit three labels: the loss is infinite (zeroed with zero_infinity).
    lengths = torch.tensor([1, 6, 6])
    expected = loss_and_gradient("cpu", PADDED, lengths, reduction="none",
                                 zero_infinity=zero_infinity)
    got = loss_and_gradient("tpu", PADDED, lengths, reduction="none",
                            zero_infinity=zero_infinity)
    for tpu_result, cpu_result in zip(got, expected):
        assert_same(tpu_result, cpu_result, equal_nan=True)


def test_ctc_loss_blank_and_empty_target_match_cpu():
    log_probs = sample((5, 2, 4), torch.float32).log_softmax(2)
    assert_like_cpu(lambda d: F.ctc_loss(log_probs.to(d), torch.tensor([[0, 1], [2, 0]], device=d),
                                         torch.tensor([5, 3]), torch.tensor([2, 0]), blank=3,
                                         reduction="none"))
    assert_like_cpu(lambda d: F.ctc_loss(log_probs.bfloat16().to(d), PADDED[:2].to(d),
                                         torch.tensor([5, 3]), torch.tensor([2, 1])),
                    message="aten::_ctc_loss: \"ctc_loss_cpu\" not implemented for 'BFloat16'")

"""EmbeddingBag (_embedding_bag, its forward-only variant and backward ops) runs natively on tpu
and matches CPU: sum, mean and max over offsets (empty bags included), 2-D inputs,
include_last_offset, per_sample_weights, padding_idx, int32 indices, and what bad input raises."""

import pytest
import torch
from torch.nn import functional as F

import torch_tpu
from conftest import assert_same, sample

INDICES = torch.tensor([1, 2, 3, 4, 2, 9, 0, 7])
OFFSETS = torch.tensor([0, 2, 2, 5])  # bags [1, 2], [], [3, 4, 2], [9, 0, 7]


def both(make, *tensors):
    """`make(device, *leaves)` on CPU and tpu with gradient leaves moved from `tensors`; returns
    per device the output followed by each leaf's gradient."""
    results = {}
    for device in ["cpu", "tpu"]:
        leaves = [t.to(device).detach().requires_grad_() for t in tensors]
        out = make(device, *leaves)
        out.backward(sample(out.shape, out.dtype, seed=5).to(device))
        results[device] = [out] + [leaf.grad for leaf in leaves]
    return results


def assert_both_same(results, **tolerances):
    for tpu_result, cpu_result in zip(results["tpu"], results["cpu"]):
        assert_same(tpu_result, cpu_result, **tolerances)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_offsets_forward_and_backward_match_cpu(mode, padding_idx, include_last_offset):
    weight = sample((10, 4), torch.float32)
    offsets = torch.cat([OFFSETS, torch.tensor([len(INDICES)])]) if include_last_offset else OFFSETS
    torch_tpu.reset_metrics()
    results = both(lambda d, w: F.embedding_bag(INDICES.to(d), w, offsets.to(d), mode=mode, padding_idx=padding_idx,
                                                include_last_offset=include_last_offset), weight)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    assert_both_same(results, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_two_dimensional_input(mode):
    weight = sample((12, 3), torch.float32)
    indices = torch.tensor([[1, 2, 3], [3, 3, 11], [0, 5, 5]])
    assert_both_same(both(lambda d, w: F.embedding_bag(indices.to(d), w, mode=mode), weight), rtol=1e-5, atol=1e-5)


def test_module_with_int32_indices_and_offsets():
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(10, 5, mode="mean")
    indices, offsets = INDICES.int(), OFFSETS.int()
    cpu = bag(indices, offsets)
    tpu = bag.to("tpu")(indices.to("tpu"), offsets.to("tpu"))
    assert_same(tpu, cpu.detach(), rtol=1e-6, atol=1e-6)


def test_per_sample_weights_gradients_match_cpu():
    weight = sample((10, 4), torch.float32)
    per_sample = sample((len(INDICES),), torch.float32, seed=2)
    for padding_idx in [None, 2]:
        results = both(lambda d, w, p: F.embedding_bag(INDICES.to(d), w, OFFSETS.to(d), mode="sum",
                                                       per_sample_weights=p, padding_idx=padding_idx),
                       weight, per_sample)
        assert_both_same(results, rtol=1e-5, atol=1e-5)


def test_forward_only_matches_cpu():
    weight = sample((10, 4), torch.float32)
    with torch.no_grad():
        for mode in ["sum", "mean", "max"]:
            cpu = F.embedding_bag(INDICES, weight, OFFSETS, mode=mode)
            tpu = F.embedding_bag(INDICES.to("tpu"), weight.to("tpu"), OFFSETS.to("tpu"), mode=mode)
            assert_same(tpu, cpu)


def test_bfloat16_weight():
    weight = sample((10, 4), torch.bfloat16)
    for mode in ["sum", "mean", "max"]:
        cpu = F.embedding_bag(INDICES, weight, OFFSETS, mode=mode)
        tpu = F.embedding_bag(INDICES.to("tpu"), weight.to("tpu"), OFFSETS.to("tpu"), mode=mode)
        assert_same(tpu, cpu, rtol=1e-2, atol=1e-2)


def test_empty_indices_give_zero_bags():
    weight = sample((10, 4), torch.float32)
    empty = torch.tensor([], dtype=torch.long)
    for mode in ["sum", "mean", "max"]:
        cpu = F.embedding_bag(empty, weight, torch.tensor([0, 0]), mode=mode)
        tpu = F.embedding_bag(empty.to("tpu"), weight.to("tpu"), torch.tensor([0, 0]).to("tpu"), mode=mode)
        assert_same(tpu, cpu)


def test_scale_grad_by_freq_divides_by_each_index_count():
    # The reference is embedding's scale_grad_by_freq, summed per bag: CPU's embedding_bag
    # backward miscounts indices that follow a repeated one after sorting, so it is not used.
    weight = sample((10, 4), torch.float32)
    indices = torch.tensor([1, 2, 3, 4, 2, 9, 0, 2])
    bags = torch.tensor([0, 0, 2, 2, 2, 3, 3, 3])
    cotangent = sample((4, 4), torch.float32, seed=5)
    reference = weight.clone().requires_grad_()
    rows = F.embedding(indices, reference, scale_grad_by_freq=True)
    torch.zeros(4, 4).index_add(0, bags, rows).backward(cotangent)
    tpu_weight = weight.to("tpu").requires_grad_()
    out = F.embedding_bag(indices.to("tpu"), tpu_weight, OFFSETS.to("tpu"), mode="sum", scale_grad_by_freq=True)
    out.backward(cotangent.to("tpu"))
    assert_same(tpu_weight.grad, reference.grad, rtol=1e-5, atol=1e-5)


def aten_bag(device, indices, offsets, mode=0, per_sample_weights=None, weight=None):
    weight = torch.ones(10, 3) if weight is None else weight
    return torch.ops.aten._embedding_bag(weight.to(device), indices.to(device), offsets.to(device), False, mode,
                                         False, per_sample_weights, False, -1)[0]


@pytest.mark.parametrize("make", [
    lambda d: aten_bag(d, INDICES, OFFSETS, mode=3),
    lambda d: aten_bag(d, INDICES, OFFSETS.float()),
    lambda d: aten_bag(d, INDICES.float(), OFFSETS),
    lambda d: aten_bag(d, INDICES, OFFSETS, mode=1, per_sample_weights=torch.ones(len(INDICES), device=d)),
    lambda d: aten_bag(d, INDICES, OFFSETS, per_sample_weights=torch.ones(3, device=d)),
    lambda d: aten_bag(d, INDICES, torch.tensor([1, 2])),  # offsets[0] != 0: a device-side check
    lambda d: aten_bag(d, INDICES, torch.tensor([0, 9])),  # past the end: a device-side check
    lambda d: F.embedding_bag(INDICES.to(d), torch.ones(10, 3, device=d), OFFSETS.to(d), mode="max",
                              per_sample_weights=torch.ones(len(INDICES), device=d)),
], ids=["mode", "offsets-dtype", "indices-dtype", "weights-with-mean", "weights-size", "first-offset",
        "last-offset", "functional-weights-with-max"])
def test_bad_input_raises_like_cpu(make):
    with pytest.raises(Exception) as cpu_error:
        make("cpu")
    with pytest.raises(Exception) as tpu_error:
        make("tpu").cpu()
    assert tpu_error.type is cpu_error.type


def test_out_of_range_index_is_reported(tpu):
    # A device-side index check, as for embedding: IndexError (CPU's embedding_bag raises a
    # RuntimeError from an internal assertion instead).
    with pytest.raises(RuntimeError):
        aten_bag("cpu", torch.tensor([1, 10]), torch.tensor([0, 1]))
    with pytest.raises(IndexError, match="index out of range"):
        aten_bag(tpu, torch.tensor([1, 10]), torch.tensor([0, 1])).cpu()

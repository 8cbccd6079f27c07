"""Advanced indexing follows PyTorch's rules on tpu: mask shapes, broadcasting of mask and integer
indices, index dtypes and devices, TorchScript, and the uint8 deprecation warning.

Everything here is decided from shapes, dtypes and devices, so it holds in every execution mode.
"""

import warnings

import pytest
import torch

from conftest import assert_like_cpu, assert_same

Y = torch.arange(24.0).reshape(2, 3, 4)
X = torch.arange(5.0)
MASK_2x3 = torch.tensor([[True, False, True], [False, True, True]])


INVALID = {
    "short_mask": lambda d: X.to(d)[torch.tensor([True, False], device=d)],
    "long_mask": lambda d: X.to(d)[torch.ones(6, dtype=torch.bool, device=d)],
    "mask_on_second_dim": lambda d: Y.to(d)[:, torch.ones(4, dtype=torch.bool, device=d)],
    "mask_2d_after_int": lambda d: Y.to(d)[torch.tensor([0], device=d), MASK_2x3.t().to(d)],
    "short_mask_put": lambda d: X.to(d).index_put_((torch.tensor([True, False], device=d),),
                                                   torch.tensor(1.0, device=d)),
    "short_mask_setitem": lambda d: X.to(d).__setitem__(torch.tensor([True, False], device=d), 1.0),
    "short_mask_op": lambda d: torch.ops.aten.index(X.to(d), [torch.tensor([True], device=d)]),
    "short_cpu_mask": lambda d: X.to(d)[torch.tensor([True, False])],
    "float_index": lambda d: X.to(d)[torch.tensor([1.0], device=d)],
    "unbroadcastable": lambda d: Y.to(d)[torch.tensor([0, 1], device=d),
                                         torch.tensor([0, 1, 2], device=d)],
    "mask_and_index_unbroadcastable": lambda d: Y.to(d)[MASK_2x3.to(d), torch.tensor([0, 1], device=d)],
    "too_many": lambda d: X.to(d)[torch.tensor([0], device=d), torch.tensor([0], device=d)],
    "no_index": lambda d: torch.ops.aten.index(X.to(d), []),
    "values_do_not_fit": lambda d: X.to(d).index_put_((torch.tensor([0, 1], device=d),),
                                                      torch.tensor([1.0, 2.0, 3.0], device=d)),
    "values_do_not_fit_3d": lambda d: Y.to(d).index_put_(
        (torch.tensor([0, 1], device=d), None, torch.tensor([1], device=d)), torch.ones(3, 2, device=d)),
}


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_indexing_raises_like_cpu(name):
    assert_like_cpu(INVALID[name])


def test_mask_wider_than_the_tensor_is_too_many_indices():
    # CPU reports a dimension out of range here; the tpu message says what is wrong
    assert_like_cpu(
        lambda d: torch.ops.aten.index(X.to(d), [torch.ones(5, 1, dtype=torch.bool, device=d)]),
        message="too many indices for tensor of dimension 1 (got 2)")


VALID = {
    "mask": lambda d: X.to(d)[X.to(d) > 1.5],
    "mask_2d_then_int": lambda d: Y.to(d)[MASK_2x3.to(d), torch.tensor(3, device=d)],
    "mask_2d_then_ints": lambda d: Y.to(d)[MASK_2x3.to(d), torch.tensor([3, 0, 1, 1], device=d)],
    "int_then_mask_not_adjacent": lambda d: Y.to(d)[torch.tensor([1], device=d), :,
                                                    torch.tensor([True, False, True, False], device=d)],
    "mask_then_2d_int": lambda d: Y.to(d)[:, torch.tensor([True, False, True], device=d),
                                          torch.tensor([[1], [2]], device=d)],
    "mask_dim0_then_column": lambda d: Y.to(d)[torch.tensor([True, False], device=d),
                                               torch.tensor([[1], [2]], device=d)],
    "all_false_mask": lambda d: Y.to(d)[torch.zeros(2, 3, dtype=torch.bool, device=d)],
    "zero_dim_bool": lambda d: Y.to(d)[torch.tensor(True, device=d)],
    "zero_dim_false": lambda d: Y.to(d)[torch.tensor(False, device=d)],
    "int32_and_negative": lambda d: X.to(d)[torch.tensor([-1, 2, -5], dtype=torch.int32, device=d)],
    "cpu_index": lambda d: Y.to(d)[torch.tensor([1, 0, 1])],
    "cpu_mask": lambda d: Y.to(d)[MASK_2x3],
    "cpu_mask_and_cpu_int": lambda d: Y.to(d)[MASK_2x3, torch.tensor([3, 0, 1, 1])],
    "cpu_mask_setitem": lambda d: Y.to(d).clone().index_put_((MASK_2x3,), torch.tensor(-1.0)),
    "cpu_index_accumulate": lambda d: Y.to(d).clone().index_put_(
        (torch.tensor([1, 1, 0]),), torch.ones(3, 3, 4, device=d), accumulate=True),
    "mask_int_put": lambda d: Y.to(d).clone().index_put_(
        (MASK_2x3.to(d), torch.tensor([3, 0, 1, 1], device=d)), torch.tensor([1.0, 2, 3, 4], device=d)),
    "mask_put_broadcast_values": lambda d: Y.to(d).clone().index_put_(
        (MASK_2x3.to(d),), torch.tensor([1.0, 2, 3, 4], device=d)),
}


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_indexing_matches_cpu(name):
    assert_like_cpu(VALID[name])


def test_uint8_masks_warn_and_index_like_bool():
    mask = torch.tensor([1, 0, 1, 0, 1], dtype=torch.uint8)
    with pytest.warns(UserWarning, match="indexing with dtype torch.uint8 is now deprecated") as cpu:
        expected = X[mask]
    with pytest.warns(UserWarning) as tpu:
        result = X.to("tpu")[mask.to("tpu")]
    def texts(records):  # without the "(Triggered internally at <file>)" suffix
        return [str(w.message).split(" (Triggered")[0] for w in records if "uint8" in str(w.message)]

    assert texts(tpu) == texts(cpu) and len(texts(cpu)) == 1
    assert_same(result, expected)


def test_torchscript_masked_assignment():
    @torch.jit.script
    def clip(x):
        x[x < 50] = 1.0
        return x[x > 60]

    values = torch.arange(100.0).reshape(10, 10)
    expected = clip(values.clone())
    assert_same(clip(values.to("tpu")), expected)


def test_tpu_index_into_a_cpu_tensor_is_an_error():
    for index in (torch.tensor([1], device="tpu"), torch.ones(5, dtype=torch.bool, device="tpu")):
        with pytest.raises(IndexError) as error:
            X[index]
        assert str(error.value) == (
            "indices should be either on cpu or on the same device as the indexed tensor (cpu)")


def test_cpu_mask_does_not_warn_about_fallback():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Y.to("tpu")[MASK_2x3]


DEBUG_MODE_RUN = """
import torch, torch_tpu
assert torch_tpu._C._debug_mode()
x = torch.arange(5.0, device="tpu")
try:
    x[torch.tensor([True, False], device="tpu")]
except IndexError as error:
    print(error)
y = torch.arange(24.0).reshape(2, 3, 4)
mask = torch.tensor([[True, False, True], [False, True, True]])
print(y.to("tpu")[mask.to("tpu"), torch.tensor(3, device="tpu")].cpu().equal(y[mask, 3]))
"""


def test_mask_checks_in_debug_mode():
    from conftest import run_python

    result = run_python(DEBUG_MODE_RUN, TORCH_TPU_LAUNCH_BLOCKING="1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == [
        "The shape of the mask [2] at index 0 does not match the shape of the indexed tensor [5] "
        "at index 0", "True"]

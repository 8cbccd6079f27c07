"""Python numbers that CPU kernels convert to the dtype they compute in, with an overflow check
(fill values, masked_fill/index_fill values, clamp bounds, where's scalar branch, add/sub alpha,
and values written through indexing): tpu raises CPU's error where CPU does, leaves the tensor as
it was, and otherwise computes what CPU computes (in-range values, wrapping arithmetic)."""

import pytest
import torch

from conftest import assert_like_cpu

MASK = [True, False, True]

CALLS = {
    "fill_": lambda x, v: x.fill_(v),
    "full": lambda x, v: torch.full((3,), v, dtype=x.dtype, device=x.device),
    "masked_fill_": lambda x, v: x.masked_fill_(torch.tensor(MASK, device=x.device), v),
    "masked_fill": lambda x, v: x.masked_fill(torch.tensor(MASK, device=x.device), v),
    "index_fill_": lambda x, v: x.index_fill_(0, torch.tensor([1], device=x.device), v),
    "setitem_slice": lambda x, v: x.__setitem__(slice(0, 2), v),
    "setitem_index": lambda x, v: x.__setitem__(torch.tensor([0, 2], device=x.device), v),
    "setitem_mask": lambda x, v: x.__setitem__(torch.tensor(MASK, device=x.device), v),
    "clamp_max": lambda x, v: x.clamp(max=v),
    "clamp_min": lambda x, v: x.clamp_min(v),
    "where_scalar_other": lambda x, v: torch.where(torch.tensor(MASK, device=x.device), x, v),
    "add_alpha": lambda x, v: x.add(x, alpha=v),
    "sub_alpha_": lambda x, v: x.sub_(x, alpha=v),
}

# (dtype, value): values that overflow the dtype on CPU, and neighbours that do not.
OVERFLOWING = [(torch.int8, 300), (torch.int8, -129), (torch.uint8, -1.5), (torch.int32, 2**40),
               (torch.float16, 1e10), (torch.bfloat16, 1e39), (torch.float32, 1e39)]
FITTING = [(torch.int8, 127), (torch.int8, -128), (torch.uint8, 255), (torch.float16, 65504.0),
           (torch.float16, float("inf")), (torch.bool, 5)]


def outcome(call, dtype, value, device):
    x = torch.tensor([1, 0, 1], dtype=dtype, device=device)
    try:
        result = CALLS[call](x, value)
    except RuntimeError as error:
        return x.cpu(), None, error
    return x.cpu(), (x if result is None else result).cpu(), None


@pytest.mark.parametrize("dtype,value", OVERFLOWING + FITTING, ids=str)
@pytest.mark.parametrize("call", sorted(CALLS))
def test_numbers_convert_like_cpu(call, dtype, value):
    cpu_tensor, cpu_result, cpu_error = outcome(call, dtype, value, "cpu")
    tpu_tensor, tpu_result, tpu_error = outcome(call, dtype, value, "tpu")
    if cpu_error is not None:
        assert tpu_error is not None, f"CPU raised {cpu_error}, tpu returned {tpu_result}"
        # CPU's message; ours names the op first where the check is a lowering's.
        cpu_message, tpu_message = str(cpu_error).splitlines()[0], str(tpu_error).splitlines()[0]
        assert tpu_message == cpu_message or tpu_message.endswith(": " + cpu_message)
        # Nothing was written.
        assert torch.equal(tpu_tensor, torch.tensor([1, 0, 1], dtype=dtype))
        return
    assert tpu_error is None, tpu_error
    torch.testing.assert_close(tpu_result, cpu_result, equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(tpu_tensor, cpu_tensor, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("call", ["fill_", "masked_fill_", "index_fill_", "setitem_index",
                                  "clamp_max", "add_alpha"])
def test_an_int8_tensor_refuses_300(call):
    x = torch.tensor([1, 0, 1], dtype=torch.int8, device="tpu")
    with pytest.raises(RuntimeError, match="^value cannot be converted to type int8_t without "
                                           "overflow$"):
        CALLS[call](x, 300)
    assert x.cpu().tolist() == [1, 0, 1]


def test_integer_arithmetic_with_a_large_number_still_wraps_like_cpu():
    # Only conversions CPU checks raise: adding a Python number is ordinary integer arithmetic.
    assert_like_cpu(lambda device: torch.tensor([1, 2], dtype=torch.int8, device=device) + 300)

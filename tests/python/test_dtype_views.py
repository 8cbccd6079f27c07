"""view(dtype) reinterprets the bytes of the storage, bool included, exactly as on CPU."""

import pytest
import torch

from conftest import assert_same

BOOLS = torch.tensor([True, True, False, True, False, False, True, False])

CASES = {
    "bool_as_int16": lambda d: BOOLS.to(d).view(torch.int16),
    "bool_as_int32": lambda d: BOOLS.to(d).view(torch.int32),
    "bool_as_uint8": lambda d: BOOLS.to(d).view(torch.uint8),
    "bool_as_int8_2d": lambda d: BOOLS.to(d).view(2, 4).view(torch.int8),
    "bool_slice_as_int16": lambda d: BOOLS.to(d)[2:6].view(torch.int16),
    "bool_as_int16_summed": lambda d: BOOLS.to(d).view(torch.int16).sum(),
    "int16_as_bool": lambda d: torch.tensor([257, 256, 1, 0], dtype=torch.int16).to(d).view(torch.bool),
    "int32_as_bool": lambda d: torch.tensor([16777217, 65536], dtype=torch.int32).to(d).view(
        torch.bool),
    "uint8_as_bool": lambda d: torch.tensor([1, 0, 1, 1], dtype=torch.uint8).to(d).view(torch.bool),
    "bool_written_through_int16": lambda d: (lambda b: (b.view(torch.int16).fill_(1), b)[1])(
        BOOLS.to(d).clone()),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_dtype_view_reinterprets_bytes_like_cpu(name):
    assert_same(CASES[name]("tpu"), CASES[name]("cpu"))

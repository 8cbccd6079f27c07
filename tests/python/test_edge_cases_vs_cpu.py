"""Edge cases a differential fuzzer (random programs run on CPU and tpu) found wrong or crashing:
0-d tensors given a dim, bool views of byte storage, integer powers past 63, rounding to decimals
in half types, softmax of a 0-d NaN. Each compares with PyTorch CPU."""

import pytest
import torch

from conftest import assert_like_cpu


@pytest.mark.parametrize("call", [lambda x: x.roll(1, 0), lambda x: x.roll(1, -1),
                                  lambda x: torch.linalg.cross(x, x, dim=0),
                                  lambda x: torch.cross(x, x, 0)])
def test_a_0d_tensor_has_no_dimension_to_index(call):
    with pytest.raises(IndexError, match="Dimension specified as -?[01] but tensor has no "
                                         "dimensions"):
        call(torch.tensor(5.0))
    with pytest.raises(IndexError, match="Dimension specified as -?[01] but tensor has no "
                                         "dimensions"):
        call(torch.tensor(5.0, device="tpu"))


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8])
@pytest.mark.parametrize("write", [lambda v: v.zero_(), lambda v: v.fill_(True),
                                   lambda v: v.logical_not_()])
def test_writing_a_bool_view_keeps_the_other_bytes(dtype, write):
    def run(device):
        storage = torch.tensor([4, 9, 7, 0, 200], dtype=dtype).to(device)
        write(storage[1:3].view(torch.bool))
        return storage

    assert_like_cpu(run)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.int32, torch.int64])
def test_integer_powers_past_63_wrap_like_cpu(dtype):
    base = torch.tensor([3, -3, 5, 0, 1, -1, 2], dtype=dtype) if dtype != torch.uint8 else \
        torch.tensor([3, 5, 0, 1, 2, 255], dtype=dtype)
    for exponent in (5, 63, 64, 65, 100, 127):
        assert_like_cpu(lambda device: base.to(device) ** exponent)
        exponents = torch.full(base.shape, exponent, dtype=dtype)
        assert_like_cpu(lambda device: base.to(device) ** exponents.to(device))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("decimals", [1, 2, -1])
def test_round_to_decimals_in_half_types_computes_in_float(dtype, decimals):
    x = torch.tensor([-0.35, 0.05, 1.15, 2.675, 123.4, -47.5], dtype=dtype)
    assert_like_cpu(lambda device: x.to(device).round(decimals=decimals), rtol=0, atol=0)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), 2.0])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_of_a_0d_tensor(value, op):
    assert_like_cpu(lambda device: getattr(torch.tensor(value, device=device), op)(0),
                    equal_nan=True)

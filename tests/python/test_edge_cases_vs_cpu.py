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


@pytest.mark.parametrize("decimals", [1, 3, 5, -2])
def test_round_to_decimals_divides_as_cpu(decimals):
    # A true division by 10^decimals, not a multiplication by its rounded reciprocal.
    x = torch.tensor([123.456789, -0.0123456, 98765.4321, 2.5e-3, 7.77777, -1234.5678])
    x = torch.cat([x, torch.randn(1000, generator=torch.Generator().manual_seed(0)) * 500])
    assert_like_cpu(lambda device: x.to(device).round(decimals=decimals), rtol=0, atol=0)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), 2.0])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_of_a_0d_tensor(value, op):
    assert_like_cpu(lambda device: getattr(torch.tensor(value, device=device), op)(0),
                    equal_nan=True)


@pytest.mark.parametrize("fill", [lambda x: x.fill_(1.5), lambda x: x.zero_()])
def test_filling_an_expanded_tensor_fills_every_alias(fill):
    def run(device):
        base = torch.arange(12.0).reshape(3, 4).to(device)
        expanded = base[1:, 1].unsqueeze(1).expand(2, 5)  # a column of base, repeated
        assert fill(expanded) is expanded
        return base

    assert_like_cpu(run)


def test_filling_an_expanded_tensor_from_a_tensor_raises_as_on_cpu():
    for device in ("cpu", "tpu"):
        expanded = torch.zeros(3, device=device).expand(2, 3)
        with pytest.raises(RuntimeError, match="unsupported operation: more than one element of "
                                               "the written-to tensor refers to a single memory "
                                               "location"):
            expanded.fill_(torch.tensor(-2.0, device=device))


@pytest.mark.parametrize("bounds", [(0, 1), (-5, 3.0), (None, 0), (1, None), (True, False)])
def test_clamping_bools_by_numbers_promotes_like_cpu(bounds):
    # Bool bounds keep the bool type, which CPU's clamp kernel lacks.
    message = 'aten::clamp: "clamp_scalar_cpu" not implemented for \'Bool\'' if bounds[0] is True \
        else None
    assert_like_cpu(lambda device: torch.tensor([True, False], device=device).clamp(*bounds),
                    message=message)


@pytest.mark.parametrize("end_dtype, weight", [
    (torch.float64, 0.5), (torch.float32, torch.full((3,), 0.5, dtype=torch.float64)),
    (torch.float32, torch.tensor(0.5, dtype=torch.float64)), (torch.float16, 0.5)])
def test_lerp_takes_ends_and_weights_of_selfs_dtype(end_dtype, weight):
    def run(device):
        w = weight.to(device) if isinstance(weight, torch.Tensor) else weight
        return torch.lerp(torch.ones(3, device=device), torch.zeros(3, dtype=end_dtype,
                                                                     device=device), w)

    expected = None
    try:
        expected = run("cpu")
    except RuntimeError as error:
        with pytest.raises(RuntimeError, match=f"aten::lerp.(Scalar|Tensor): {error}"):
            run("tpu")
    if expected is not None:
        torch.testing.assert_close(run("tpu").cpu(), expected)

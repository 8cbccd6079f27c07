"""arange / range / linspace / logspace on tpu: PyTorch's sizes, values and errors at the edges
(fractional bounds with integer dtypes, negative steps, empty ranges, precision limits)."""

import pytest
import torch

from conftest import assert_like_cpu

I32, I64 = torch.int32, torch.int64

CASES = {
    # arange: the size comes from the untruncated bounds (except int64), values from truncated ones
    "arange_fractional_int32": lambda d: torch.arange(-1.5, 2, dtype=I32, device=d),
    "arange_fractional_int64": lambda d: torch.arange(-1.5, 2, dtype=I64, device=d),
    "arange_fractional_int16": lambda d: torch.arange(-0.7, 3.3, 0.9, dtype=torch.int16, device=d),
    "arange_fractional_step_int32": lambda d: torch.arange(0.5, 5, 1.5, dtype=I32, device=d),
    "arange_step_truncates_to_zero_int32": lambda d: torch.arange(0, 10, 0.5, dtype=I32, device=d),
    "arange_step_truncates_to_zero_int64": lambda d: torch.arange(0, 10, 0.5, dtype=I64, device=d),
    "arange_int32_half_steps": lambda d: torch.arange(0, 3, 1.5, dtype=I32, device=d),
    "arange_float": lambda d: torch.arange(-1.5, 2, device=d),
    "arange_tenths": lambda d: torch.arange(0, 1, 0.1, device=d),
    "arange_tenths_float64": lambda d: torch.arange(0, 1, 0.1, dtype=torch.float64, device=d),
    "arange_tenths_offset": lambda d: torch.arange(0.1, 0.9, 0.1, device=d),
    "arange_negative_step": lambda d: torch.arange(1, -1.2, -0.3, device=d),
    "arange_negative_int_step": lambda d: torch.arange(10, 0, -3, device=d),
    "arange_mixed": lambda d: torch.arange(-5, 5, 1.5, device=d),
    "arange_bfloat16": lambda d: torch.arange(0, 300, 1, dtype=torch.bfloat16, device=d),
    "arange_float16": lambda d: torch.arange(-3, 3, 2, dtype=torch.float16, device=d),
    "arange_uint8": lambda d: torch.arange(0, 5, 1, dtype=torch.uint8, device=d),
    "arange_beyond_double_precision": lambda d: torch.arange(2**53, 2**53 + 4, device=d),
    "arange_large_int64_steps": lambda d: torch.arange(0, 2**31 + 3, 2**30, dtype=I64, device=d),
    "arange_empty": lambda d: torch.arange(2.5, 2.5, device=d),
    "arange_tensor_bound": lambda d: torch.arange(torch.tensor(3.5), device=d),
    "arange_out_resized": lambda d: torch.arange(5, out=torch.empty(0, device=d)),
    "arange_wrong_sign": lambda d: torch.arange(0, 1, -1, device=d),
    "arange_infinite": lambda d: torch.arange(0, float("inf"), device=d),
    "arange_zero_step": lambda d: torch.arange(0, 5, 0, device=d),
    "arange_out_zero_int_step": lambda d: torch.arange(0, 1, 0.25,
                                                       out=torch.empty(0, dtype=I64, device=d)),
    # range: inclusive end
    "range_quarters": lambda d: torch.range(0, 1, 0.25, device=d),
    "range_fractional_int32": lambda d: torch.range(-1.5, 2, dtype=I32, device=d),
    "range_tenths": lambda d: torch.range(0, 1, 0.1, device=d),
    "range_negative_step": lambda d: torch.range(5, 1, -1.5, device=d),
    "range_zero_step": lambda d: torch.range(0, 1, 0, device=d),
    "range_wrong_sign": lambda d: torch.range(1, 0, 1, device=d),
    # linspace: integer results interpolate between bounds converted to the dtype
    "linspace_int64": lambda d: torch.linspace(0, 10, 4, dtype=I64, device=d),
    "linspace_fractional_int32": lambda d: torch.linspace(-1.5, 2.5, 5, dtype=I32, device=d),
    "linspace_fractional_int64": lambda d: torch.linspace(0.6, 2.4, 4, dtype=I64, device=d),
    "linspace_fractional_uint8": lambda d: torch.linspace(0.6, 2.4, 4, dtype=torch.uint8, device=d),
    "linspace_uint8_wraps_negative_start": lambda d: torch.linspace(-10, 10, 9, dtype=torch.uint8,
                                                                    device=d),
    "linspace_int8_overflow": lambda d: torch.linspace(-300, 300, 5, dtype=torch.int8, device=d),
    "linspace_descending_int16": lambda d: torch.linspace(10, 0, 6, dtype=torch.int16, device=d),
    "linspace_descending_int64": lambda d: torch.linspace(5, 0, 4, dtype=I64, device=d),
    "linspace_int32_long": lambda d: torch.linspace(0, 99, 100, dtype=I32, device=d),
    "linspace_one_step": lambda d: torch.linspace(3, 7, 1, device=d),
    "linspace_no_steps": lambda d: torch.linspace(0, 1, 0, device=d),
    "linspace_negative_steps": lambda d: torch.linspace(0, 1, -1, device=d),
    "linspace_sevenths": lambda d: torch.linspace(0, 1, 7, device=d),
    "linspace_wide": lambda d: torch.linspace(1, 1e6, 11, device=d),
    "linspace_bfloat16": lambda d: torch.linspace(0, 1, 5, dtype=torch.bfloat16, device=d),
    "linspace_float64": lambda d: torch.linspace(0, 1, 5, dtype=torch.float64, device=d),
    "linspace_tensor_bounds": lambda d: torch.linspace(torch.tensor(0.0), torch.tensor(1.0), 5,
                                                       device=d),
    "logspace": lambda d: torch.logspace(0, 3, 4, device=d),
    "logspace_base2_int64": lambda d: torch.logspace(0, 3, 4, base=2, dtype=I64, device=d),
    "logspace_float64": lambda d: torch.logspace(-1, 1, 5, dtype=torch.float64, device=d),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_range_factory_matches_cpu(name):
    assert_like_cpu(CASES[name])


@pytest.mark.parametrize("factory", ["arange", "linspace"])
def test_bool_results_are_not_implemented(factory):
    make = {"arange": lambda d: torch.arange(0, 5, dtype=torch.bool, device=d),
            "linspace": lambda d: torch.linspace(0, 1, 5, dtype=torch.bool, device=d)}[factory]
    with pytest.raises(NotImplementedError):
        make("cpu")
    with pytest.raises(NotImplementedError) as error:
        make("tpu")
    assert str(error.value).split("\n")[0] == f"{factory}: not implemented for 'Bool'"


def test_triangle_indices_match_cpu():
    """tril_indices / triu_indices: CPU's element count, coordinates computed on the device, for
    wide, tall and empty matrices and diagonals beyond either edge."""
    import torch_tpu

    torch_tpu.reset_metrics()
    shapes = [(0, 3), (3, 0), (1, 1), (4, 4), (3, 7), (7, 3), (5, 1), (1, 5), (13, 9)]
    for row, col in shapes:
        for offset in (-20, -3, -1, 0, 1, 4, 20):
            for factory in (torch.tril_indices, torch.triu_indices):
                assert_like_cpu(lambda d: factory(row, col, offset, device=d))
    for dtype in (torch.int32, torch.float32, torch.int16, torch.uint8):
        assert_like_cpu(lambda d: torch.tril_indices(6, 4, 1, dtype=dtype, device=d))
        assert_like_cpu(lambda d: torch.triu_indices(4, 6, -1, dtype=dtype, device=d))
    assert torch_tpu.metrics()["fallback_ops"] == {}
    assert_like_cpu(lambda d: torch.tril_indices(-1, 3, device=d))
    assert_like_cpu(lambda d: torch.triu_indices(3, -2, device=d))

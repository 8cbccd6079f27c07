"""Ops given dtypes or dtype mixes that PyTorch's CPU kernels reject raise the same exception on
tpu, with CPU's message (after the op name), instead of computing something or failing inside the
StableHLO builder. Valid neighbours of each case still match CPU."""

import pytest
import torch
import torch.nn.functional as F

A = torch.tensor([[3, -2, 0], [5, 1, -7]])
B = torch.tensor([[2, 3, 1], [-1, 4, 2]])

REJECTED = {
    "heaviside_mixed_dtypes": lambda a, b: torch.heaviside(a, b.float()),
    "heaviside_int32_int64": lambda a, b: torch.heaviside(a.int(), b),
    "pow_bool": lambda a, b: (a > 0) ** (b > 0),
    "abs_bool": lambda a, b: torch.abs(a > 0),
    "frac_int": lambda a, b: torch.frac(a),
    "round_decimals_int": lambda a, b: torch.round(a, decimals=1),
    "trunc_bool": lambda a, b: torch.trunc(a > 0),
    "floor_bool": lambda a, b: torch.floor(a > 0),
    "ceil_bool": lambda a, b: torch.ceil(a > 0),
    "lerp_int_scalar_weight": lambda a, b: torch.lerp(a, b, 0.5),
    "lerp_int_tensor_weight": lambda a, b: torch.lerp(a, b, b),
    "addcdiv_int": lambda a, b: torch.addcdiv(a, a, b),
    "addcmul_bool": lambda a, b: torch.addcmul(a > 0, a > 0, b > 0),
    "softplus_int": lambda a, b: F.softplus(a),
    "leaky_relu_int": lambda a, b: F.leaky_relu(a),
    "gelu_int": lambda a, b: F.gelu(a),
    "elu_int": lambda a, b: F.elu(a),
    "hardtanh_bool": lambda a, b: F.hardtanh(a > 0),
    "clamp_min_bool": lambda a, b: torch.clamp(a > 0, min=False),
    "clamp_max_bool": lambda a, b: torch.clamp(a > 0, max=True),
    "clamp_bool": lambda a, b: torch.clamp(a > 0, False, True),
    "logaddexp_int": lambda a, b: torch.logaddexp(a, b),
    "logaddexp2_int": lambda a, b: torch.logaddexp2(a, b),
    "remainder_bool": lambda a, b: torch.remainder(a > 0, b > 0),
    "fmod_bool": lambda a, b: torch.fmod(a > 0, b > 0),
    "floor_divide_bool": lambda a, b: torch.floor_divide(a > 0, b > 0),
    "div_trunc_bool": lambda a, b: torch.div(a > 0, b > 0, rounding_mode="trunc"),
    "div_floor_bool": lambda a, b: torch.div(a > 0, b > 0, rounding_mode="floor"),
    "sub_int_float_alpha": lambda a, b: torch.sub(a, b, alpha=0.5),
    "sub_bool": lambda a, b: (a > 0) - (b > 0),
    "rsub_bool": lambda a, b: torch.rsub(a > 0, b > 0),
    "bitwise_and_float": lambda a, b: torch.bitwise_and(a.float(), b),
    "bitwise_or_float": lambda a, b: torch.bitwise_or(a, b.float()),
    "bitwise_xor_scalar_float": lambda a, b: torch.bitwise_xor(a.float(), 1),
    "bitwise_not_float": lambda a, b: torch.bitwise_not(a.float()),
    "softmax_int_dim0": lambda a, b: torch.softmax(a, 0),
    "softmax_int_last_dim": lambda a, b: torch.softmax(a, 1),
    "log_softmax_int_dim0": lambda a, b: torch.log_softmax(a, 0),
    "log_softmax_int_last_dim": lambda a, b: torch.log_softmax(a, 1),
    "argmax_bool": lambda a, b: torch.argmax(a > 0),
    "argmin_bool": lambda a, b: torch.argmin(a > 0),
    "mse_loss_int": lambda a, b: F.mse_loss(a, b),
    "mm_mixed_dtypes": lambda a, b: a @ b.T.float(),
    "add_int_bool_alpha": lambda a, b: torch.add(a, b, alpha=False),
    "add_float_bool_alpha": lambda a, b: torch.add(a.float(), b, alpha=True),
    "sub_float_python_bool": lambda a, b: a.float() - True,
    "sub_bool_float": lambda a, b: (a > 0) - b.float(),
    "rsub_python_bool": lambda a, b: torch.rsub(a.float(), True),
    "index_put_other_source_dtype": lambda a, b: a.float().index_put_(
        (torch.tensor([0], device=a.device),), b[0].double()),
    "index_put_accumulate_other_source_dtype": lambda a, b: a.index_put(
        (torch.tensor([1], device=a.device),), b[0].int(), accumulate=True),
    "vector_norm_narrowing_dtype": lambda a, b: torch.linalg.vector_norm(
        a.double(), dtype=torch.float32),
    "vector_norm_real_dtype_for_complex": lambda a, b: torch.linalg.vector_norm(
        a.to(torch.complex64), dtype=torch.float32),
    "foreach_norm_narrowing_dtype": lambda a, b: torch._foreach_norm(
        [a.double(), b.double()], 2, dtype=torch.float32),
}

ACCEPTED = {
    "heaviside_same_dtype": lambda a, b: torch.heaviside(a, b),
    "pow_int_positive_scalar": lambda a, b: a**2,
    "pow_int_zero_scalar": lambda a, b: a**0,
    "pow_int_tensor_exponent": lambda a, b: a ** b.abs(),
    "pow_int_negative_float_scalar": lambda a, b: a**-1.0,
    "pow_scalar_base_int_tensor": lambda a, b: 2 ** b.abs(),
    "round_int": lambda a, b: torch.round(a),
    "floor_int": lambda a, b: torch.floor(a),
    "sign_bool": lambda a, b: torch.sign(a > 0),
    "hardtanh_int": lambda a, b: F.hardtanh(a),
    "clamp_bool_tensor_bounds": lambda a, b: torch.clamp(a > 0, b > 0),
    "remainder_int": lambda a, b: torch.remainder(a, b),
    "addcmul_int_float_value": lambda a, b: torch.addcmul(a, a, b, value=2),
    "add_bool_alpha": lambda a, b: torch.add(a > 0, b > 0, alpha=True),
    "index_put_same_dtype": lambda a, b: a.index_put((torch.tensor([0], device=a.device),), b[1]),
    "vector_norm_widening_dtype": lambda a, b: torch.linalg.vector_norm(
        a.float(), dtype=torch.float64),
    "bitwise_and_int_bool": lambda a, b: torch.bitwise_and(a, b > 0),
    "argmax_int": lambda a, b: torch.argmax(a, 1),
    "abs_int8": lambda a, b: torch.abs(torch.tensor([-128, 5], dtype=torch.int8, device=a.device)),
}


def on_tpu(fn):
    return fn(A.to("tpu"), B.to("tpu"))


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_rejected_as_on_cpu(case):
    with pytest.raises(Exception) as cpu:
        REJECTED[case](A, B)
    with pytest.raises(type(cpu.value)) as tpu:
        on_tpu(REJECTED[case])
    assert type(tpu.value) is type(cpu.value)
    cpu_message = str(cpu.value).splitlines()[0]
    assert cpu_message in str(tpu.value).splitlines()[0]


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_accepted_as_on_cpu(case):
    expected = ACCEPTED[case](A, B)
    actual = on_tpu(ACCEPTED[case])
    assert actual.device.type == "tpu"
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual.cpu(), expected)

"""complex64/complex128 on tpu: transfers, factories, parts and views sharing one storage, the
lazy conjugate bit, arithmetic, reductions and products, all against PyTorch CPU, and natively
(no CPU fallback)."""

import pytest
import torch
import torch_tpu

from conftest import assert_like_cpu, assert_raises_exactly, assert_same


def complex_sample(shape, dtype=torch.complex64, seed=0):
    generator = torch.Generator().manual_seed(seed)
    real = torch.randn(shape, generator=generator, dtype=torch.float64)
    imag = torch.randn(shape, generator=generator, dtype=torch.float64)
    return torch.complex(real, imag).to(dtype)


@pytest.fixture(autouse=True)
def _no_cpu_fallback():
    torch_tpu.reset_metrics()
    yield
    assert torch_tpu.metrics()["fallback_ops"] == {}


Z = complex_sample((3, 4))
W = complex_sample((3, 4), seed=1)
R = torch.randn(3, 4, generator=torch.Generator().manual_seed(2))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_round_trip_keeps_values_bit_for_bit(dtype):
    z = complex_sample((5, 3), dtype)
    assert torch.equal(z.to("tpu").cpu(), z)


@pytest.mark.parametrize("make", [
    lambda d: torch.zeros(2, 3, dtype=torch.complex64, device=d),
    lambda d: torch.ones(2, 3, dtype=torch.complex128, device=d),
    lambda d: torch.full((2, 3), 1.5 - 2j, device=d),
    lambda d: torch.full((2,), 3.0, dtype=torch.complex64, device=d),
    lambda d: torch.empty(2, 3, dtype=torch.complex64, device=d).fill_(2 + 1j),
    lambda d: torch.tensor([1 + 2j, -3j], device=d),
], ids=["zeros", "ones", "full_complex_scalar", "full_real_scalar", "fill_", "tensor"])
def test_factories(make):
    assert_like_cpu(make)


def test_randn_complex_has_unit_variance_split_between_parts():
    torch.manual_seed(0)
    z = torch.randn(4096, dtype=torch.complex64, device="tpu")
    assert z.dtype == torch.complex64 and z.device.type == "tpu"
    parts = torch.view_as_real(z).cpu()
    assert abs(parts.mean().item()) < 0.05
    assert abs(parts[:, 0].var().item() - 0.5) < 0.05
    assert abs(parts[:, 1].var().item() - 0.5) < 0.05


@pytest.mark.parametrize("name,make", [
    ("complex", lambda d: torch.complex(R.to(d), R.t().contiguous().t().to(d) * 2)),
    ("complex_broadcast", lambda d: torch.complex(R.to(d), R[0].to(d))),
    ("complex_double", lambda d: torch.complex(R.double().to(d), R.double().to(d))),
    ("polar", lambda d: torch.polar(R.abs().to(d), R.to(d))),
    ("real", lambda d: Z.to(d).real),
    ("imag_of_slice", lambda d: Z.to(d)[:, 1:3].imag),
    ("view_as_real", lambda d: torch.view_as_real(Z.to(d))),
    ("view_as_real_transposed", lambda d: torch.view_as_real(Z.to(d).t())),
    ("view_as_complex", lambda d: torch.view_as_complex(torch.view_as_real(Z).to(d))),
    ("view_as_complex_of_slice", lambda d: torch.view_as_complex(
        torch.view_as_real(Z).to(d)[1:])),
])
def test_construction_and_parts(name, make):
    assert_like_cpu(make)


def test_writes_through_view_as_real_show_in_the_complex_tensor():
    def make(d):
        z = Z.clone().to(d)
        parts = torch.view_as_real(z)
        parts[:, :, 1].mul_(-2)  # strided write into the imaginary parts
        parts[0, 0, 0] = 7.0
        return z
    assert_like_cpu(make)


def test_writes_through_view_as_complex_show_in_the_real_tensor():
    def make(d):
        pairs = torch.randn(4, 2, generator=torch.Generator().manual_seed(3)).to(d)
        z = torch.view_as_complex(pairs)
        z[1:3] *= 1j
        return pairs
    assert_like_cpu(make)


def test_real_and_imag_are_views():
    def make(d):
        z = Z.clone().to(d)
        z.real.add_(10)
        z.imag[1].zero_()
        return z
    assert_like_cpu(make)


def test_conj_is_a_lazy_view_resolved_on_use():
    z = Z.to("tpu")
    c = z.conj()
    assert c.is_conj() and not z.is_conj()
    assert c.untyped_storage().data_ptr() == z.untyped_storage().data_ptr()
    assert_same(c, Z.conj())
    assert_same(c.resolve_conj(), Z.conj().resolve_conj())
    assert not c.resolve_conj().is_conj()
    assert_same(torch.conj_physical(z), torch.conj_physical(Z))
    assert_same(c + 1, Z.conj() + 1)
    assert_same(c @ z.t(), Z.conj() @ Z.t())
    assert_same(c[1:], Z.conj()[1:])
    assert_same(-c, -Z.conj())


@pytest.mark.parametrize("name,make", [
    ("write_through_conj", lambda d: (lambda z: (z.conj().mul_(1 + 1j), z)[1])(Z.clone().to(d))),
    ("copy_into_conj", lambda d: (lambda z: (z.conj().copy_(W.to(d)), z)[1])(Z.clone().to(d))),
    ("conj_physical_", lambda d: Z.clone().to(d).conj_physical_()),
    ("conj_of_real", lambda d: R.to(d).conj()),
    ("neg_view", lambda d: Z.to(d).conj().imag),
])
def test_conjugate_views(name, make):
    assert_like_cpu(make)


BINARY = {
    "add": lambda a, b: a + b,
    "sub_alpha": lambda a, b: torch.sub(a, b, alpha=2),
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "pow": lambda a, b: a ** b,
    "mul_real_tensor": lambda a, b: a * b.real,
    "add_complex_scalar": lambda a, b: a + (2 - 1j),
    "mul_real_scalar": lambda a, b: a * 3,
    "real_tensor_times_complex_scalar": lambda a, b: a.real * 1j,
    "eq": lambda a, b: a == b,
    "ne_self": lambda a, b: a != a,
    "where": lambda a, b: torch.where(a.real > 0, a, b),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name):
    assert_like_cpu(lambda d: BINARY[name](Z.to(d), W.to(d)), rtol=2e-5, atol=2e-5)


UNARY = {
    "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "abs": torch.abs,
    "angle": torch.angle, "sgn": torch.sgn, "neg": torch.neg, "sin": torch.sin,
    "cos": torch.cos, "tanh": torch.tanh, "reciprocal": torch.reciprocal, "square": torch.square,
    "sigmoid": torch.sigmoid, "expm1": torch.expm1, "log1p": torch.log1p, "rsqrt": torch.rsqrt,
    "asin": torch.asin, "acos": torch.acos, "atan": torch.atan, "sinh": torch.sinh,
    "cosh": torch.cosh, "asinh": torch.asinh, "acosh": torch.acosh, "atanh": torch.atanh,
    "vector_norm": torch.linalg.vector_norm,
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_unary(name, dtype):
    assert_like_cpu(lambda d: UNARY[name](Z.to(dtype).to(d)), rtol=2e-5, atol=2e-5)


def test_sgn_of_zero_and_angle_of_real():
    assert_like_cpu(lambda d: torch.sgn(torch.tensor([0j, 3 - 4j], device=d)))
    assert_like_cpu(lambda d: torch.angle(torch.tensor([-1.0, 0.0, 2.0], device=d)))


@pytest.mark.parametrize("name,make", [
    ("sum", lambda z: z.sum()),
    ("sum_dim", lambda z: z.sum(1)),
    ("mean", lambda z: z.mean(0)),
    ("prod", lambda z: z.prod(1)),
    ("matmul", lambda z: z @ z.t()),
    ("bmm", lambda z: torch.bmm(z.reshape(1, 3, 4), z.t().reshape(1, 4, 3))),
    ("mv", lambda z: z @ z[0]),
    ("vdot", lambda z: torch.vdot(z[0], z[1])),
    ("dot", lambda z: torch.dot(z[0], z[1])),
    ("cat", lambda z: torch.cat([z, z.conj()])),
    ("index", lambda z: z[torch.tensor([2, 0], device=z.device)]),
    ("index_put", lambda z: z.clone().index_put_((torch.tensor([1], device=z.device),),
                                                 torch.tensor(5j, device=z.device))),
    ("clone_transposed", lambda z: z.t().clone()),
    ("to_complex128", lambda z: z.to(torch.complex128)),
    ("to_float_drops_imag", lambda z: z.real.to(torch.complex64).to(torch.float32)),
])
def test_reductions_products_and_data_movement(name, make):
    assert_like_cpu(lambda d: make(Z.to(d)), rtol=2e-5, atol=2e-5)


def test_item_of_complex():
    assert Z.to("tpu")[1, 2].item() == Z[1, 2].item()


def test_sign_of_complex_raises_like_cpu():
    assert_like_cpu(lambda d: torch.sign(Z.to(d)),
                    "aten::sign: Unlike NumPy, torch.sign is not intended to support complex "
                    "numbers. Please use torch.sgn instead.")


def test_complex_of_mixed_dtypes_raises():
    assert_raises_exactly(
        TypeError,
        "aten::complex: Expected object of scalar type Float but got scalar type Double for "
        "second argument",
        lambda: torch.complex(R.to("tpu"), R.double().to("tpu")))
    assert_raises_exactly(
        TypeError,
        "aten::complex: Expected both inputs to be Half, Float or Double tensors but got Long "
        "and Long",
        lambda: torch.complex(torch.ones(2, dtype=torch.long, device="tpu"),
                              torch.ones(2, dtype=torch.long, device="tpu")))


def test_ops_without_a_complex_lowering_raise_not_implemented():
    assert_like_cpu(lambda d: torch.floor(Z.to(d)),
                    "aten::floor: floor is not supported for complex inputs")
    assert_raises_exactly(
        NotImplementedError,
        "aten::lt.Tensor(ComplexFloat[3, 4], ComplexFloat[3, 4]): not implemented for complex "
        "dtypes on the tpu device (stablehlo.compare: complex operands "
        "tensor<12xcomplex<f32>> only compare for EQ or NE)",
        lambda: Z.to("tpu") < W.to("tpu"))


def test_compiled_graph_with_complex_numbers_and_fft():
    def f(z, x):
        return torch.fft.rfft(x).abs().sum() + (z * z.conj()).real.sum() + (z * 2j).imag

    compiled = torch.compile(f, backend="tpu", fullgraph=True)
    assert_same(compiled(Z[0].to("tpu"), R[0].to("tpu")), f(Z[0], R[0]), rtol=1e-5, atol=1e-5)

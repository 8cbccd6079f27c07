"""float8 dtypes on tpu against PyTorch CPU: storage, conversions bit for bit (all 256 codes,
float32/bfloat16/float16/float64/integer sources with every edge: max, overflow, subnormals, NaN,
inf, negative zero), views, data movement, the ops CPU implements for float8, the errors it
raises for the rest, printing, serialization and torch._scaled_mm."""

import io

import pytest
import torch

import torch_tpu

FLOAT8 = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]
IDS = [str(d).removeprefix("torch.") for d in FLOAT8]


def codes(dtype):
    return torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype)


def bits(tensor):
    """Bit patterns, so NaN payloads, negative zero and saturation all count."""
    tensor = tensor.cpu()
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()]
    return tensor.contiguous().view(width)


def assert_bits_equal(actual, expected, what=""):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    mismatch = (bits(actual) != bits(expected)).nonzero()
    assert mismatch.numel() == 0, (
        f"{what}: {mismatch.shape[0]} elements differ, first at {mismatch[0].tolist()}: "
        f"{bits(actual)[tuple(mismatch[0])]} vs {bits(expected)[tuple(mismatch[0])]}")


def edge_values_f32():
    """float32 values around every float8 boundary: max finite, the rounding midpoints above it,
    overflow, the smallest subnormals and their halves, ties, NaN, inf, -0."""
    points = [0.0, 1.0, 448.0, 464.0, 480.0, 240.0, 248.0, 256.0, 57344.0, 61440.0, 65536.0,
              2.0**-6, 2.0**-7, 2.0**-9, 2.0**-10, 2.0**-14, 2.0**-16, 2.0**-17, 2.0**-15,
              2.0**-8, 3 * 2.0**-10, 1e-30, 1e30, 3.4e38, 1.5, 1.0625, 1.125, 1.1875, 1.25,
              0.3, 1e4, 5e4, 6e4]
    base = torch.tensor(points, dtype=torch.float32)
    up = torch.nextafter(base, torch.tensor(float("inf")))
    down = torch.nextafter(base, torch.tensor(0.0))
    values = torch.cat([base, up, down, torch.tensor([float("inf"), float("nan"), 1e-45])])
    values = torch.cat([values, -values])
    generator = torch.Generator().manual_seed(0)
    # Random bit patterns over every exponent, NaNs with payloads included.
    patterns = torch.randint(-2**31, 2**31, (1 << 14,), generator=generator, dtype=torch.int64)
    return torch.cat([values, patterns.to(torch.int32).view(torch.float32)])


def to_tpu_bits(tensor):
    """`tensor` placed on tpu without any conversion (its bytes uploaded as they are)."""
    return tensor.to("tpu")


@pytest.mark.parametrize("dtype", FLOAT8, ids=IDS)
def test_round_trip_storage(dtype):
    host = codes(dtype).reshape(16, 16)
    device = host.to("tpu")
    assert device.dtype == dtype and device.device.type == "tpu"
    assert_bits_equal(device.cpu(), host)
    empty = torch.empty(3, 5, dtype=dtype, device="tpu")
    assert empty.dtype == dtype and empty.shape == (3, 5)


@pytest.mark.parametrize("dtype", FLOAT8, ids=IDS)
@pytest.mark.parametrize("source", [torch.float32, torch.bfloat16, torch.float16, torch.float64],
                         ids=["f32", "bf16", "f16", "f64"])
def test_conversion_to_float8_on_device(dtype, source):
    values = edge_values_f32()
    if source == torch.float64:
        # Doubles between float32 neighbours: PyTorch rounds to float32 first.
        values = torch.cat([values.double(), values.double() * (1 + 2.0**-30)])
    else:
        values = values.to(source)
    if source in (torch.bfloat16, torch.float16):
        every = torch.arange(-2**15, 2**15, dtype=torch.int32).to(torch.int16).view(source)
        values = torch.cat([values, every])
    device = values.to("tpu").to(dtype)
    assert_bits_equal(device, values.to(dtype))


@pytest.mark.parametrize("dtype", FLOAT8, ids=IDS)
@pytest.mark.parametrize("source", [torch.int64, torch.int32, torch.uint8, torch.bool])
def test_conversion_from_integers(dtype, source):
    if source == torch.bool:
        values = torch.tensor([True, False])
    else:
        info = torch.iinfo(source)
        values = torch.tensor([info.min, info.max, 0, 1, 17, 448, 449, 465, 100, 255],
                              dtype=torch.int64).clamp(info.min, info.max).to(source)
    assert_bits_equal(values.to("tpu").to(dtype), values.to(dtype))


@pytest.mark.parametrize("dtype", FLOAT8, ids=IDS)
@pytest.mark.parametrize("target", [torch.float32, torch.float16, torch.float64, torch.bool]
                         + FLOAT8)
def test_conversion_from_float8_all_codes(dtype, target):
    host = codes(dtype)
    assert_bits_equal(host.to("tpu").to(target), host.to(target))


@pytest.mark.parametrize("dtype", FLOAT8, ids=IDS)
def test_conversion_to_bfloat16(dtype):
    # Bit for bit but NaN: float32 NaN to bfloat16 keeps the sign on tpu where CPU gives 0x7FC0
    # (the float32 -> bfloat16 conversion, not float8's).
    host = codes(dtype)
    actual, expected = host.to("tpu").to(torch.bfloat16).cpu(), host.to(torch.bfloat16)
    nan = expected.isnan()
    assert torch.equal(actual.isnan(), nan)
    assert_bits_equal(actual[~nan], expected[~nan])


@pytest.mark.parametrize("dtype", FLOAT8, ids=IDS)
@pytest.mark.parametrize("target", [torch.int64, torch.int32, torch.int8, torch.uint8])
def test_conversion_to_integers(dtype, target):
    # Values the target holds: NaN, inf and out-of-range values are undefined in C++ and CPU's
    # results for them are whatever the compiler makes of it.
    host = codes(dtype)
    values = host.float()
    info = torch.iinfo(target)
    valid = values.isfinite() & (values.trunc() >= info.min) & (values.trunc() <= info.max)
    assert torch.equal(host.to("tpu").to(target).cpu()[valid], host.to(target)[valid])


@pytest.mark.parametrize("dtype", FLOAT8, ids=IDS)
def test_factories_and_fills(dtype):
    for value in [0.0, 1.0, -2.5, 0.3, 1e-3, float("nan")]:
        assert_bits_equal(torch.full((4,), value, dtype=dtype, device="tpu"),
                          torch.full((4,), value, dtype=dtype))
        filled = torch.empty(3, dtype=dtype, device="tpu").fill_(value)
        assert_bits_equal(filled, torch.empty(3, dtype=dtype).fill_(value))
    assert_bits_equal(torch.zeros(2, 3, dtype=dtype, device="tpu"), torch.zeros(2, 3, dtype=dtype))
    assert_bits_equal(torch.ones(2, 3, dtype=dtype, device="tpu"), torch.ones(2, 3, dtype=dtype))
    assert_bits_equal(torch.zeros_like(codes(dtype).to("tpu")), torch.zeros_like(codes(dtype)))
    # A value out of range raises CPU's overflow error instead of saturating.
    with pytest.raises(RuntimeError) as cpu_error:
        torch.full((3,), 1e6, dtype=dtype)
    with pytest.raises(RuntimeError) as tpu_error:
        torch.full((3,), 1e6, dtype=dtype, device="tpu")
    assert str(tpu_error.value) == str(cpu_error.value)


@pytest.mark.parametrize("dtype", FLOAT8, ids=IDS)
def test_views_and_data_movement(dtype):
    host = codes(dtype).reshape(16, 16)
    device = host.to("tpu")
    for view in [torch.uint8, torch.int8]:
        assert_bits_equal(device.view(view), host.view(view))
        assert_bits_equal(device.view(view).view(dtype), host)
    other = torch.arange(64, dtype=torch.int32).to(torch.uint8).view(dtype).reshape(4, 16)
    cases = {
        "reshape": lambda x, y: x.reshape(8, 32),
        "slice": lambda x, y: x[2:9:3, 1::2],
        "transpose": lambda x, y: x.t().contiguous(),
        "clone": lambda x, y: x.clone(),
        "cat": lambda x, y: torch.cat([x, y]),
        "stack": lambda x, y: torch.stack([x[:4], y]),
        "flip": lambda x, y: x.flip(0),
        "roll": lambda x, y: x.roll(3, 1),
        "index_select": lambda x, y: x.index_select(0, torch.tensor([3, 1], device=x.device)),
        "index": lambda x, y: x[torch.tensor([0, 5, 5], device=x.device)],
        "bool_index": lambda x, y: x[x.view(torch.uint8) > 100],
        "setitem": lambda x, y: x.clone().index_put_(
            (torch.tensor([1, 2], device=x.device),), y[:2]),
        "where": lambda x, y: torch.where(x.view(torch.uint8) > 60, x, x.t()),
        "where_scalar": lambda x, y: torch.where(x.view(torch.uint8) > 60, x, 0.3),
        "expand": lambda x, y: x[:1].expand(3, 16).contiguous(),
        "repeat": lambda x, y: y.repeat(2, 1),
        "narrow_copy": lambda x, y: x.narrow_copy(0, 2, 5),
        "unfold": lambda x, y: x.unfold(1, 4, 3).contiguous(),
        "diagonal": lambda x, y: x.diagonal().contiguous(),
        "pad": lambda x, y: torch.nn.functional.pad(y, (1, 2), value=1.5),
        "zero_": lambda x, y: y.clone().zero_(),
        "copy_slice": lambda x, y: x.clone().index_put_((torch.tensor([0], device=x.device),),
                                                        y[1]),
    }
    for name, case in cases.items():
        expected = case(host, other)
        actual = case(device, other.to("tpu"))
        assert actual.device.type == "tpu", name
        assert_bits_equal(actual, expected, name)
    written = torch.zeros(16, 16, dtype=dtype, device="tpu")
    written[3:5] = other[:2].to("tpu")
    expected = torch.zeros(16, 16, dtype=dtype)
    expected[3:5] = other[:2]
    assert_bits_equal(written, expected)


@pytest.mark.parametrize("dtype", FLOAT8, ids=IDS)
def test_comparisons_all_code_pairs(dtype):
    x = codes(dtype).reshape(256, 1).expand(256, 256)
    y = codes(dtype).reshape(1, 256).expand(256, 256)
    for op in [torch.eq, torch.ne]:
        assert torch.equal(op(x.to("tpu"), y.to("tpu")).cpu(), op(x, y))
    host = codes(dtype)
    for scalar in [0.3, 1000.0, 0.0, -0.0, 2.0**-9]:
        assert torch.equal((host.to("tpu") == scalar).cpu(), host == scalar)
        assert torch.equal((host.to("tpu") != scalar).cpu(), host != scalar)
    zero_dim = torch.tensor(0.3)
    assert torch.equal((host.to("tpu") == zero_dim.to("tpu")).cpu(), host == zero_dim)
    assert torch.equal(torch.isnan(host.to("tpu")).cpu(), torch.isnan(host))
    finite = host[~host.float().isnan()]
    for tensor in [host, finite]:
        assert torch.equal(tensor.to("tpu"), tensor.to("tpu").clone()) == torch.equal(
            tensor, tensor.clone())


@pytest.mark.parametrize("dtype", FLOAT8, ids=IDS)
def test_arithmetic_cpu_implements(dtype):
    host = codes(dtype)
    device = host.to("tpu")
    assert_bits_equal(device.abs(), host.abs())
    assert_bits_equal(device.clone().abs_(), host.clone().abs_())
    other = host.roll(17)
    assert_bits_equal(device * other.to("tpu"), host * other)
    assert_bits_equal(device.clone().mul_(other.to("tpu")), host.clone().mul_(other))
    generator = torch.Generator().manual_seed(1)
    a = (torch.randn(8, 16, generator=generator) * 2).to(dtype)
    b = (torch.randn(16, 4, generator=generator) * 2).to(dtype)
    c = (torch.randn(8, 4, generator=generator)).to(dtype)
    # Sums of float32 products in another order: equal up to the final float8 rounding.
    for actual, expected in [(a.to("tpu") @ b.to("tpu"), a @ b),
                             (torch.addmm(c.to("tpu"), a.to("tpu"), b.to("tpu"), beta=0.5,
                                          alpha=2.0),
                              torch.addmm(c, a, b, beta=0.5, alpha=2.0))]:
        assert actual.dtype == dtype
        torch.testing.assert_close(actual.cpu().float(), expected.float(), rtol=0.13, atol=1e-2)
    if dtype == torch.float8_e5m2:
        assert torch.equal(torch.isinf(device).cpu(), torch.isinf(host))
        assert torch.equal(torch.isfinite(device).cpu(), torch.isfinite(host))


def expect_same_error(function, host, device):
    with pytest.raises(Exception) as cpu_error:
        function(host)
    with pytest.raises(type(cpu_error.value)) as tpu_error:
        function(device)
    return cpu_error.value, tpu_error.value


@pytest.mark.parametrize("dtype", FLOAT8, ids=IDS)
def test_ops_cpu_lacks_raise(dtype):
    host = codes(dtype)[:16].reshape(4, 4)
    device = host.to("tpu")
    unsupported = {
        "lt": (lambda x: x < x, "aten::lt.Tensor"),
        "add": (lambda x: x + x, "aten::add.Tensor"),
        "neg": (lambda x: -x, "aten::neg"),
        "sum": (lambda x: x.sum(), "aten::sum"),
        "maximum": (lambda x: torch.maximum(x, x), "aten::maximum"),
        "mul_scalar": (lambda x: x * 2.0, "aten::mul.Tensor"),
        "masked_fill": (lambda x: x.masked_fill(x != x, 0.0), "aten::masked_fill.Scalar"),
        "sort": (lambda x: x.sort(), "aten::sort"),
        "triu": (lambda x: x.triu(), "aten::triu"),
        "bmm": (lambda x: torch.bmm(x[None], x[None]), "aten::bmm"),
        "gather": (lambda x: x.gather(0, torch.zeros(1, 4, dtype=torch.long, device=x.device)),
                   "aten::gather"),
    }
    if dtype != torch.float8_e5m2:
        unsupported["isinf"] = (lambda x: x.isinf(), "aten::isinf")
    for name, (function, op) in unsupported.items():
        _, error = expect_same_error(function, host, device)
        assert isinstance(error, NotImplementedError), name
        assert str(error).splitlines()[0] == (
            f"{op}: not implemented for '{str(dtype).removeprefix('torch.').capitalize()}' on "
            "the tpu device (as in PyTorch's CPU kernels)"), name
    # A float8 result from another dtype: CPU has no kernel either.
    with pytest.raises(NotImplementedError):
        torch.rand(3, dtype=dtype)
    with pytest.raises(NotImplementedError):
        torch.rand(3, dtype=dtype, device="tpu")


@pytest.mark.parametrize("dtype", FLOAT8, ids=IDS)
def test_promotion_errors(dtype):
    host = codes(dtype)[:8]
    device = host.to("tpu")
    for name, function in {
        "mixed_float": lambda x: x == x.float(),
        "mixed_float8": lambda x: x * x.to(
            torch.float8_e5m2 if x.dtype != torch.float8_e5m2 else torch.float8_e4m3fn),
        "cat_mixed": lambda x: torch.cat([x, x.float()]),
    }.items():
        cpu_error, tpu_error = expect_same_error(function, host, device)
        assert str(tpu_error).splitlines()[0] == str(cpu_error).splitlines()[0], name


@pytest.mark.parametrize("dtype", FLOAT8, ids=IDS)
def test_printing_and_serialization(dtype):
    host = codes(dtype)[::7]
    device = host.to("tpu")
    assert repr(device).replace(", device='tpu:0'", "") == repr(host)
    buffer = io.BytesIO()
    torch.save({"t": device}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)["t"]
    assert loaded.device == device.device
    assert_bits_equal(loaded, host)
    buffer.seek(0)
    assert_bits_equal(torch.load(buffer, map_location="cpu")["t"], host)


def scaled_mm_inputs(a_dtype, b_dtype, m=16, k=32, n=8, seed=0):
    generator = torch.Generator().manual_seed(seed)
    a = (torch.randn(m, k, generator=generator) * 3).to(a_dtype)
    b = (torch.randn(n, k, generator=generator) * 3).to(b_dtype).t()  # column-major, as cuBLAS
    return a, b, generator


SCALED_MM_CASES = [
    # (a dtype, b dtype, scaling, out_dtype, bias dtype, scale_result, use_fast_accum)
    (torch.float8_e4m3fn, torch.float8_e4m3fn, "tensor", None, None, False, False),
    (torch.float8_e4m3fn, torch.float8_e4m3fn, "tensor", torch.bfloat16, None, False, False),
    (torch.float8_e4m3fn, torch.float8_e4m3fn, "tensor", torch.float32, None, False, True),
    (torch.float8_e4m3fn, torch.float8_e4m3fn, "tensor", torch.float16, None, False, False),
    (torch.float8_e4m3fn, torch.float8_e5m2, "tensor", torch.bfloat16, torch.bfloat16, False,
     False),
    (torch.float8_e5m2, torch.float8_e4m3fn, "tensor", torch.float32, torch.float32, False, True),
    (torch.float8_e4m3fn, torch.float8_e4m3fn, "row", torch.bfloat16, torch.bfloat16, False,
     False),
    (torch.float8_e4m3fn, torch.float8_e4m3fn, "row", torch.float32, None, False, False),
    (torch.float8_e4m3fn, torch.float8_e4m3fn, "tensor", torch.float8_e4m3fn, None, True, False),
    (torch.float8_e4m3fn, torch.float8_e4m3fn, "tensor", torch.float8_e5m2, None, True, False),
    (torch.float8_e4m3fn, torch.float8_e4m3fn, "tensor", torch.float32, None, True, False),
    (torch.float8_e4m3fnuz, torch.float8_e4m3fnuz, "tensor", torch.bfloat16, None, False, False),
    (torch.float8_e5m2fnuz, torch.float8_e5m2fnuz, "row", torch.float32, None, False, False),
]


def aten_kernels():
    """CPU's own `_scaled_mm`: on hosts with AMX/AVX512-FP16 CPU hands it to oneDNN, which takes
    no fnuz float8 and raises other errors; other hosts run ATen's kernel, the reference."""
    return torch.backends.mkldnn.flags(enabled=False)


@pytest.mark.parametrize("case", SCALED_MM_CASES, ids=lambda case: "-".join(map(str, case)))
def test_scaled_mm(case):
    a_dtype, b_dtype, scaling, out_dtype, bias_dtype, scale_result, fast = case
    a, b, generator = scaled_mm_inputs(a_dtype, b_dtype)
    if scaling == "tensor":
        scale_a, scale_b = torch.tensor(0.37), torch.tensor(1.9)
    else:
        scale_a = torch.rand(16, 1, generator=generator) + 0.5
        scale_b = torch.rand(1, 8, generator=generator) + 0.5
    kwargs = {"out_dtype": out_dtype, "use_fast_accum": fast}
    if bias_dtype is not None:
        kwargs["bias"] = torch.randn(8, generator=generator).to(bias_dtype)
    if scale_result:
        kwargs["scale_result"] = torch.tensor(3.0)
    with aten_kernels():
        expected = torch._scaled_mm(a, b, scale_a, scale_b, **kwargs)
    on_tpu = {key: value.to("tpu") if isinstance(value, torch.Tensor) else value
              for key, value in kwargs.items()}
    before = torch_tpu.metrics()["fallback_ops"]
    actual = torch._scaled_mm(a.to("tpu"), b.to("tpu"), scale_a.to("tpu"), scale_b.to("tpu"),
                              **on_tpu)
    assert torch_tpu.metrics()["fallback_ops"] == before
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if expected.dtype == torch.float32:
        # float32 sums in another order (and scales applied after the product).
        torch.testing.assert_close(actual.cpu(), expected, rtol=1e-5, atol=1e-4)
    else:
        # One rounding of nearly equal float32 values: at most one step of the result type
        # apart, and almost always equal.
        difference = (actual.cpu().float() - expected.float()).abs()
        step = expected.float().abs() * 2.0 ** -(7 if expected.dtype == torch.bfloat16 else 1)
        assert bool((difference <= step + 1e-6).all())
        assert (difference > 0).float().mean() < 0.05


def test_scaled_mm_errors():
    a, b, _ = scaled_mm_inputs(torch.float8_e4m3fn, torch.float8_e4m3fn)
    one = torch.tensor(1.0)
    cases = {
        "rank1_scales": lambda a, b, s, dev: torch._scaled_mm(
            a, b, torch.ones(16, device=dev), torch.ones(8, device=dev)),
        "float_inputs": lambda a, b, s, dev: torch._scaled_mm(a.float(), b.float(), s, s),
        "bias_size": lambda a, b, s, dev: torch._scaled_mm(a, b, s, s,
                                                           bias=torch.ones(3, device=dev)),
        "shapes": lambda a, b, s, dev: torch._scaled_mm(a, b.t(), s, s),
    }
    for name, function in cases.items():
        with pytest.raises(Exception) as cpu_error, aten_kernels():
            function(a, b, one, "cpu")
        with pytest.raises(type(cpu_error.value)) as tpu_error:
            function(a.to("tpu"), b.to("tpu"), one.to("tpu"), "tpu")
        cpu_text, tpu_text = str(cpu_error.value), str(tpu_error.value)
        if name in ("rank1_scales", "float_inputs"):
            assert tpu_text.splitlines()[0] == cpu_text.splitlines()[0] == (
                "Invalid scaling configuration."), name
        else:
            assert tpu_text.splitlines()[0].endswith(cpu_text.splitlines()[0]), name


def test_no_fallback():
    before = torch_tpu.metrics()["fallback_ops"]
    x = torch.randn(64, 64, device="tpu")
    y = x.to(torch.float8_e4m3fn)
    z = (y.abs() * y).to(torch.bfloat16)
    w = torch.cat([y, y]).view(torch.uint8).view(torch.float8_e4m3fn).float()
    assert (y == y.clone()).all().item()
    z.cpu(), w.cpu()
    assert torch_tpu.metrics()["fallback_ops"] == before


def test_compiled_float8_training_step():
    """What torchao's float8 linear does: scale, cast, _scaled_mm, under torch.compile."""

    def step(x, w, scale_x, scale_w):
        x8 = (x / scale_x).to(torch.float8_e4m3fn)
        w8 = (w / scale_w).to(torch.float8_e5m2)
        out = torch._scaled_mm(x8, w8.t(), scale_x, scale_w, out_dtype=torch.bfloat16)
        return out, x8, w8

    generator = torch.Generator().manual_seed(3)
    x, w = torch.randn(32, 64, generator=generator), torch.randn(16, 64, generator=generator)
    scale_x, scale_w = x.abs().max() / 448, w.abs().max() / 57344
    expected = step(x, w, scale_x, scale_w)
    before = torch_tpu.metrics()["fallback_ops"]
    compiled = torch.compile(step, backend="tpu")
    actual = compiled(x.to("tpu"), w.to("tpu"), scale_x.to("tpu"), scale_w.to("tpu"))
    assert torch_tpu.metrics()["fallback_ops"] == before
    assert_bits_equal(actual[1], expected[1], "x8")
    assert_bits_equal(actual[2], expected[2], "w8")
    difference = (actual[0].cpu().float() - expected[0].float()).abs()
    assert bool((difference <= expected[0].float().abs() * 2.0**-7 + 1e-6).all())

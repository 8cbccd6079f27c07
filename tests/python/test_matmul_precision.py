"""Matmul precision: torch.set_float32_matmul_precision and torch.tpu.precision set the StableHLO
precision_config of the dot_general and convolution ops programs are built with, in every mode,
and are part of the program key ("highest" -> HIGHEST, "high" -> HIGH, "medium" -> DEFAULT).

On the XLA CPU plugin every precision computes in float32, so results equal CPU's at float32
tolerance; what is checked is the program text and that programs of different precisions are
never reused for each other.
"""

import json
import re
import threading

import pytest
import torch

import torch_tpu
import torch_tpu.aot as aot

MAPPING = {"highest": "HIGHEST", "high": "HIGH", "medium": "DEFAULT"}


@pytest.fixture(autouse=True)
def _restore_precision():
    previous = torch.get_float32_matmul_precision()
    # The tests check that no op of theirs fell back: counts start at zero (an earlier test in
    # this worker may have counted a fallback of its own).
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    yield
    torch.set_float32_matmul_precision(previous)


def precisions_in(captured) -> list[str]:
    """The precision_config values of every dot_general/convolution in the captured programs."""
    found = []
    for _, text in captured:
        for line in text.splitlines():
            if "stablehlo.dot_general" in line or "stablehlo.convolution" in line:
                names = re.findall(r"#stablehlo<precision (\w+)>", line)
                assert len(names) == 2 and names[0] == names[1], line
                found.append(names[0])
    return found


def sample(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.strict_mode
@pytest.mark.parametrize("setting", list(MAPPING))
def test_matmul_and_linear_carry_the_precision(tpu, setting):
    a, b, w = sample(8, 16), sample(16, 4, seed=1), sample(5, 16, seed=2)
    torch.set_float32_matmul_precision(setting)
    with aot.capture_modules() as captured:
        product = a.to(tpu) @ b.to(tpu)
        linear = torch.nn.functional.linear(a.to(tpu), w.to(tpu), torch.ones(5, device=tpu))
        batched = torch.bmm(a.to(tpu).view(2, 4, 16), b.to(tpu).expand(2, 16, 4))
        torch.tpu.synchronize()
    assert precisions_in(captured) == [MAPPING[setting]] * 3
    torch.testing.assert_close(product.cpu(), a @ b)
    torch.testing.assert_close(linear.cpu(), torch.nn.functional.linear(a, w, torch.ones(5)))
    torch.testing.assert_close(batched.cpu(), torch.bmm(a.view(2, 4, 16), b.expand(2, 16, 4)))
    assert torch_tpu.metrics()["fallback_ops"] == {}


@pytest.mark.strict_mode
def test_the_default_is_highest(tpu):
    assert torch.get_float32_matmul_precision() == "highest"
    with aot.capture_modules() as captured:
        (sample(4, 4).to(tpu) @ sample(4, 4).to(tpu)).cpu()
    assert precisions_in(captured) == ["HIGHEST"]


@pytest.mark.strict_mode
def test_changing_the_precision_never_reuses_a_program(tpu):
    a, b = sample(24, 8, seed=3).to(tpu), sample(8, 24, seed=4).to(tpu)
    torch.set_float32_matmul_precision("highest")
    (a @ b).cpu()  # built and cached under HIGHEST
    compiles = torch_tpu.metrics()["compile_count"]
    torch.set_float32_matmul_precision("medium")
    with aot.capture_modules() as captured:
        medium = (a @ b).cpu()
    assert precisions_in(captured) == ["DEFAULT"]
    assert torch_tpu.metrics()["compile_count"] == compiles + 1
    torch.set_float32_matmul_precision("high")
    (a @ b).cpu()
    assert torch_tpu.metrics()["compile_count"] == compiles + 2
    # Back to a precision built before: its program is reused.
    torch.set_float32_matmul_precision("highest")
    with aot.capture_modules() as captured:
        highest = (a @ b).cpu()
    assert precisions_in(captured) == ["HIGHEST"]
    assert torch_tpu.metrics()["compile_count"] == compiles + 2
    torch.testing.assert_close(medium, highest)


@pytest.mark.strict_mode
def test_convolutions_and_their_backward_carry_the_precision(tpu):
    x, w = sample(2, 3, 8, 8, seed=5), sample(4, 3, 3, 3, seed=6)
    xt, wt = x.to(tpu).requires_grad_(), w.to(tpu).requires_grad_()
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    torch.set_float32_matmul_precision("high")
    with aot.capture_modules() as captured:
        out = torch.nn.functional.conv2d(xt, wt, padding=1)
        out.sum().backward()
        transposed = torch.nn.functional.conv_transpose2d(xt.detach(), wt.detach().transpose(0, 1))
        torch.tpu.synchronize()
    found = precisions_in(captured)
    assert len(found) >= 4 and set(found) == {"HIGH"}
    expected = torch.nn.functional.conv2d(xc, wc, padding=1)
    expected.sum().backward()
    torch.testing.assert_close(out.detach().cpu(), expected.detach())
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)
    torch.testing.assert_close(wt.grad.cpu(), wc.grad)
    torch.testing.assert_close(transposed.cpu(),
                               torch.nn.functional.conv_transpose2d(x, w.transpose(0, 1)))
    assert torch_tpu.metrics()["fallback_ops"] == {}


@pytest.mark.strict_mode
def test_other_dtypes_keep_highest(tpu):
    # The setting is the float32 matmul precision: half types keep their mantissa, float64 too.
    torch.set_float32_matmul_precision("medium")
    with aot.capture_modules() as captured:
        for dtype in (torch.bfloat16, torch.float16, torch.float64):
            a, b = sample(4, 8, dtype=dtype), sample(8, 4, seed=1, dtype=dtype)
            torch.testing.assert_close((a.to(tpu) @ b.to(tpu)).cpu(), a @ b)
        c = torch.complex(sample(4, 4), sample(4, 4, seed=2))
        torch.testing.assert_close((c.to(tpu) @ c.to(tpu)).cpu(), c @ c)
    found = precisions_in(captured)
    assert found[:3] == ["HIGHEST"] * 3
    assert "DEFAULT" in found[3:]  # complex64 is float32 pairs: the setting applies


def matmul_precision_probe(tpu):
    """The precision a 4x4 float32 matmul's program carries, when called."""
    a, b = sample(4, 4).to(tpu), sample(4, 4, seed=1).to(tpu)

    def precision_of_a_matmul():
        with aot.capture_modules() as captured:
            (a @ b).cpu()
        (found,) = precisions_in(captured)
        return found

    return precision_of_a_matmul


@pytest.mark.strict_mode
def test_torch_tpu_precision_overrides_the_setting_in_its_block(tpu):
    precision_of_a_matmul = matmul_precision_probe(tpu)
    torch.set_float32_matmul_precision("highest")
    with torch.tpu.precision(torch.tpu.Precision.DEFAULT):
        assert precision_of_a_matmul() == "DEFAULT"
        with torch.tpu.precision("high"):
            assert precision_of_a_matmul() == "HIGH"
        # Another thread is not in this thread's block.
        seen = []
        thread = threading.Thread(target=lambda: seen.append(precision_of_a_matmul()))
        thread.start()
        thread.join()
        assert seen == ["HIGHEST"]
        assert precision_of_a_matmul() == "DEFAULT"
    assert precision_of_a_matmul() == "HIGHEST"
    assert torch.get_float32_matmul_precision() == "highest"


@pytest.mark.strict_mode
def test_torch_tpu_precision_is_also_a_decorator(tpu):
    precision_of_a_matmul = matmul_precision_probe(tpu)
    @torch.tpu.precision("default")
    def in_default(inner=None):
        return [precision_of_a_matmul()] + (inner() if inner else [])

    @torch.tpu.precision(torch.tpu.Precision.HIGH)
    def in_high_then_raise():
        seen.append(precision_of_a_matmul())
        raise KeyError("raised inside")

    torch.set_float32_matmul_precision("highest")
    assert in_default() == ["DEFAULT"]
    assert precision_of_a_matmul() == "HIGHEST"
    assert in_default(in_default) == ["DEFAULT", "DEFAULT"]  # the same instance, nested
    seen = []
    with pytest.raises(KeyError):
        in_high_then_raise()
    assert seen == ["HIGH"]
    assert precision_of_a_matmul() == "HIGHEST"  # restored after the exception
    with torch.tpu.precision("high"):
        assert in_default() == ["DEFAULT"]
        assert precision_of_a_matmul() == "HIGH"
    assert precision_of_a_matmul() == "HIGHEST"
    assert torch.get_float32_matmul_precision() == "highest"


def test_torch_tpu_precision_rejects_unknown_modes():
    with pytest.raises(ValueError, match=r"^torch\.tpu\.precision: expected one of \['default', "
                                         r"'high', 'highest'\] or a torch\.tpu\.Precision, got "
                                         r"'medium'$"):
        torch.tpu.precision("medium")
    with pytest.raises(TypeError, match=r"^torch\.tpu\.precision: expected a torch\.tpu\."
                                        r"Precision or str, got int$"):
        torch.tpu.precision(3)
    assert [p.value for p in torch.tpu.Precision] == ["default", "high", "highest"]


def test_defer_and_fuse_lowers_each_op_with_its_own_precision(tpu):
    a, b = sample(6, 6, seed=7), sample(6, 6, seed=8)
    at, bt = a.to(tpu), b.to(tpu)
    with torch_tpu.eager_mode("defer_and_fuse"):
        with aot.capture_modules() as captured:
            torch.set_float32_matmul_precision("medium")
            first = at @ bt
            torch.set_float32_matmul_precision("highest")
            second = first @ bt
            result = second.cpu()  # one fused program, cut after the change
    assert precisions_in(captured) == ["DEFAULT", "HIGHEST"]
    torch.testing.assert_close(result, (a @ b) @ b)
    # The same graph recorded under other precisions is another program.
    compiles = torch_tpu.metrics()["compile_count"]
    with torch_tpu.eager_mode("defer_and_fuse"):
        torch.set_float32_matmul_precision("highest")
        first = at @ bt
        (first @ bt).cpu()
    assert torch_tpu.metrics()["compile_count"] == compiles + 1
    assert torch_tpu.metrics()["fallback_ops"] == {}


def test_compiled_graphs_follow_the_precision_of_each_call(tpu):
    def f(x, w):
        return torch.relu(x @ w) @ w.t()

    compiled = torch.compile(f, backend="tpu")
    x, w = sample(8, 8, seed=9), sample(8, 8, seed=10)
    xt, wt = x.to(tpu), w.to(tpu)
    torch.set_float32_matmul_precision("highest")
    with aot.capture_modules() as captured:
        highest = compiled(xt, wt).cpu()
    assert precisions_in(captured) == ["HIGHEST", "HIGHEST"]
    compiles = torch_tpu.metrics()["compile_count"]
    torch.set_float32_matmul_precision("medium")
    with aot.capture_modules() as captured:
        medium = compiled(xt, wt).cpu()
    assert precisions_in(captured) == ["DEFAULT", "DEFAULT"]
    assert torch_tpu.metrics()["compile_count"] > compiles
    torch.testing.assert_close(highest, f(x, w))
    torch.testing.assert_close(medium, f(x, w))
    assert torch_tpu.metrics()["fallback_ops"] == {}


@pytest.mark.strict_mode
def test_libtpu_compiles_each_precision_into_a_different_tpu_program(tpu):
    a, b = sample(128, 128).to(tpu), sample(128, 128, seed=1).to(tpu)
    modules = {}
    for setting in ("highest", "medium"):
        torch.set_float32_matmul_precision(setting)
        with aot.capture_modules() as captured:
            (a @ b).cpu()
        (modules[setting],) = [text for _, text in captured]
    compiled = {setting: aot.compile_module("v5e", text) for setting, text in modules.items()}
    # HIGHEST runs float32 operands as several bfloat16 passes, DEFAULT as one: a larger program.
    assert all(program.cost["flops"] > 0 for program in compiled.values())
    assert len(compiled["highest"].serialized) > len(compiled["medium"].serialized)


FIRST_PRODUCTS = r"""
import json, re, sys
import torch, torch_tpu
import torch_tpu.aot as aot

def precisions(captured):
    return [re.findall(r"#stablehlo<precision (\w+)>", line)[0]
            for _, text in captured for line in text.splitlines()
            if "stablehlo.dot_general" in line or "stablehlo.convolution" in line]

g = torch.Generator().manual_seed(0)
a, b = torch.randn(6, 6, generator=g), torch.randn(6, 6, generator=g)
x, w = torch.randn(1, 2, 5, 5, generator=g), torch.randn(3, 2, 3, 3, generator=g)
ints = torch.randint(-3, 3, (6, 6), generator=g)
at, bt, xt, wt, it = (t.to("tpu") for t in (a, b, x, w, ints))
out = {}
with torch_tpu.eager_mode(sys.argv[1]):
    with aot.capture_modules() as captured:
        (it @ it).cpu()  # reads no precision: int64 products are always HIGHEST
    out["int"] = precisions(captured)
    torch.set_float32_matmul_precision("medium")
    with aot.capture_modules() as captured:
        first = at @ bt
        conv = torch.nn.functional.conv2d(xt, wt)
        torch.set_float32_matmul_precision("highest")
        second = first @ bt
        out["close"] = bool(torch.allclose(second.cpu(), (a @ b) @ b, atol=1e-5)
                            and torch.allclose(conv.cpu(), torch.nn.functional.conv2d(x, w),
                                               atol=1e-5))
    out["float"] = precisions(captured)
    torch.set_float32_matmul_precision("high")
    with aot.capture_modules() as captured:
        out["int_again"] = bool(torch.equal((it @ it).cpu(), ints @ ints))
        torch.tpu.synchronize()
    with aot.capture_modules() as captured:
        (at @ bt).cpu()
    out["high"] = precisions(captured)
print(json.dumps(out))
"""


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
def test_the_first_product_of_a_process_carries_the_precision(mode):
    # A launch signs the precision only for lowerings known to read it (lowering/
    # matmul_precision.h): the first product of each kind in a fresh process learns that it
    # does, and is built under the precision of its call, as is every later one.
    from conftest import run_python

    completed = run_python(FIRST_PRODUCTS.replace("sys.argv[1]", repr(mode)))
    assert completed.returncode == 0, completed.stderr[-3000:]
    out = json.loads(completed.stdout.strip().splitlines()[-1])
    assert out["int"] == ["HIGHEST"]
    # Defer-and-fuse: one fused graph of the product, the convolution and the second product.
    assert out["float"] == ["DEFAULT", "DEFAULT", "HIGHEST"]
    assert out["close"] and out["int_again"]
    assert out["high"] == ["HIGH"]

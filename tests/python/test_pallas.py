"""Custom JAX kernels as tpu ops (torch.tpu.pallas.jax_op): Pallas kernels traced once per
signature, linked into our programs, run in strict, DeferAndFuse and compiled modes, forward and
backward, against PyTorch CPU. Shapes stay small: Pallas interpret mode traces slowly."""

import json
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
import torch
from jax.experimental import pallas as pl

import torch_tpu
from torch_tpu import pallas as tpu_pallas


def _add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def _add_backward(x, y, grad):
    # jax.vjp cannot differentiate a pallas_call: kernels bring their backward.
    return grad, grad


@tpu_pallas.jax_op(backward=_add_backward)
def pallas_add(x, y):
    block = min(x.shape[0], 8)
    return pl.pallas_call(
        _add_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // block,),
        in_specs=[pl.BlockSpec((block,), lambda i: (i,))] * 2,
        out_specs=pl.BlockSpec((block,), lambda i: (i,)),
        interpret=tpu_pallas.interpret(),
    )(x, y)


def _matmul_kernel(a_ref, b_ref, o_ref):
    o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32
                         ).astype(o_ref.dtype)


def _matmul(a, b, block=8):
    m, n = a.shape[0], b.shape[1]
    bm, bn = min(m, block), min(n, block)
    return pl.pallas_call(
        _matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        grid=(m // bm, n // bn),
        in_specs=[pl.BlockSpec((bm, a.shape[1]), lambda i, j: (i, 0)),
                  pl.BlockSpec((b.shape[0], bn), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        interpret=tpu_pallas.interpret(),
    )(a, b)


def _matmul_backward(a, b, grad, block=8):
    # The same tiled kernel computes both gradients.
    return _matmul(grad, b.T, block), _matmul(a.T, grad, block)


pallas_matmul = tpu_pallas.jax_op(_matmul, name="pallas_matmul", backward=_matmul_backward)


def _inputs(*shapes, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator) for shape in shapes]


def _leaves(tensors, device):
    return [t.detach().to(device).requires_grad_() for t in tensors]


def _check_forward_backward(op, reference, shapes, **tolerances):
    cpu_inputs = _leaves(_inputs(*shapes), "cpu")
    tpu_inputs = _leaves(_inputs(*shapes), "tpu")
    expected = reference(*cpu_inputs)
    result = op(*tpu_inputs)
    assert result.device.type == "tpu" and result.dtype == expected.dtype
    torch.testing.assert_close(result.cpu(), expected.detach(), **tolerances)
    weight = torch.randn(expected.shape, generator=torch.Generator().manual_seed(1))
    (expected * weight).sum().backward()
    (result * weight.to("tpu")).sum().backward()
    for tpu_input, cpu_input in zip(tpu_inputs, cpu_inputs):
        torch.testing.assert_close(tpu_input.grad.cpu(), cpu_input.grad, **tolerances)


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
def test_pallas_add_forward_backward(mode):
    with torch_tpu.eager_mode(mode):
        _check_forward_backward(pallas_add, torch.add, [(16,), (16,)])


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
def test_pallas_matmul_forward_backward(mode):
    with torch_tpu.eager_mode(mode):
        _check_forward_backward(pallas_matmul, torch.matmul, [(16, 8), (8, 16)],
                                rtol=1e-5, atol=1e-5)


def test_fused_graph_holds_the_kernel_with_other_ops():
    x, y = _inputs((16,), (16,))
    torch_tpu.reset_metrics()
    with torch_tpu.eager_mode("defer_and_fuse"):
        result = (pallas_add(x.to("tpu") * 2, y.to("tpu")) + 1).cpu()
    torch.testing.assert_close(result, x * 2 + y + 1)
    assert torch_tpu.metrics()["fused_ops"] >= 3


def test_compiled_forward_backward_without_graph_break():
    def model(a, b, x):
        return torch.relu(pallas_matmul(a, b)) + pallas_add(x, x).reshape(16, 1)

    compiled = torch.compile(model, backend="tpu", fullgraph=True)
    shapes = [(16, 8), (8, 16), (16,)]
    cpu_inputs = _leaves(_inputs(*shapes), "cpu")
    tpu_inputs = _leaves(_inputs(*shapes), "tpu")
    expected = torch.relu(cpu_inputs[0] @ cpu_inputs[1]) + (2 * cpu_inputs[2]).reshape(16, 1)
    result = compiled(*tpu_inputs)
    torch.testing.assert_close(result.cpu(), expected.detach(), rtol=1e-5, atol=1e-5)
    expected.sum().backward()
    result.sum().backward()
    for tpu_input, cpu_input in zip(tpu_inputs, cpu_inputs):
        torch.testing.assert_close(tpu_input.grad.cpu(), cpu_input.grad, rtol=1e-5, atol=1e-5)


def test_default_backward_is_jax_vjp_and_keyword_arguments_are_static():
    @tpu_pallas.jax_op
    def scaled_tanh(x, *, scale):
        return jnp.tanh(x) * scale

    x = torch.randn(5, 3)
    tx = x.to("tpu").requires_grad_()
    cx = x.clone().requires_grad_()
    result = scaled_tanh(tx, scale=3.0)
    expected = torch.tanh(cx) * 3.0
    torch.testing.assert_close(result.cpu(), expected.detach())
    result.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(tx.grad.cpu(), cx.grad)
    torch.testing.assert_close(scaled_tanh(tx, scale=0.5).cpu(), torch.tanh(x) * 0.5)


def test_results_keep_their_structure_and_dtypes():
    @tpu_pallas.jax_op
    def stats(x, counts):
        return {"mean": x.mean(axis=0), "total": counts.sum(), "positive": x > 0}

    x, counts = torch.randn(4, 3), torch.arange(6, dtype=torch.int64)
    result = stats(x.to("tpu"), counts.to("tpu"))
    assert set(result) == {"mean", "total", "positive"}
    torch.testing.assert_close(result["mean"].cpu(), x.mean(0))
    assert result["total"].dtype == torch.int64 and result["total"].item() == 15
    assert torch.equal(result["positive"].cpu(), x > 0)


def test_traced_once_per_signature_and_compiled_once():
    x, y = _inputs((8,), (8,))
    tx, ty = x.to("tpu"), y.to("tpu")
    pallas_add(tx, ty).cpu()
    traced = len(pallas_add._jax_op.signatures)
    torch_tpu.reset_metrics()
    for _ in range(3):
        torch.testing.assert_close(pallas_add(tx, ty).cpu(), x + y)
    assert len(pallas_add._jax_op.signatures) == traced
    assert torch_tpu.metrics().get("compile_count", 0) == 0
    pallas_add(tx[:4], ty[:4]).cpu()  # a new shape traces again
    assert len(pallas_add._jax_op.signatures) == traced + 1


def test_non_contiguous_inputs_are_read_through_their_views():
    a, b = _inputs((8, 16), (16, 8))
    result = pallas_matmul(a.to("tpu").t().contiguous().t(), b.to("tpu").t().t())
    torch.testing.assert_close(result.cpu(), a @ b, rtol=1e-5, atol=1e-5)
    at = a.t().contiguous()
    torch.testing.assert_close(pallas_matmul(at.to("tpu").t(), b.to("tpu")).cpu(), a @ b,
                               rtol=1e-5, atol=1e-5)


def test_bad_inputs_name_the_op_shapes_dtypes_and_devices():
    x = torch.randn(8)
    with pytest.raises(RuntimeError) as error:
        pallas_add(x.to("tpu"), x)
    assert str(error.value) == (
        "jax_op pallas_add: expected tensors on one tpu device, got shapes [(8,), (8,)], "
        "dtypes [torch.float32, torch.float32], devices ['tpu:0', 'cpu']")
    with pytest.raises(TypeError) as error:
        pallas_add(x.to("tpu"), 1.0)
    assert str(error.value) == (
        "jax_op pallas_add: positional arguments must be tensors (pass other values as keyword "
        "arguments); argument 1 is a float")


def test_tracing_errors_name_the_op_and_signature():
    with pytest.raises(RuntimeError, match=r"^jax_op pallas_matmul: tracing for cpu failed "
                       r"\(shapes \[\(8, 4\), \(8, 4\)\], dtypes \[torch.float32, "
                       r"torch.float32\], devices \['tpu:0', 'tpu:0'\]\): "):
        pallas_matmul(torch.ones(8, 4, device="tpu"), torch.ones(8, 4, device="tpu"))


def test_missing_jax_is_an_import_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "jax", None)
    with pytest.raises(ImportError) as error:
        tpu_pallas.jax_op(lambda x: x)
    assert str(error.value) == (
        "torch.tpu.pallas needs JAX to trace kernels: pip install 'torch_tpu[kernels]'")


def test_torch_tpu_pallas_is_the_module():
    assert torch.tpu.pallas is tpu_pallas


def test_jax_imported_first_still_starts_only_its_cpu_backend():
    # JAX read JAX_PLATFORMS when it was imported; with none chosen, its first call would start
    # every backend it finds (libtpu's, which ignores SIGPROF from then on).
    code = """
import os, signal
import jax, jax.numpy as jnp
import torch, torch_tpu
from torch_tpu import _signals, pallas
kernel = pallas.jax_op(lambda x: jnp.sin(x) * 2)
print(kernel(torch.ones(4, device="tpu")).cpu().tolist())
print([d.platform for d in jax.devices()], signal.SIGPROF in _signals._ignored_by_the_process())
"""
    environment = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    child = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True,
                           text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    values, platforms = child.stdout.strip().splitlines()[-2:]
    torch.testing.assert_close(torch.tensor(json.loads(values)), torch.ones(4).sin() * 2)
    assert platforms == "['cpu'] False"


def test_pallas_kernel_lowers_to_a_mosaic_call_that_libtpu_compiles():
    import torch_tpu.aot as aot

    a = torch.randn(128, 128, device="tpu")
    # Mosaic wants (8, 128)-aligned blocks.
    text = tpu_pallas.lower(pallas_matmul, a, a, target="tpu", block=128)
    assert "tpu_custom_call" in text and '"func.call"' in text
    program = aot.compile_module("v5e", text, "pallas_matmul")
    assert program.serialized
    assert program.memory["argument_bytes"] == 2 * 128 * 128 * 4
    assert program.memory["output_bytes"] == 128 * 128 * 4


def test_one_kernel_twice_in_a_fused_and_a_compiled_program():
    # The kernel's functions are linked into the module once and called twice.
    x, y = _inputs((16,), (16,))
    torch_tpu.reset_metrics()
    with torch_tpu.eager_mode("defer_and_fuse"):
        fused = pallas_add(pallas_add(x.to("tpu"), y.to("tpu")), y.to("tpu")).cpu()
    torch.testing.assert_close(fused, x + y + y)
    assert torch_tpu.metrics()["fused_graphs"] >= 1
    compiled = torch.compile(lambda a, b: pallas_add(pallas_add(a, b), b), backend="tpu",
                             fullgraph=True)
    torch.testing.assert_close(compiled(x.to("tpu"), y.to("tpu")).cpu(), x + y + y)


def test_bfloat16_kernel():
    x, y = (t.to(torch.bfloat16) for t in _inputs((16,), (16,)))
    result = pallas_add(x.to("tpu"), y.to("tpu"))
    assert result.dtype == torch.bfloat16
    torch.testing.assert_close(result.cpu(), x + y)


def test_unknown_kernel_key_is_a_clear_error():
    with pytest.raises(RuntimeError, match=r"^tpu_kernels::jax_call: kernel nope:0 was not traced "
                       r"in this process \(call its jax_op first\)"):
        torch.ops.tpu_kernels.jax_call("nope:0", [torch.ones(4, device="tpu")])


def test_module_is_serialized_at_the_plugins_stablehlo_version():
    from jax._src.lib.mlir.dialects import hlo

    # xla-cpu-pjrt 0.0.1 reports [1, 13, 3]; JAX 0.10 writes 1.17: kernels are downgraded.
    reported = torch_tpu.runtime_info()["plugin_attributes"]["stablehlo_current_version"]
    assert tpu_pallas._plugin_stablehlo_version() == ".".join(
        re.findall(r"\d+", str(reported))[:3])
    assert (tpu_pallas._version_tuple(tpu_pallas._plugin_stablehlo_version()) <
            tpu_pallas._version_tuple(hlo.get_current_version()))


def test_integer_inputs_get_no_gradient_and_64_bit_types_trace_as_such():
    @tpu_pallas.jax_op
    def gather_scale(x, index):
        return jnp.take(x, index) * 2.0

    x, index = torch.randn(6), torch.tensor([0, 2, 2, 5])
    tx, cx = x.to("tpu").requires_grad_(), x.clone().requires_grad_()
    result = gather_scale(tx, index.to("tpu"))
    expected = cx[index] * 2
    torch.testing.assert_close(result.cpu(), expected.detach())
    result.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(tx.grad.cpu(), cx.grad)


def test_ops_tracing_to_one_module_keep_their_own_backward():
    def double(x):
        return x * 2

    plain = tpu_pallas.jax_op(double, name="double")
    custom = tpu_pallas.jax_op(double, name="double", backward=lambda x, g: (g * 10,))
    x = torch.ones(4, device="tpu", requires_grad=True)
    plain(x).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), torch.full((4,), 2.0))
    x.grad = None
    custom(x).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), torch.full((4,), 10.0))

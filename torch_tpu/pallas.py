"""Custom kernels written in JAX (Pallas, Tokamax, Helion's Pallas backend) as PyTorch ops.

``torch.tpu.pallas.jax_op(fn)`` turns a JAX function of arrays into an op on ``tpu`` tensors. JAX
only traces the function, once per input signature, into StableHLO; the traced functions are
linked into our own programs (eager, DeferAndFuse, ``torch.compile``) and run through our PJRT
client like any other op. JAX is never used at run time. See docs/kernels.md.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import itertools
import os
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

from torch_tpu import _C

__all__ = ["jax_op", "interpret", "platform", "target_platform", "lower"]

_EXTRA_HINT = "pip install 'torch_tpu[kernels]'"

_MLIR_ELEMENT = {
    torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.int8: "i8", torch.int16: "i16", torch.int32: "i32", torch.int64: "i64",
    torch.uint8: "ui8", torch.uint16: "ui16", torch.uint32: "ui32", torch.uint64: "ui64",
    torch.bool: "i1",
}

_PLATFORM: contextvars.ContextVar[str | None] = contextvars.ContextVar("torch_tpu_pallas_platform",
                                                                      default=None)


def _jax():
    """Imports JAX for tracing; only its CPU backend may start (never a second TPU runtime)."""
    # JAX starts backends lazily; tracing needs none, but a default TPU backend would compete with
    # our own libtpu client for the chips.
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        import jax
    except ImportError as error:
        raise ImportError(f"torch.tpu.pallas needs JAX to trace kernels: {_EXTRA_HINT}") from error
    # JAX imported before this read JAX_PLATFORMS then: unless the user chose platforms, its
    # backends (not started yet) are the CPU one too. Otherwise the first JAX call would start
    # every backend it finds, libtpu's among them, which also ignores SIGPROF from then on
    # (torch_tpu/_signals.py). Once backends have started, the update changes nothing.
    if not jax.config.jax_platforms:
        jax.config.update("jax_platforms", "cpu")
    return jax


def target_platform() -> str:
    """The JAX platform kernels are traced for now: ``"tpu"`` when the tpu device is libtpu,
    ``"cuda"`` on the XLA CUDA plugin, ``"cpu"`` on the XLA CPU plugin, unless :func:`platform`
    says otherwise."""
    chosen = _PLATFORM.get()
    if chosen is not None:
        return chosen
    name = str(_C._runtime_info()["platform_name"]).lower()
    return name if name in ("tpu", "cuda", "rocm") else "cpu"


def interpret() -> bool:
    """Whether a Pallas kernel must run in interpret mode where it is traced now: pass it as
    ``pl.pallas_call(..., interpret=torch.tpu.pallas.interpret())`` so one kernel runs compiled
    (Mosaic) on TPU and interpreted on the CPU plugin."""
    return target_platform() == "cpu"


@contextlib.contextmanager
def platform(name: str) -> Iterator[None]:
    """Traces kernels for JAX platform ``name`` (``"tpu"``, ``"cpu"``...) inside the block, e.g. to
    lower a Pallas kernel to its Mosaic custom call for ahead-of-time compilation (:func:`lower`)."""
    token = _PLATFORM.set(name)
    try:
        yield
    finally:
        _PLATFORM.reset(token)


_FORCE_INTERPRET: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "torch_tpu_pallas_force_interpret", default=False)
_LOWERING_INSTALLED = False


def _install_interpreting_lowering() -> None:
    """Wraps JAX's lowering of Pallas calls so that, while torch_tpu traces for the CPU plugin,
    every kernel lowers through Pallas' HLO interpreter whatever ``interpret=`` it was built
    with. Kernels built for TPU ahead of the trace (Helion's ``pl.kernel``, Tokamax's) cannot be
    asked to interpret any other way. Outside torch_tpu's traces the wrapper changes nothing."""
    global _LOWERING_INSTALLED
    if _LOWERING_INSTALLED:
        return
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.pallas import pallas_call as jax_pallas_call

    original = jax_pallas_call._pallas_call_lowering

    def lowering(ctx, *in_nodes, interpret, **params):
        return original(ctx, *in_nodes, interpret=interpret or _FORCE_INTERPRET.get(), **params)

    # The registered rule serves pallas_call; pl.kernel's primitive calls the module attribute.
    jax_pallas_call._pallas_call_lowering = lowering
    jax_mlir.register_lowering(jax_pallas_call.pallas_call_p, lowering)
    _LOWERING_INSTALLED = True


@contextlib.contextmanager
def _interpreted_pallas(platform_name: str) -> Iterator[None]:
    """Traces every Pallas kernel in Pallas' HLO interpret mode when the target has no Pallas
    compiler (the XLA CPU plugin), so kernels written for TPU run unchanged. The interpreted
    kernel is plain StableHLO (loops, dynamic slices), unlike Pallas' TPU interpret mode, whose
    host callbacks need JAX's runtime."""
    if platform_name != "cpu":
        yield
        return
    with _TRACE_LOCK:
        _install_interpreting_lowering()
    token = _FORCE_INTERPRET.set(True)
    try:
        yield
    finally:
        _FORCE_INTERPRET.reset(token)


def _plugin_stablehlo_version() -> str | None:
    """The newest StableHLO version the PJRT plugin accepts, as "major.minor.patch"."""
    value = _C._runtime_info()["plugin_attributes"].get("stablehlo_current_version")
    numbers = re.findall(r"\d+", str(value)) if value is not None else []
    return ".".join(numbers[:3]) if len(numbers) >= 3 else None


def _version_tuple(version: str) -> tuple:
    return tuple(int(part) for part in version.split("."))


@dataclass
class _Traced:
    """One traced signature of a jax_op: the kernel key and how results come back."""
    key: str
    op: "_JaxOp"
    statics: tuple
    out_tree: Any
    out_specs: list  # (shape, torch dtype) per flat result


_TRACED: dict[str, _Traced] = {}
_TRACE_LOCK = threading.RLock()
_TRACE_SERIAL = itertools.count()


def _link(exported, name: str) -> tuple[str, str, str]:
    """Links a jax.export result into our programs: returns (digest of the module, entry symbol,
    text of its functions made private under symbols unique to this module), at a StableHLO
    version the plugin accepts."""
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib import _jax
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import hlo

    target = hlo.get_current_version()
    plugin = _plugin_stablehlo_version()
    if plugin is not None and _version_tuple(plugin) < _version_tuple(target):
        target = plugin
    with jax_mlir.make_ir_context():
        module = _jax.mlir.deserialize_portable_artifact(exported.mlir_module_serialized)
        try:
            # A round trip through the portable artifact at the plugin's version fails here when
            # the kernel needs StableHLO features the plugin does not know yet.
            artifact = _jax.mlir.serialize_portable_artifact(module, target, False)
        except Exception as error:
            raise RuntimeError(f"jax_op {name}: the traced module cannot be expressed in "
                               f"StableHLO {target} (the plugin's version): {error}") from error
        module = _jax.mlir.deserialize_portable_artifact(artifact)
        text = module.operation.get_asm(print_generic_op_form=True, enable_debug_info=False)
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        prefix = "jaxop_" + re.sub(r"[^A-Za-z0-9_]", "_", name)[:40] + "_" + digest + "_"
        functions = []
        for op in module.body.operations:
            if op.operation.name != "func.func":
                raise RuntimeError(f"jax_op {name}: the traced module holds a "
                                   f"{op.operation.name}; only functions can be linked")
            functions.append(op)
        for op in functions:
            old = ir.StringAttr(op.attributes["sym_name"]).value
            ir.SymbolTable.replace_all_symbol_uses(old, prefix + old, module.operation)
            op.attributes["sym_name"] = ir.StringAttr.get(prefix + old)
            op.attributes["sym_visibility"] = ir.StringAttr.get("private")
            # JAX's argument and result attributes (result names, layouts, shardings) describe
            # an entry computation; a private callee needs none of them.
            for attribute in ("arg_attrs", "res_attrs"):
                if attribute in op.attributes:
                    del op.attributes[attribute]
        text = "\n".join(op.operation.get_asm(print_generic_op_form=True, enable_debug_info=False)
                         for op in functions)
    return digest, prefix + "main", text


def _describe(tensors: list) -> str:
    return (f"shapes {[tuple(t.shape) for t in tensors]}, dtypes {[t.dtype for t in tensors]}, "
            f"devices {[str(t.device) for t in tensors]}")


class _JaxOp:
    """State of one jax_op: the forward function, its backward and the traced signatures."""

    def __init__(self, fn: Callable, name: str, backward: Callable | None):
        self.fn = fn
        self.name = name
        self.user_backward = backward
        self.signatures: dict[tuple, _Traced] = {}
        self._backward_ops: dict[int | None, _JaxOp] = {}

    def check_inputs(self, args: tuple) -> list:
        tensors = list(args)
        bad = [i for i, t in enumerate(tensors) if not isinstance(t, torch.Tensor)]
        if bad:
            raise TypeError(f"jax_op {self.name}: positional arguments must be tensors (pass "
                            f"other values as keyword arguments); argument {bad[0]} is a "
                            f"{type(tensors[bad[0]]).__name__}")
        if not tensors:
            raise ValueError(f"jax_op {self.name}: needs at least one tensor input")
        if any(t.device.type != "tpu" for t in tensors) or len({t.device for t in tensors}) > 1:
            raise RuntimeError(f"jax_op {self.name}: expected tensors on one tpu device, got "
                               f"{_describe(tensors)}")
        unsupported = [t.dtype for t in tensors if t.dtype not in _MLIR_ELEMENT]
        if unsupported:
            raise TypeError(f"jax_op {self.name}: dtype {unsupported[0]} is not supported "
                            f"({_describe(tensors)})")
        return tensors

    def trace(self, tensors: list, statics: tuple) -> _Traced:
        platform_name = target_platform()
        signature = (tuple((tuple(t.shape), t.dtype) for t in tensors), statics, platform_name)
        traced = self.signatures.get(signature)
        if traced is not None:
            return traced
        with _TRACE_LOCK:
            traced = self.signatures.get(signature)
            if traced is None:
                traced = self._trace(tensors, statics, platform_name)
                self.signatures[signature] = traced
        return traced

    def _trace(self, tensors: list, statics: tuple, platform_name: str) -> _Traced:
        jax = _jax()
        import jax.numpy as jnp

        kwargs = dict(statics)
        function = functools.partial(self.fn, **kwargs) if kwargs else self.fn
        # 64-bit types only when an input has one: under x64, Pallas index maps compute in i64,
        # which Mosaic does not compile.
        wide = any(t.dtype.itemsize == 8 for t in tensors)
        with jax.enable_x64(wide), _interpreted_pallas(platform_name):
            specs = [jax.ShapeDtypeStruct(tuple(t.shape), jnp.dtype(_jax_dtype(t.dtype)))
                     for t in tensors]
            try:
                exported = jax.export.export(jax.jit(function, keep_unused=True),
                                             platforms=[platform_name])(*specs)
            except Exception as error:
                raise RuntimeError(f"jax_op {self.name}: tracing for {platform_name} failed "
                                   f"({_describe(tensors)}): {error}") from error
        out_specs = []
        for aval in exported.out_avals:
            dtype = _torch_dtype(aval.dtype)
            if dtype is None:
                raise TypeError(f"jax_op {self.name}: result dtype {aval.dtype} has no tpu "
                                f"equivalent")
            out_specs.append((tuple(aval.shape), dtype))
        if not out_specs:
            raise ValueError(f"jax_op {self.name}: the function returns no arrays")
        digest, entry, text = _link(exported, self.name)
        # One key per traced signature: two ops (or keyword values) tracing to the same module
        # still keep their own backward and statics. Identical modules share the program text,
        # hence the compiled executable.
        key = f"{self.name}:{digest}:{next(_TRACE_SERIAL)}"
        _C._register_jax_kernel(
            key, entry, text,
            [(_MLIR_ELEMENT[t.dtype], list(t.shape)) for t in tensors],
            [(_MLIR_ELEMENT[dtype], list(shape)) for shape, dtype in out_specs])
        traced = _Traced(key, self, statics, exported.out_tree, out_specs)
        _TRACED[key] = traced
        return traced

    def call(self, args: tuple, kwargs: dict) -> Any:
        tensors = self.check_inputs(args)
        statics = tuple(sorted(kwargs.items()))
        traced = self.trace(tensors, statics)
        results = torch.ops.tpu_kernels.jax_call(traced.key, tensors)
        jax = _jax()
        return jax.tree_util.tree_unflatten(traced.out_tree, list(results))

    def backward_op(self, count: int) -> "_JaxOp":
        """The op computing gradients of ``count`` inputs from (inputs, cotangents)."""
        key = None if self.user_backward is not None else count
        if key not in self._backward_ops:
            function = self.user_backward or _default_backward(self.fn, count)
            self._backward_ops[key] = _JaxOp(function, self.name + "_backward", None)
        return self._backward_ops[key]


def _jax_dtype(dtype: torch.dtype) -> str:
    return "bool" if dtype == torch.bool else str(dtype).removeprefix("torch.")


def _torch_dtype(dtype: Any) -> torch.dtype | None:
    name = "bool" if str(dtype) == "bool" else str(dtype)
    candidate = getattr(torch, name, None)
    return candidate if isinstance(candidate, torch.dtype) and candidate in _MLIR_ELEMENT else None


def _default_backward(fn: Callable, count: int) -> Callable:
    """The vector-Jacobian product of ``fn`` (jax.vjp) as a JAX function of (``count`` inputs,
    cotangents...) returning one gradient per floating input (None for the others)."""

    def backward(*args, **kwargs):
        jax = _jax()
        import jax.numpy as jnp

        primals, cotangents = list(args[:count]), list(args[count:])
        differentiable = [i for i, p in enumerate(primals)
                          if jnp.issubdtype(p.dtype, jnp.floating)]

        def partial_fn(*values):
            full = list(primals)
            for i, value in zip(differentiable, values):
                full[i] = value
            return fn(*full, **kwargs)

        out, vjp = jax.vjp(partial_fn, *[primals[i] for i in differentiable])
        tree = jax.tree_util.tree_structure(out)
        grads = vjp(jax.tree_util.tree_unflatten(tree, cotangents))
        result: list = [None] * count
        for i, grad in zip(differentiable, grads):
            result[i] = grad
        return tuple(result)

    return backward


def jax_op(fn: Callable | None = None, *, name: str | None = None,
           backward: Callable | None = None) -> Callable:
    """Makes a JAX function of arrays (a Pallas kernel, a Tokamax op, any jax.numpy code) a
    PyTorch op on ``tpu`` tensors. Usable as ``jax_op(fn)`` or as a decorator.

    The op takes tensors positionally (one tpu device) and static values (Python numbers,
    strings, tuples: compiled into the kernel) as keyword arguments, and returns what ``fn``
    returns (arrays become tensors; tuples, lists and dicts keep their structure). Output
    shapes and dtypes come from JAX's abstract evaluation; the function is traced once per input
    signature and keyword values, for :func:`target_platform`.

    Args:
      fn: the JAX function.
      name: the op's name in errors and in program dumps (default: ``fn.__name__``).
      backward: a JAX function ``backward(*inputs, *cotangents, **kwargs)`` returning one
        gradient per input (``None`` for inputs without one), cotangents ordered like the flat
        results. Default: ``jax.vjp`` of ``fn`` for floating inputs.

    The op runs in every eager mode and inside ``torch.compile(backend="tpu")`` graphs (Dynamo
    puts it in the graph as it is). Raises ImportError naming the ``kernels`` extra without JAX.
    """
    if fn is None:
        return functools.partial(jax_op, name=name, backward=backward)
    _jax()
    state = _JaxOp(fn, name or getattr(fn, "__name__", "jax_fn"), backward)

    @functools.wraps(fn)
    def op(*args: torch.Tensor, **kwargs: Any) -> Any:
        return state.call(args, kwargs)

    op._jax_op = state  # type: ignore[attr-defined]
    # Dynamo writes the call into the graph instead of tracing JAX's Python; AOTAutograd then runs
    # it on fake tensors, which records tpu_kernels::jax_call with its autograd formula.
    torch._dynamo.allow_in_graph(op)
    return op


def lower(op: Callable, *args: torch.Tensor, target: str = "tpu", **kwargs: Any) -> str:
    """The StableHLO module (text) of one call of jax_op ``op`` traced for JAX platform ``target``,
    its @main calling the kernel: e.g. a Pallas kernel's Mosaic custom call, for
    ``torch_tpu.aot.compile_module``. ``args`` may be tpu tensors or meta tensors."""
    state: _JaxOp = op._jax_op  # type: ignore[attr-defined]
    tensors = list(args)
    with platform(target):
        traced = state.trace(tensors, tuple(sorted(kwargs.items())))
    return _C._jax_kernel_module(traced.key)


def _register_torch_kernels() -> None:
    """Fake (shape) and autograd kernels of tpu_kernels::jax_call, from the traced signature."""

    @torch.library.register_fake("tpu_kernels::jax_call")
    def _fake(kernel: str, inputs: list) -> list:
        traced = _TRACED[kernel]
        return [inputs[0].new_empty(shape, dtype=dtype) for shape, dtype in traced.out_specs]

    def setup_context(ctx, inputs, output):
        kernel, tensors = inputs
        ctx.kernel = kernel
        ctx.save_for_backward(*tensors)

    def backward(ctx, grads):
        traced = _TRACED[ctx.kernel]
        state = traced.op
        inputs = list(ctx.saved_tensors)
        cotangents = [torch.zeros(shape, dtype=dtype, device=inputs[0].device) if g is None else g
                      for g, (shape, dtype) in zip(grads, traced.out_specs)]
        result = state.backward_op(len(inputs)).call(tuple(inputs + cotangents), dict(traced.statics))
        grads_in = list(result) if isinstance(result, (tuple, list)) else [result]
        if len(grads_in) != len(inputs):
            raise RuntimeError(f"jax_op {state.name}: backward returned {len(grads_in)} "
                               f"gradients for {len(inputs)} inputs")
        return None, grads_in

    torch.library.register_autograd("tpu_kernels::jax_call", backward,
                                    setup_context=setup_context)


_register_torch_kernels()

"""``JaxCallable``: a jitted JAX function (a Helion Pallas kernel) called on tpu tensors through
torch.tpu.pallas' machinery: traced once per signature, linked into our programs by key."""

from __future__ import annotations

from typing import Any, Callable

import torch

from torch_tpu import pallas as _pallas


def jax_placeholder(tensor: torch.Tensor) -> Any:
    """The JAX placeholder (``jax.ShapeDtypeStruct``) of a tensor's shape and dtype."""
    jax = _pallas._jax()
    import jax.numpy as jnp

    return jax.ShapeDtypeStruct(tuple(tensor.shape), jnp.dtype(_pallas._jax_dtype(tensor.dtype)))


def _get_kernel_invocation_key(trace_key: str, args: tuple, kwargs: dict,
                               static_argnums: tuple) -> tuple:
    """What selects one traced signature of a JaxCallable: its trace key, the tensors' shapes
    and dtypes, and the static arguments' values."""
    static = set(static_argnums or ())
    parts = []
    for index, arg in enumerate(args):
        if index in static or not isinstance(arg, torch.Tensor):
            parts.append(("static", arg))
        else:
            parts.append((tuple(arg.shape), arg.dtype))
    return (trace_key, tuple(parts), tuple(sorted(kwargs.items())))


def get_default_pallas_mesh() -> Any:
    """Kernels over several devices (Helion's distributed kernels) are not supported yet."""
    raise NotImplementedError("torch_tpu: Pallas kernels over a device mesh are not supported yet")


class JaxCallable:
    """Calls ``jit_fn`` (a JAX function of arrays) on tpu tensors, positionally.

    ``input_output_aliases`` maps an input position to a result index: that result is also
    written into the input tensor (Helion's in-place outputs). After a call, ``output_shapes``
    and ``kernel_key_to_mlir_fingerprint`` describe each traced signature by its invocation key
    (``_get_kernel_invocation_key``), for ``tpu_torch_pallas.call_custom_kernel``.
    """

    def __init__(self, name: str, jit_fn: Callable, trace_key: str | None = None, mesh: Any = None,
                 input_partition_specs: Any = None,
                 input_output_aliases: dict[int, int] | None = None,
                 static_argnums: tuple = (), donate_argnums: tuple = ()):
        if mesh is not None:
            get_default_pallas_mesh()
        self.name = name
        self.jit_fn = jit_fn
        self.trace_key = trace_key or name
        self.mesh = mesh
        self.input_partition_specs = input_partition_specs
        self.input_output_aliases = dict(input_output_aliases or {})
        self.static_argnums = tuple(static_argnums)
        self.donate_argnums = tuple(donate_argnums)
        self.output_shapes: dict[tuple, tuple] = {}
        self.kernel_key_to_mlir_fingerprint: dict[tuple, str] = {}
        self._op = _pallas._JaxOp(jit_fn, name, None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.static_argnums:
            raise NotImplementedError(f"{self.name}: static positional arguments are not "
                                      f"supported; pass them as keyword arguments")
        tensors = self._op.check_inputs(args)
        statics = tuple(sorted(kwargs.items()))
        traced = self._op.trace(tensors, statics)
        results = list(torch.ops.tpu_kernels.jax_call(traced.key, tensors))
        for input_index, output_index in self.input_output_aliases.items():
            tensors[input_index].copy_(results[output_index])
        key = _get_kernel_invocation_key(self.trace_key, args, kwargs, self.static_argnums)
        self.output_shapes[key] = (list(traced.out_specs), traced.out_tree)
        self.kernel_key_to_mlir_fingerprint[key] = traced.key
        return traced.out_tree.unflatten(results)

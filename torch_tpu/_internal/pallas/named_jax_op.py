"""``jax_op(name, fn)``: the form of torch.tpu.pallas.jax_op that code written for earlier
TorchTPU releases imports from ``torch_tpu._internal.pallas`` (model kernels, Helion's launcher).

The op is named ``"namespace::op"``, takes tensors positionally (non-tensor positional arguments
are static: compiled into the kernel, like keyword arguments) and returns what ``fn`` returns.
It runs through torch.tpu.pallas' machinery: one implementation, this is only the call form.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch

from torch_tpu import pallas as _pallas
from torch_tpu._internal.pallas.pallas import get_default_pallas_mesh

_STATICS = "_torch_tpu_positional_statics"


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or name.count("::") != 1 or "" in name.split("::"):
        raise ValueError(f"jax_op: the name must be 'namespace::op_name' with one '::', got "
                         f"{name!r} (torch.tpu.pallas.jax_op(fn) takes a function alone)")


def _with_positional_statics(fn: Callable) -> Callable:
    """``fn`` called with its static positional arguments put back between the tensors."""

    @functools.wraps(fn)
    def call(*tensors: Any, **kwargs: Any) -> Any:
        arguments = list(tensors)
        for index, value in kwargs.pop(_STATICS, ()):
            arguments.insert(index, value)
        return fn(*arguments, **kwargs)

    return call


class NamedJaxOp:
    """A named JAX op on tpu tensors (what ``jax_op(name, fn)`` returns)."""

    def __init__(self, name: str, fn: Callable, donate_argnums: tuple):
        self.name = name
        self.donate_argnums = donate_argnums
        self._op = _pallas.jax_op(_with_positional_statics(fn), name=name)
        self._fake: Callable | None = None
        functools.update_wrapper(self, fn)

    def register_fake(self, fake: Callable) -> Callable:
        """Accepted for compatibility: result shapes and dtypes come from tracing ``fn`` with
        JAX, under torch.compile too, so ``fake`` is kept but not needed."""
        self._fake = fake
        return fake

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        tensors = [arg for arg in args if isinstance(arg, torch.Tensor)]
        statics = tuple((i, arg) for i, arg in enumerate(args)
                        if not isinstance(arg, torch.Tensor))
        if statics:
            kwargs = {**kwargs, _STATICS: statics}
        return self._op(*tensors, **kwargs)

    def __repr__(self) -> str:
        return f"jax_op({self.name!r})"


def jax_op(name: str, fn: Callable | None = None, /, *, mesh: Any = None,
           input_partition_specs: Any = None, donate_argnums: Any = None) -> Any:
    """Makes ``fn`` (a JAX function of arrays) an op named ``name`` (``"namespace::op"``) on tpu
    tensors; without ``fn``, a decorator. ``donate_argnums`` is accepted: donated inputs stay
    valid (results never alias them). Ops over a device ``mesh`` are not supported yet."""
    _check_name(name)
    if mesh is not None or input_partition_specs is not None:
        get_default_pallas_mesh()
    donated = tuple(donate_argnums or ())
    if not all(isinstance(i, int) for i in donated):
        raise TypeError(f"jax_op {name}: donate_argnums must be argument positions, got "
                        f"{donate_argnums!r}")
    if fn is None:
        return lambda function: NamedJaxOp(name, function, donated)
    return NamedJaxOp(name, fn, donated)

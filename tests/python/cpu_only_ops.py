"""Test operators that have a CPU kernel and no tpu lowering, so tpu tensors reach them only
through the CPU fallback.

Tests of the fallback use these instead of an ATen op that happens to be unlowered today:
lowering more ATen ops must not change what those tests exercise. Each test file defines its
own op (the fallback warns once per op and process), with the three overloads ATen ops have:
functional, in-place and out=. They compute `self + 2 * other` with `torch.add`, so on CPU they
check overlapping writes exactly as a TensorIterator op does.
"""

import torch

_LIBRARY = torch.library.Library("tpu_test", "DEF")
_DEFINED: dict[str, object] = {}


def define_cpu_only_op(name: str):
    """Define `tpu_test::{name}` (and `{name}_`, `{name}.out`) with only a CPU kernel; returns the
    op packet (`torch.ops.tpu_test.{name}`). Defining the same name again returns the same op."""
    if name in _DEFINED:
        return _DEFINED[name]
    _LIBRARY.define(f"{name}(Tensor self, Tensor other) -> Tensor")
    _LIBRARY.define(f"{name}.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)")
    _LIBRARY.define(f"{name}_(Tensor(a!) self, Tensor other) -> Tensor(a!)")

    def functional(self, other):
        return torch.add(self, other, alpha=2)

    def out_variant(self, other, *, out):
        return torch.add(self, other, alpha=2, out=out)

    def in_place(self, other):
        return torch.add(self, other, alpha=2, out=self)

    _LIBRARY.impl(name, functional, "CPU")
    _LIBRARY.impl(f"{name}.out", out_variant, "CPU")
    _LIBRARY.impl(f"{name}_", in_place, "CPU")
    # torch.compile traces with fake tensors: the functional overload's shape rule.
    torch.library.register_fake(f"tpu_test::{name}", lib=_LIBRARY)(
        lambda self, other: torch.empty_like(torch.broadcast_tensors(self, other)[0]))
    _DEFINED[name] = getattr(torch.ops.tpu_test, name)
    return _DEFINED[name]

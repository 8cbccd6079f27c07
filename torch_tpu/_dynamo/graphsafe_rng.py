"""Random ops in compiled graphs draw from the tpu generator exactly as eager ops do.

A compiled program never holds RNG state: each random node takes a (seed, offset) from its
generator as a runtime argument on every run, in graph order (exec/graph_program.cc), so the same
program gives fresh bits each call, equal to what the same ops give eagerly after the same seed,
and the generator's offset advances as eagerly.

This module adds what the FX translation (torch_tpu._dynamo) needs for that:

- decompositions of the random factories (``rand``, ``randn``, ``randint``, their ``_like``
  forms) into ``empty`` + ``uniform_``/``normal_``/``random_``: exactly what ATen runs for them
  eagerly, so each is one draw through the same lowering;
- graph-safe RNG (PyTorch's functionalization of random ops that activation checkpointing
  recomputes in the backward, torch/_functorch/partitioners.py): "tpu" is registered as a
  graph-safe RNG device, whose generators can share state (``graphsafe_get_state`` /
  ``graphsafe_set_state``, runtime/generator.h). The forward and backward graphs then take
  generator inputs, and their ``graphsafe_run_with_rng_state`` nodes draw from those.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["register", "decompositions", "is_graphsafe_node", "translate_graphsafe_node"]


def register() -> None:
    """Registers "tpu" for PyTorch's graph-safe RNG functionalization (as CUDA is by default)."""
    from torch._functorch._aot_autograd import utils

    if "tpu" not in utils._GRAPHSAFE_RNG_DEVICE_TYPES:
        utils.register_graphsafe_rng_device_type("tpu")


def _empty(size: Any, dtype=None, layout=None, device=None, pin_memory=None) -> torch.Tensor:
    return torch.empty(size, dtype=dtype, layout=layout, device=device, pin_memory=pin_memory)


def _empty_like(self: torch.Tensor, dtype=None, layout=None, device=None, pin_memory=None,
                memory_format=None) -> torch.Tensor:
    return torch.empty_like(self, dtype=dtype, layout=layout, device=device,
                            pin_memory=pin_memory, memory_format=memory_format)


# Decompositions run below AOTAutograd's functionalization: they use the functional forms of
# the in-place ops ATen's kernels call (uniform_ -> uniform, normal_ -> normal_functional,
# random_ -> random.from).
def _uniform(self, generator=None):
    return torch.ops.aten.uniform.default(self, 0.0, 1.0, generator=generator)


def _normal(self, generator=None):
    return torch.ops.aten.normal_functional.default(self, 0.0, 1.0, generator=generator)


def _random(self, low, high, generator=None):
    return getattr(torch.ops.aten.random, "from")(self, low, high, generator=generator)


def _long(options: dict) -> dict:
    """randint's dtype defaults to int64 in its schema (the call may leave it out)."""
    return {"dtype": torch.int64, **options}


def decompositions() -> dict:
    """Random factories as ATen's own composite kernels write them (at::native::rand and
    friends in TensorFactories.cpp): one draw each, through the lowering eager uses."""
    aten = torch.ops.aten
    return {
        aten.rand.default: lambda size, **o: _uniform(_empty(size, **o)),
        aten.rand.generator: lambda size, generator, **o: _uniform(_empty(size, **o), generator),
        aten.randn.default: lambda size, **o: _normal(_empty(size, **o)),
        aten.randn.generator: lambda size, generator, **o: _normal(_empty(size, **o), generator),
        aten.randint.default: lambda high, size, **o: _random(_empty(size, **_long(o)), 0,
                                                              high),
        aten.randint.generator: lambda high, size, generator, **o: _random(
            _empty(size, **_long(o)), 0, high, generator),
        aten.randint.low: lambda low, high, size, **o: _random(_empty(size, **_long(o)), low,
                                                               high),
        aten.randint.low_generator: lambda low, high, size, generator, **o: _random(
            _empty(size, **_long(o)), low, high, generator),
        aten.rand_like.default: lambda self, **o: _uniform(_empty_like(self, **o)),
        aten.randn_like.default: lambda self, **o: _normal(_empty_like(self, **o)),
        aten.randint_like.default: lambda self, high, **o: _random(_empty_like(self, **o), 0,
                                                                   high),
        aten.randint_like.low_dtype: lambda self, low, high, **o: _random(
            _empty_like(self, **o), low, high),
    }


def is_graphsafe_node(node: torch.fx.Node) -> bool:
    from torch._prims.rng_prims import graphsafe_run_with_rng_state

    return node.op == "call_function" and node.target is graphsafe_run_with_rng_state


def translate_graphsafe_node(translation: Any, node: torch.fx.Node) -> None:
    """``graphsafe_run_with_rng_state(op, *args, rng_state=generator, **kwargs)``: `op` lowered
    as any node, every draw of it from the generator input `rng_state`."""
    source = node.kwargs.get("rng_state")
    ref = translation.refs.get(source) if isinstance(source, torch.fx.Node) else None
    if ref is None or ref[0] != "generator":
        from torch_tpu._dynamo.translation import _Unsupported

        raise _Unsupported(f"{node.name} without a generator input for its RNG state")
    target, args, kwargs = node.target, node.args, node.kwargs
    first = len(translation.nodes)
    # The wrapped op's node as _call sees any node: the same meta, its own target and arguments.
    node.target, node.args = args[0], tuple(args[1:])
    node.kwargs = {k: v for k, v in kwargs.items() if k != "rng_state"}
    try:
        translation._call(node)
    finally:
        node.target, node.args, node.kwargs = target, args, kwargs
    for index in range(first, len(translation.nodes)):
        translation.nodes[index] = (*translation.nodes[index][:4], ref[1])

"""``torch.compile(model)`` with no backend argument on tpu tensors.

Tutorials and libraries call ``torch.compile(model)`` and get Inductor, which has no tpu code
generator. PyTorch resolves a missing ``backend`` argument through
``torch.compiler.get_default_backend()``; torch_tpu sets that default (when Dynamo loads, and only
while it is still PyTorch's own ``"inductor"``) to the ``"tpu_or_inductor"`` backend here, which
looks at each graph Dynamo captures:

- a graph with a tpu tensor (an input, a parameter, a tensor it creates) goes to the ``"tpu"``
  backend: the same programs and results as ``torch.compile(model, backend="tpu")``;
- any other graph (CPU, CUDA) goes to Inductor with the ``mode=``/``options=`` of the call, as
  ``torch.compile(model)`` would have compiled it without torch_tpu.

An explicit ``torch.compile(model, backend="inductor")`` never comes here (PyTorch builds its
Inductor wrapper for the name directly), so on tpu tensors it keeps failing with the error that
names the backends that can compile them. Opting out of the routing:
``torch.compiler.set_default_backend("inductor")``.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import torch

NAME = "tpu_or_inductor"


def _is_tpu(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == "tpu"


def holds_tpu_tensors(gm: torch.fx.GraphModule, example_inputs: list) -> bool:
    """Whether the graph computes on tpu: a tpu input, or a tpu value anywhere in it (a graph
    that only creates tensors on tpu has no tensor inputs)."""
    if any(_is_tpu(value) for value in example_inputs):
        return True
    for node in gm.graph.nodes:
        value = node.meta.get("example_value", node.meta.get("val"))
        values = value if isinstance(value, (list, tuple)) else [value]
        if any(_is_tpu(v) for v in values):
            return True
    return False


def tpu_or_inductor(gm: torch.fx.GraphModule, example_inputs: list, **kwargs: Any) -> Callable:
    """The default backend while torch_tpu is loaded: tpu graphs to "tpu", the rest to Inductor."""
    if holds_tpu_tensors(gm, example_inputs):
        from torch_tpu._dynamo.backend import tpu_backend

        return tpu_backend(gm, example_inputs, **kwargs)
    inductor = torch._TorchCompileInductorWrapper(kwargs.get("mode"), kwargs.get("options"),
                                                  None)
    return inductor(gm, example_inputs)


def _reset() -> None:
    """``torch._dynamo.reset()`` resets the backend: what Inductor's own wrapper resets (its CUDA
    graph trees, when a graph used them; loading Inductor only to find none would be slow)."""
    if "torch._inductor.cudagraph_trees" in sys.modules:
        sys.modules["torch._inductor.cudagraph_trees"].reset_cudagraph_trees()


tpu_or_inductor.reset = _reset


def install() -> None:
    """Registers the backend and makes it the default, unless a default was already chosen."""
    from torch._dynamo.backends.registry import (get_default_backend, register_backend,
                                                 set_default_backend)

    register_backend(name=NAME, compiler_fn=tpu_or_inductor)
    if get_default_backend() == "inductor":
        set_default_backend(NAME)

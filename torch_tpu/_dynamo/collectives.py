"""Graphs holding functional collectives: cut at them, the pieces between compiled."""

from __future__ import annotations

from typing import Callable

import torch
import torch.fx

from torch_tpu._dynamo.graph_call import _compile_graph


def _is_collective(node: torch.fx.Node) -> bool:
    """A functional collective (``_c10d_functional.all_gather_into_tensor``, ``wait_tensor``...)."""
    return (node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
            and node.target.namespace == "_c10d_functional")


def _collective_partitions(gm: torch.fx.GraphModule) -> dict:
    """Node -> partition: computation that needs the results of k rounds of collectives goes to
    partition 2k, the collectives it feeds (with their waits) to 2k + 1. Collectives that only
    need the inputs (SimpleFSDP's parameter all-gathers) thus share one round, issued together
    before the computation that waits for them."""
    rounds: dict = {}
    partitions: dict = {}
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            rounds[node] = 0
            continue
        collective = _is_collective(node)
        rounds[node] = max((rounds[source] + (_is_collective(source) and not collective)
                            for source in node.all_input_nodes), default=0)
        partitions[node] = 2 * rounds[node] + collective
    return partitions


def _compile_with_collectives(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """A graph holding functional collectives (SimpleFSDP, DTensor redistributions) is cut at
    them: the computation between collectives compiles to native programs, and the collectives
    run between those programs on the group's backend (tpu_dist), as eager calls of the same ops
    would. PJRT's CPU plugin has no cross-process collectives, so they cannot be inside a
    program there."""
    from torch._functorch.aot_autograd import make_boxed_func
    from torch.fx.passes.split_module import split_module

    partitions = _collective_partitions(gm)
    split = split_module(gm, gm, lambda node: partitions[node], tuple_return=True)
    for name, module in list(split.named_children()):
        if any(_is_collective(node) for node in module.graph.nodes):
            continue
        program = _compile_graph(module, example_inputs)

        def call(*args, program=program):
            return tuple(program(list(args)))

        delattr(split, name)
        setattr(split, name, call)
    return make_boxed_func(split.forward)

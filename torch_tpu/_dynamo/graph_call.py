"""A translated graph as a callable AOTAutograd runs: the native program bound to the call's
inputs, host-side nodes, generators, outputs returned as the views they are in the graph."""

from __future__ import annotations

import os
from typing import Callable

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor

from torch_tpu import _C
from torch_tpu._dynamo.messages import _runs_eagerly
from torch_tpu._dynamo.translation import _GraphTranslation, _meta, _Unsupported

_graph_count = 0


def _output_aliases(translation: "_GraphTranslation") -> dict:
    """Graph outputs that are views of an earlier output or of an input (their fake values share
    its storage): output index -> (True for an input, its index, base meta, view meta). The
    program returns each output in a buffer of its own; these must be returned as views of their
    base again, or a write through one after the graph (a graph break, the caller) would not
    reach the other, as it does eagerly."""
    from torch.multiprocessing.reductions import StorageWeakRef

    def fake(node):
        val = node.meta.get("val") if node is not None else None
        return val if isinstance(val, torch.Tensor) else None

    bases: dict = {}
    for index, node in enumerate(translation.placeholders):
        if (val := fake(node)) is not None:
            bases.setdefault(StorageWeakRef(val.untyped_storage()), (True, index, val))
    aliases = {}
    for index, (node, ref) in enumerate(zip(translation.output_nodes, translation.outputs)):
        val = fake(node)
        if val is None or ref is None or not ref[1]:
            continue  # no tensor, or the input itself
        storage = StorageWeakRef(val.untyped_storage())
        if storage in bases:
            is_input, base_index, base = bases[storage]
            if base.dtype == val.dtype:
                aliases[index] = (is_input, base_index, _meta(base), _meta(val))
        else:
            bases[storage] = (False, index, val)
    return aliases


def _as_view_of_base(base: torch.Tensor, base_meta: tuple, view_meta: tuple,
                     result: torch.Tensor) -> torch.Tensor:
    """`result` as the view of `base` it is in the graph, when `base` has its traced layout."""
    sizes, strides, offset, _ = base_meta
    if list(base.shape) != sizes or list(base.stride()) != strides or \
            base.storage_offset() != offset:
        return result
    view_sizes, view_strides, view_offset, _ = view_meta
    # The traced storage may be larger than the one this base has (an input AOTAutograd passes
    # in place of its views): then the graph's own result stands.
    last = view_offset + sum((n - 1) * st for n, st in zip(view_sizes, view_strides) if n > 0)
    if 0 in view_sizes or (last + 1) * base.element_size() > base.untyped_storage().nbytes():
        return result
    return base.as_strided(view_sizes, view_strides, view_offset)


def _is_dense(sizes: list, strides: list) -> bool:
    """Whether `strides` lay `sizes` out densely in some dim order (what the native program gives
    a new output whose traced layout is dense; exec/program_builder.h DenseStridesLike)."""
    order = sorted(range(len(sizes)), key=lambda d: (-strides[d], -sizes[d]))
    expected = 1
    for dim in reversed(order):
        if sizes[dim] != 1 and strides[dim] != expected:
            return False
        expected *= max(sizes[dim], 1)
    return True


def _views_of_outputs(output_aliases: dict) -> set:
    """Outputs the program need not compute: views of an earlier output whose traced layout the
    program reproduces (dense, from offset 0). They are made as views of it after the run, so a
    forward's saved activations that are reshapes or transposes of one another (q and k of one
    projection) take one buffer between forward and backward, as they do eagerly."""
    derived = set()
    for index, (is_input, _, base_meta, view_meta) in output_aliases.items():
        sizes, strides, offset, _ = base_meta
        view_sizes, view_strides, view_offset, _ = view_meta
        if is_input or offset != 0 or not _is_dense(sizes, strides) or 0 in view_sizes:
            continue
        numel = 1
        for size in sizes:
            numel *= size
        last = view_offset + sum((n - 1) * st for n, st in zip(view_sizes, view_strides))
        if last < numel:
            derived.add(index)
    return derived


def _compile_graph(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """The fw/bw compiler: one native program per graph, or eager when it cannot be lowered."""
    from torch._functorch.aot_autograd import make_boxed_func

    global _graph_count
    _graph_count += 1
    description = f"compiled graph {_graph_count}"
    dump_dir = os.environ.get("TORCH_TPU_DUMP_DIR")
    if dump_dir:
        os.makedirs(dump_dir, exist_ok=True)
        with open(os.path.join(dump_dir, f"compiled_graph_{_graph_count}.fx.py"), "w") as file:
            file.write(f"# {description}: the FX graph behind this graph's StableHLO module\n")
            file.write(gm.code)
    try:
        translation = _GraphTranslation(gm)
        output_aliases = _output_aliases(translation)
        derived = _views_of_outputs(output_aliases)
        program = _C._GraphProgram(translation.nodes, translation.input_metas,
                                   [ref for index, ref in enumerate(translation.outputs)
                                    if ref and ref[1] and index not in derived] +
                                   [ref for _, ref in translation.host_writebacks
                                    if ref[0] != "host"],
                                   description)
    except _Unsupported as reason:
        _runs_eagerly(f"it holds {reason}")
        return make_boxed_func(gm.forward)
    outputs = translation.outputs
    host_writebacks = translation.host_writebacks
    state = {"eager": False}

    placeholder_index = {node: i for i, node in enumerate(translation.placeholders)}
    host_nodes, host_inputs = translation.host_nodes, translation.host_inputs
    constants = translation.constants
    on_device: dict = {}  # constants other than 0-d host ones, moved to the inputs' device once
    transfers = translation.transfers
    # Bound where the program takes a CPU input it never reads (translation's
    # unread_host_inputs): a 0-d host value is the only host tensor a program input may be.
    # Made at the first call: here, under AOTAutograd's fake mode, it would be a fake tensor.
    stand_in: list = []

    def device_value(node, value):
        if node in transfers:
            # A CPU graph input the graph moves to tpu: this call's values, in one upload (the
            # host lays them out contiguously; a strided tpu destination would take a staged
            # upload and a device copy).
            return value.to(transfers[node][0], memory_format=torch.contiguous_format)
        if value.device.type == "tpu" or (value.device.type == "cpu" and value.dim() == 0):
            return value
        if node not in on_device:
            device = next((a.device for a in args_seen if isinstance(a, torch.Tensor) and
                           a.device.type == "tpu"), torch.device("tpu"))
            on_device[node] = value.to(device)
        return on_device[node]

    args_seen: list = []

    def run(args: list) -> list:
        # Fake tensors (a FakeTensorMode tracing through a compiled function) have no device
        # buffers: the graph propagates them as its FX code does, as eager ops would.
        if not state["eager"] and not any(isinstance(arg, FakeTensor) for arg in args):
            host = dict(constants)
            args_seen[:] = args

            def value_of(node):
                return host[node] if node in host else args[placeholder_index[node]]

            for node in host_nodes:
                host[node] = node.target(*torch.fx.node.map_arg(node.args, value_of),
                                         **torch.fx.node.map_arg(node.kwargs, value_of))
            inputs = args[:len(placeholder_index)] + [device_value(node, value_of(node))
                                                      for node in host_inputs]
            program_inputs = list(inputs)
            for index in translation.unread_host_inputs:
                if not stand_in:
                    stand_in.append(torch.zeros(()))
                program_inputs[index] = stand_in[0]
            generators = [args[source] if kind == "input" else source
                          for kind, source in translation.generators]
            args_seen.clear()
            try:
                results = iter(program.run(program_inputs, generators))
            except NotImplementedError as reason:
                _runs_eagerly(str(reason).splitlines()[0])
                state["eager"] = True
            else:
                # Outputs that are graph inputs (or were written into one) are the inputs.
                returned = []
                for index, ref in enumerate(outputs):
                    if ref is None or index in derived:
                        returned.append(None)
                    elif not ref[1]:
                        returned.append(inputs[ref[2]])
                    else:
                        returned.append(next(results))
                for index, (is_input, base, base_meta, view_meta) in output_aliases.items():
                    returned[index] = _as_view_of_base(inputs[base] if is_input else
                                                       returned[base], base_meta, view_meta,
                                                       returned[index])
                    assert returned[index] is not None, \
                        f"{description}: output {index} is a view its base cannot give"
                for index, ref in host_writebacks:
                    args[index].copy_(value_of(ref[1]) if ref[0] == "host" else next(results))
                args.clear()
                return returned
        results = gm(*args)
        args.clear()
        return results

    run._boxed_call = True
    run._tpu_program = program
    return run


def _copy_outputs_of_inputs(gm: torch.fx.GraphModule) -> None:
    """copy_ results are their target input: outputs naming a copy_ node name the input."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is torch.ops.aten.copy_.default:
            node.replace_all_uses_with(node.args[0], lambda user: user.op == "output")
    gm.recompile()

"""``torch.compile(model, backend="tpu")``: whole FX graphs lowered to one XLA program each.

Dynamo captures the graph, AOTAutograd splits it into functionalized forward and backward graphs
(decomposing only ops that have no tpu lowering), and each graph becomes one native
``_GraphProgram``: every node goes through the same lowering registry as eager execution, views
read through the same strided-view lowering, and in-place updates of graph inputs (BatchNorm
running statistics, optimizer state) are written back into the inputs' storages with donation.
The program is compiled once per input signature (shapes, dtypes, strides) and runs
asynchronously like eager ops.

A graph that holds something this path cannot lower runs eagerly (op by op on tpu) after one
warning that names what is missing; results never differ.
"""

from __future__ import annotations

import operator
import os
import warnings
from typing import Any, Callable

import torch
import torch.fx
from torch._dynamo.backends.registry import register_backend
from torch._dynamo.device_interface import DeviceInterface, register_interface_for_device

from torch_tpu import _C, _compile_batch_norm
from torch_tpu import _graphsafe_rng

__all__ = ["tpu_backend"]

# Node kinds understood by the native graph program (exec/graph_program.h).
_LOWERED, _VIEW, _CONVERT, _COPY_INTO, _ZEROS = 0, 1, 2, 3, 4

_warned: set[str] = set()
_graph_count = 0


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, stacklevel=3)


def _runs_eagerly(reason: str) -> None:
    """A graph runs eagerly (op by op) instead of as one program: counted per graph in
    ``torch_tpu.metrics()["compiled_graphs_eager"]`` (reason -> graphs) and warned once per
    reason."""
    _C._record_reason("compiled_graphs_eager", reason)
    _warn_once(f'torch.compile(backend="tpu"): a graph runs eagerly on tpu because {reason}')


def _overload_name(op: torch._ops.OpOverload) -> str:
    schema = op._schema
    return schema.name + ("." + schema.overload_name if schema.overload_name else "")


def _has_lowering(op: Any) -> bool:
    return isinstance(op, torch._ops.OpOverload) and _C._has_lowering(_overload_name(op))


def _decompositions() -> dict:
    """PyTorch's decompositions (core ATen first), only for ops the tpu registry does not lower:
    an op with a lowering stays one node, lowered exactly as eager lowers it."""
    from torch._decomp import core_aten_decompositions, decomposition_table

    # Reference implementations (torch._refs) write through prims.copy_to, which AOTAutograd
    # rejects in a functional graph: only decompositions proper are taken from the full table.
    table = {op: fn for op, fn in decomposition_table.items()
             if not getattr(fn, "__module__", "").startswith("torch._refs")}
    table.update(core_aten_decompositions())
    table[torch.ops.aten.constant_pad_nd.default] = _constant_pad_nd
    table.update(_compile_batch_norm.decompositions())
    table.update(_graphsafe_rng.decompositions())
    return {op: fn for op, fn in table.items()
            if isinstance(op, torch._ops.OpOverload) and not _has_lowering(op) and
            not op.is_view and not op._schema.is_mutable and op not in _handled_in_graph() and
            _overload_name(op) not in _DEVICE_OVERRIDES and
            _overload_name(op) not in _compile_batch_norm.LOWERED}


def _constant_pad_nd(x: torch.Tensor, pad: list, value: float = 0) -> torch.Tensor:
    """Padding as concatenation with filled blocks (negative pads narrow): ops the registry
    lowers, where PyTorch's own decomposition writes into a slice of a new tensor."""
    aten = torch.ops.aten
    for i in range(len(pad) // 2):
        dim = x.dim() - 1 - i
        left, right = pad[2 * i], pad[2 * i + 1]
        if left < 0:
            x = aten.slice.Tensor(x, dim, -left, x.shape[dim])
        if right < 0:
            x = aten.slice.Tensor(x, dim, 0, x.shape[dim] + right)
        parts = []
        for amount in (left, None, right):
            if amount is None:
                parts.append(x)
            elif amount > 0:
                shape = list(x.shape)
                shape[dim] = amount
                parts.append(aten.full.default(shape, value, dtype=x.dtype, device=x.device))
        if len(parts) > 1:
            x = aten.cat.default(parts, dim)
    return aten.clone.default(x)


def _handled_in_graph() -> set:
    """Ops the graph program handles itself (factories, conversions, write-backs)."""
    aten = torch.ops.aten
    return {aten.copy_.default, aten.copy.default, aten._to_copy.default, aten.full.default,
            aten.full_like.default, aten.new_full.default, aten.ones.default,
            aten.ones_like.default, aten.new_ones.default, aten.scalar_tensor.default,
            aten.empty.memory_format, aten.empty_strided.default, aten.zeros.default,
            aten.zeros_like.default, aten.empty_like.default, aten.new_empty.default,
            aten.new_zeros.default, aten.new_empty_strided.default, aten.arange.default,
            aten.arange.start, aten.arange.start_step}


# ATen op -> (the op ATen dispatches it to on a custom device, argument positions it drops).
_DEVICE_OVERRIDES = {
    "aten::convolution": ("aten::convolution_overrideable", ()),
    "aten::convolution_backward": ("aten::convolution_backward_overrideable", (3,)),  # bias_sizes
}


class _Unsupported(Exception):
    pass


def _meta(value: Any) -> tuple:
    if not isinstance(value, torch.Tensor):
        raise _Unsupported(f"a non-tensor value {type(value).__name__}")
    for size in list(value.shape) + list(value.stride()):
        if not isinstance(size, int):
            raise _Unsupported("symbolic (dynamic) shapes")
    if not isinstance(value.storage_offset(), int):
        raise _Unsupported("symbolic (dynamic) shapes")
    return (list(value.shape), list(value.stride()), value.storage_offset(), value.dtype)


class _GraphTranslation:
    """FX graph -> the native node list: references to inputs/node results, plain values."""

    def __init__(self, gm: torch.fx.GraphModule):
        self.nodes: list[tuple] = []
        self.input_metas: list[tuple] = []
        self.refs: dict[torch.fx.Node, tuple] = {}
        self.outputs: list[tuple | None] = []  # per graph output: a ref, or None
        self.output_nodes: list[torch.fx.Node | None] = []  # the node behind each output
        self.host_writebacks: list[tuple] = []  # (cpu input index, ref of its new value)
        # Ops on host tensors (an optimizer's CPU step counts) run on the host, as PyTorch runs
        # them; 0-d results the device program uses become runtime scalar inputs after the
        # placeholders.
        self.placeholders: list[torch.fx.Node] = []
        self.host_nodes: list[torch.fx.Node] = []
        self.host_inputs: list[torch.fx.Node] = []
        self.constants: dict[torch.fx.Node, torch.Tensor] = {}  # get_attr tensors
        # Host nodes computed from constants only (`lift_fresh_copy` of a literal): the same value
        # every call, so they move to the device once, as constants do.
        self.constant_results: set[torch.fx.Node] = set()
        # Generators random nodes draw from: graph inputs (graph-safe RNG states, after the tensor
        # inputs) as ("input", argument position), or constants as ("constant", generator).
        self.generators: list[tuple] = []
        placeholder_count = generator_inputs = 0
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                val = node.meta.get("val")
                if isinstance(val, torch.Generator):
                    self.refs[node] = ("generator", len(self.generators))
                    self.generators.append(("input", placeholder_count + generator_inputs))
                    generator_inputs += 1
                    continue
                if generator_inputs:
                    raise _Unsupported(f"input {node.name} after a generator input")
                if not isinstance(val, torch.Tensor):
                    raise _Unsupported(f"input {node.name} of type {type(val).__name__} "
                                       "(dynamic shapes)")
                self.input_metas.append(_meta(val))
                self.placeholders.append(node)
                self.refs[node] = ("ref", False, placeholder_count, 0)
                placeholder_count += 1
            elif node.op == "get_attr":
                value = gm
                for part in node.target.split("."):
                    value = getattr(value, part)
                if isinstance(value, torch.Generator):  # drawn from on every call
                    self.refs[node] = ("generator", len(self.generators))
                    self.generators.append(("constant", value))
                    continue
                if not isinstance(value, torch.Tensor):
                    raise _Unsupported(f"constant {node.target} of type {type(value).__name__}")
                node.meta.setdefault("val", value)
                self.constants[node] = value
                self.refs[node] = ("host", node)
            elif node.op == "call_function":
                self._call(node)
            elif node.op == "output":
                for value in torch.fx.node.map_arg(node.args[0], lambda n: n) or ():
                    self.output_nodes.append(value if isinstance(value, torch.fx.Node) else None)
                    if value is None:
                        self.outputs.append(None)
                    elif isinstance(value, torch.fx.Node):
                        self.outputs.append(self._ref(value))
                    else:
                        raise _Unsupported(f"a graph output of type {type(value).__name__}")
            else:
                raise _Unsupported(f"FX node {node.op} {node.target}")

    def _ref(self, node: torch.fx.Node) -> tuple:
        if node not in self.refs:
            raise _Unsupported(f"a value of {node.name} used as a tensor")
        ref = self.refs[node]
        if ref[0] != "host":
            return ref
        # A host value used by the program: a runtime scalar input, or a constant's value.
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or (val.dim() != 0 and node not in self.constants
                                                 and node not in self.constant_results):
            raise _Unsupported(f"a host tensor {node.name} used by tpu ops")
        self.input_metas.append(_meta(val))
        self.host_inputs.append(node)
        self.refs[node] = ("ref", False, len(self.input_metas) - 1, 0)
        return self.refs[node]

    def _is_host(self, node: torch.fx.Node) -> bool:
        """An op whose results are CPU tensors computed only from host values."""
        vals = node.meta.get("val")
        vals = vals if isinstance(vals, (list, tuple)) else [vals]
        if not vals or not all(isinstance(v, torch.Tensor) and v.device.type == "cpu"
                               for v in vals):
            return False
        sources = []
        torch.fx.node.map_arg((node.args, node.kwargs), sources.append)
        return all(self._host_value(source) for source in sources)

    def _host_value(self, node: torch.fx.Node) -> bool:
        if node.op == "placeholder":
            val = node.meta.get("val")
            return isinstance(val, torch.Tensor) and val.device.type == "cpu"
        return self.refs.get(node, ("",))[0] == "host"

    def _encode(self, value: Any) -> tuple:
        if isinstance(value, torch.fx.Node):
            return self._ref(value)
        if isinstance(value, torch.Generator):
            self.generators.append(("constant", value))
            return ("generator", len(self.generators) - 1)
        if isinstance(value, (list, tuple)) and any(isinstance(v, torch.fx.Node) for v in value):
            return ("list", [None if v is None else self._ref(v) for v in value])
        if isinstance(value, (list, tuple)) and value and all(v is None for v in value):
            return ("list", [None] * len(value))
        if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
            raise _Unsupported("symbolic (dynamic) shapes")
        return ("value", value)

    def _push(self, op: str, kind: int, arguments: list, results: list) -> tuple:
        self.nodes.append((op, kind, arguments, results))
        return ("ref", True, len(self.nodes) - 1, 0)

    def _add(self, node: torch.fx.Node, op: str, kind: int, arguments: list, results: list) -> None:
        self.refs[node] = self._push(op, kind, arguments, results)

    def _factory(self, node: torch.fx.Node, name: str, results: list) -> bool:
        """Factories: zeros of the traced shape, filled or counted through the registry's fill
        and arange lowerings (the size is the traced one, values stay exact)."""
        aten = torch.ops.aten
        target, args, kwargs = node.target, node.args, node.kwargs
        fills = {
            aten.full.default: lambda: kwargs.get("fill_value", args[1] if len(args) > 1 else None),
            aten.full_like.default: lambda: kwargs.get("fill_value",
                                                       args[1] if len(args) > 1 else None),
            aten.new_full.default: lambda: kwargs.get("fill_value",
                                                      args[2] if len(args) > 2 else None),
            aten.ones.default: lambda: 1, aten.ones_like.default: lambda: 1,
            aten.new_ones.default: lambda: 1,
            aten.scalar_tensor.default: lambda: args[0],
        }
        zeros = {aten.empty.memory_format, aten.empty_strided.default, aten.zeros.default,
                 aten.zeros_like.default, aten.empty_like.default, aten.new_empty.default,
                 aten.new_zeros.default, aten.new_empty_strided.default}
        aranges = {aten.arange.default, aten.arange.start, aten.arange.start_step}
        if target not in fills and target not in zeros and target not in aranges:
            return False
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.device.type != "tpu":
            raise _Unsupported(f"{name} creating a tensor that is not on tpu")
        if target in zeros:
            self._add(node, name, _ZEROS, [], results)
            return True
        if target in fills:
            value = fills[target]()
            if not isinstance(value, (bool, int, float)):
                raise _Unsupported(f"{name} with a fill value computed in the graph")
            base = self._push(name, _ZEROS, [], results)
            self._add(node, "aten::fill.Scalar", _LOWERED, [base, ("value", value)], results)
            return True
        bounds = list(args) + [None] * (3 - len(args))
        if target is aten.arange.default:
            start, end, step = 0, bounds[0], 1
        else:
            start, end, step = bounds[0], bounds[1], bounds[2] if bounds[2] is not None else 1
        if not all(isinstance(v, (int, float)) for v in (start, end, step)):
            raise _Unsupported(f"{name} with bounds computed in the graph")
        floating = val.dtype.is_floating_point or any(isinstance(v, float)
                                                      for v in (start, end, step))
        counted = self._push("torch_tpu::arange", _LOWERED,
                             [("value", start, "scalar"), ("value", step, "scalar"),
                              ("value", val.shape[0]), ("value", floating)],
                             [(list(val.shape), [1], 0,
                               torch.float64 if floating else torch.int64)])
        self._add(node, name, _CONVERT, [counted], results)
        return True

    def _call(self, node: torch.fx.Node) -> None:
        target = node.target
        if self._is_host(node):
            self.host_nodes.append(node)
            self.refs[node] = ("host", node)
            seeded = torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())
            if not seeded and all(source in self.constants or source in self.constant_results
                                  for source in node.all_input_nodes):
                self.constant_results.add(node)
            return
        if _graphsafe_rng.is_graphsafe_node(node):
            _graphsafe_rng.translate_graphsafe_node(self, node)
            return
        if target is operator.getitem:
            source, item = node.args
            ref = self._ref(source)
            if ref[0] == "multi":
                self.refs[node] = ref[1][item]
                return
            if not ref[1]:
                raise _Unsupported("indexing a graph input")
            self.refs[node] = ("ref", True, ref[2], item)
            return
        if not isinstance(target, torch._ops.OpOverload):
            raise _Unsupported(f"{target} (not an ATen operator)")
        name = _overload_name(target)
        val = node.meta.get("val")
        # One entry per result, positions kept (absent results of masked backward ops: None).
        results = [([], [], 0, None) if v is None else _meta(v)
                   for v in (val if isinstance(val, (list, tuple)) else [val])]
        if target is torch.ops.aten.copy_.default:
            destination = node.args[0]
            if (isinstance(destination, torch.fx.Node) and destination.op == "placeholder" and
                    destination.meta["val"].device.type == "cpu"):
                # A host tensor (an optimizer's step count) is written after the program runs.
                source = node.args[1]
                self.host_writebacks.append((
                    self._ref(destination)[2],
                    ("host", source) if self._host_value(source) else self._ref(source)))
                self.refs[node] = self._ref(destination)
                return
            self._add(node, name, _COPY_INTO,
                      [self._encode(node.args[0]), self._encode(node.args[1])], results)
            return
        if target is torch.ops.prims.convert_element_type.default:
            self._add(node, name, _CONVERT, [self._encode(node.args[0])], results)
            return
        if target in (torch.ops.aten._to_copy.default, torch.ops.aten.copy.default):
            self._copy(node, name, results)
            return
        if self._factory(node, name, results):
            return
        if target.is_view:
            self._add(node, name, _VIEW, [self._encode(node.args[0])], results)
            return
        if name.startswith("aten::_foreach_"):
            self._foreach(node, name)
            return
        if name == "aten::lift_fresh_copy":  # a copy of a constant: clone
            self._add(node, "aten::clone", _LOWERED, [self._encode(node.args[0]), ("value", None)],
                      results)
            return
        if name in _compile_batch_norm.LOWERED:
            # Functionalized batch norm: the eager kernel's lowering, which has its results.
            arguments = self._lowered_arguments(name, target._schema, node.args, node.kwargs)
            extra = _compile_batch_norm.extra_results(node.args[0].meta["val"], len(results))
            self._add(node, _compile_batch_norm.LOWERING, _LOWERED,
                      _compile_batch_norm.LOWERED[name](arguments), results + extra)
            return
        if name in _DEVICE_OVERRIDES:
            # ATen sends these to the device's "overrideable" op (what eager runs); so do we.
            lowered, dropped = _DEVICE_OVERRIDES[name]
            arguments = self._lowered_arguments(name, target._schema, node.args, node.kwargs)
            arguments = [a for i, a in enumerate(arguments) if i not in dropped]
            self._add(node, lowered, _LOWERED, arguments, results)
            return
        if not _C._has_lowering(name):
            raise _Unsupported(f"{name} has no tpu lowering")
        arguments = self._lowered_arguments(name, target._schema, node.args, node.kwargs)
        self._add(node, name, _LOWERED, arguments, results)

    def _copy(self, node: torch.fx.Node, name: str, results: list) -> None:
        """``_to_copy`` (dtype casts, ``.to(memory_format=...)``, ``.to(device, copy=True)``) and
        functional ``copy`` (``copy_`` into an intermediate) that stay on the device: a dtype
        conversion, broadcast to the destination's shape for ``copy``. The result takes the
        traced layout like every node's. A copy to the host stays a reason to run eagerly."""
        source = node.args[1] if node.target is torch.ops.aten.copy.default else node.args[0]
        source_val = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
        val = node.meta.get("val")
        if not isinstance(source_val, torch.Tensor) or not isinstance(val, torch.Tensor):
            raise _Unsupported(f"{name} of a value that is not a traced tensor")
        if val.device.type != "tpu":
            raise _Unsupported(f"{name} to {val.device} (a copy off the device inside the graph)")
        if source_val.device != val.device and not (
                source_val.device.type == "cpu" and self._host_value(source)):
            raise _Unsupported(f"{name} from {source_val.device} to {val.device}")
        # A host source (a graph constant, a 0-d host value) is a program input like any other.
        encoded = self._encode(source)
        if node.target is torch.ops.aten._to_copy.default:
            self._add(node, name, _CONVERT, [encoded], results)
            return
        sizes, dtype = results[0][0], results[0][3]
        if source_val.dtype != dtype:
            converted = torch.empty(source_val.shape, dtype=dtype, device="meta")
            encoded = self._push(name, _CONVERT, [encoded], [_meta(converted)])
        self._add(node, "torch_tpu::broadcast_to", _LOWERED, [encoded, ("value", sizes)],
                  results)

    def _lowered_arguments(self, name: str, schema, args, kwargs) -> list:
        """All schema arguments in order (defaults filled in), encoded for the native side."""
        arguments = []
        for position, argument in enumerate(schema.arguments):
            if not argument.kwarg_only and position < len(args):
                value = args[position]
            elif argument.name in kwargs:
                value = kwargs[argument.name]
            elif argument.has_default_value():
                value = argument.default_value
            else:
                raise _Unsupported(f"{name}: missing argument {argument.name}")
            arguments.append(self._encode(value))
        return arguments

    def _foreach(self, node: torch.fx.Node, name: str) -> None:
        """A foreach op is its per-tensor op applied to each list element: one lowered node per
        element, through the per-tensor op's lowering."""
        schema = node.target._schema
        bound = {}
        for position, argument in enumerate(schema.arguments):
            if not argument.kwarg_only and position < len(node.args):
                bound[argument.name] = node.args[position]
            elif argument.name in node.kwargs:
                bound[argument.name] = node.kwargs[argument.name]
            elif argument.has_default_value():
                bound[argument.name] = argument.default_value
        listed = [a.name for a in schema.arguments
                  if str(a.type) in ("List[Tensor]", "Tensor[]", "List[number]", "Scalar[]")
                  or isinstance(a.type, torch.ListType) and
                  str(a.type.getElementType()) in ("Tensor", "number", "Scalar")]
        if not listed:
            raise _Unsupported(f"{name} without list arguments")
        count = len(bound[listed[0]])
        vals = node.meta.get("val")
        if not isinstance(vals, (list, tuple)) or len(vals) != count:
            raise _Unsupported(f"{name} without traced results")
        packet = getattr(torch.ops.aten, node.target.__name__.split(".")[0][len("_foreach_"):],
                         None)
        if packet is None:
            raise _Unsupported(f"{name}: no per-tensor op")
        refs = []
        for i in range(count):
            # The per-tensor op takes the same arguments in the same order (names differ:
            # `scalar` vs `other`, and keyword-only ones may be positional here).
            element = [bound[a.name][i] if a.name in listed else bound[a.name]
                       for a in schema.arguments if a.name in bound]
            op = _per_tensor_overload(packet, element)
            if op is None:
                raise _Unsupported(f"{name}: no lowered per-tensor overload")
            per_args = [a for a in op._schema.arguments]
            positional = [v for a, v in zip(per_args, element) if not a.kwarg_only]
            keywords = {a.name: v for a, v in zip(per_args, element) if a.kwarg_only}
            arguments = self._lowered_arguments(_overload_name(op), op._schema, positional,
                                                keywords)
            refs.append(self._push(_overload_name(op), _LOWERED, arguments, [_meta(vals[i])]))
        self.refs[node] = ("multi", refs)


def _per_tensor_overload(packet, element: list):
    """The lowered overload of `packet` taking `element` (values in order) position by position:
    tensors where it takes a Tensor, numbers where it takes a Scalar (or a Tensor: a wrapped
    number, as eager passes one)."""
    for overload_name in ["Tensor", "default", "Scalar", "Tensor_Scalar", "Scalar_Tensor",
                          *packet.overloads()]:
        op = getattr(packet, overload_name, None)
        if op is None or not _has_lowering(op):
            continue
        arguments = op._schema.arguments
        if len(arguments) < len(element) or not all(
                a.has_default_value() for a in arguments[len(element):]):
            continue
        fits = True
        for argument, value in zip(arguments, element):
            type_name = str(argument.type)
            if isinstance(value, torch.fx.Node):
                fits = fits and type_name in ("Tensor", "Optional[Tensor]")
            elif isinstance(value, (bool, int, float)):
                fits = fits and type_name in ("Scalar", "number", "Optional[number]", "Tensor")
            else:
                fits = False
        if fits:
            return op
    return None


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
        program = _C._GraphProgram(translation.nodes, translation.input_metas,
                                   [ref for ref in translation.outputs if ref and ref[1]] +
                                   [ref for _, ref in translation.host_writebacks
                                    if ref[0] != "host"],
                                   description)
    except _Unsupported as reason:
        _runs_eagerly(f"it holds {reason}")
        return make_boxed_func(gm.forward)
    outputs = translation.outputs
    output_aliases = _output_aliases(translation)
    host_writebacks = translation.host_writebacks
    state = {"eager": False}

    placeholder_index = {node: i for i, node in enumerate(translation.placeholders)}
    host_nodes, host_inputs = translation.host_nodes, translation.host_inputs
    constants = translation.constants
    on_device: dict = {}  # constants other than 0-d host ones, moved to the inputs' device once

    def device_value(node, value):
        if value.device.type == "tpu" or (value.device.type == "cpu" and value.dim() == 0):
            return value
        if node not in on_device:
            device = next((a.device for a in args_seen if isinstance(a, torch.Tensor) and
                           a.device.type == "tpu"), torch.device("tpu"))
            on_device[node] = value.to(device)
        return on_device[node]

    args_seen: list = []

    def run(args: list) -> list:
        if not state["eager"]:
            host = dict(constants)
            args_seen[:] = args
            if host_nodes:
                def value_of(node):
                    return host[node] if node in host else args[placeholder_index[node]]

                for node in host_nodes:
                    host[node] = node.target(*torch.fx.node.map_arg(node.args, value_of),
                                             **torch.fx.node.map_arg(node.kwargs, value_of))
            inputs = args[:len(placeholder_index)] + [device_value(node, host[node])
                                                      for node in host_inputs]
            generators = [args[source] if kind == "input" else source
                          for kind, source in translation.generators]
            args_seen.clear()
            try:
                results = iter(program.run(inputs, generators))
            except NotImplementedError as reason:
                _runs_eagerly(str(reason).splitlines()[0])
                state["eager"] = True
            else:
                # Outputs that are graph inputs (or were written into one) are the inputs.
                returned = []
                for ref in outputs:
                    if ref is None:
                        returned.append(None)
                    elif not ref[1]:
                        returned.append(inputs[ref[2]])
                    else:
                        returned.append(next(results))
                for index, (is_input, base, base_meta, view_meta) in output_aliases.items():
                    returned[index] = _as_view_of_base(inputs[base] if is_input else
                                                       returned[base], base_meta, view_meta,
                                                       returned[index])
                for index, ref in host_writebacks:
                    args[index].copy_(host[ref[1]] if ref[0] == "host" else next(results))
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


def _fw_compiler(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    _copy_outputs_of_inputs(gm)
    if any(_is_collective(node) for node in gm.graph.nodes):
        return _compile_with_collectives(gm, example_inputs)
    return _compile_graph(gm, example_inputs)


_aot_backend = None


def tpu_backend(gm: torch.fx.GraphModule, example_inputs: list, **kwargs: Any) -> Callable:
    """The Dynamo backend registered as ``"tpu"``."""
    global _aot_backend
    options = kwargs.get("options") or {}
    if options or kwargs.get("mode") not in (None, "default"):
        _warn_once('torch.compile(backend="tpu"): mode= and inductor options are accepted and '
                   "ignored; XLA compiles every graph at its full optimization level")
    if _aot_backend is None:
        from torch._dynamo.backends.common import aot_autograd

        _aot_backend = aot_autograd(fw_compiler=_fw_compiler, bw_compiler=_fw_compiler,
                                    decompositions=_decompositions(),
                                    keep_inference_input_mutations=True)
    if not any(_is_symbolic(value) for value in example_inputs):
        return _aot_backend(gm, example_inputs)
    _warn_once('torch.compile(backend="tpu"): dynamic shapes compile one program per concrete '
               "input shape (no shape-polymorphic programs yet)")
    return _PerShape(gm)


def _is_symbolic(value: Any) -> bool:
    if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
        return True
    return isinstance(value, torch.Tensor) and any(
        not isinstance(v, int) for v in (*value.shape, *value.stride(), value.storage_offset()))


class _PerShape:
    """A graph Dynamo traced with symbolic shapes, compiled again for each concrete signature:
    the sizes it receives as inputs become constants of that compilation."""

    def __init__(self, gm: torch.fx.GraphModule):
        self.gm = gm
        self.compiled: dict = {}

    def __call__(self, *args: Any) -> Any:
        key = tuple((tuple(a.shape), tuple(a.stride()), a.dtype, a.device, a.requires_grad)
                    if isinstance(a, torch.Tensor) else (type(a), a) for a in args)
        compiled = self.compiled.get(key)
        if compiled is None:
            compiled = self.compiled[key] = self._specialize(args)
        sizes = [i for i, a in enumerate(args) if not isinstance(a, torch.Tensor)]
        return compiled(*[a for i, a in enumerate(args) if i not in sizes])

    def _specialize(self, args: tuple) -> Callable:
        import copy

        from torch._guards import TracingContext, tracing
        from torch._subclasses.fake_tensor import FakeTensorMode

        gm = copy.deepcopy(self.gm)
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for node, value in zip(placeholders, args):
            if not isinstance(value, torch.Tensor):  # a size: a constant of this compilation
                node.replace_all_uses_with(value)
                gm.graph.erase_node(node)
        gm.recompile()
        fake_mode = FakeTensorMode(static_shapes=True)
        fake_args = [fake_mode.from_tensor(a, static_shapes=True) for a in args
                     if isinstance(a, torch.Tensor)]
        with tracing(TracingContext(fake_mode)):
            return _aot_backend(gm, fake_args)

        return compiled(*args)


class _TpuInterface(DeviceInterface):
    """What Dynamo asks of a device: index, count, streams, events, synchronization."""

    @staticmethod
    def _module():
        return torch.tpu

    class device:
        def __new__(cls, device):
            return torch.tpu.device(device)

    class Event:
        def __new__(cls, *args, **kwargs):
            return torch.tpu.Event(*args, **kwargs)

    class Stream:
        def __new__(cls, *args, **kwargs):
            return torch.tpu.Stream(*args, **kwargs)

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            torch.tpu.set_device(device)

        @staticmethod
        def current_device() -> int:
            return torch.tpu.current_device()

        @staticmethod
        def get_device_properties(device=None):
            return None

    current_device = staticmethod(lambda: torch.tpu.current_device())
    set_device = staticmethod(lambda device: torch.tpu.set_device(device))
    device_count = staticmethod(lambda: torch.tpu.device_count())
    is_available = staticmethod(lambda: torch.tpu.is_available())
    synchronize = staticmethod(lambda device=None: torch.tpu.synchronize(device))
    current_stream = staticmethod(lambda: torch.tpu.current_stream()
                                  if hasattr(torch.tpu, "current_stream") else None)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        previous = torch.tpu.current_device()
        if device != previous:
            torch.tpu.set_device(device)
        return previous

    exchange_device = maybe_exchange_device

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @staticmethod
    def is_triton_capable(device=None) -> bool:
        return False

    @staticmethod
    def memory_allocated(device=None) -> int:
        return torch.tpu.memory_allocated(device)


_INDUCTOR_ON_TPU = ('torch.compile: the inductor backend cannot compile tpu tensors; use '
                    'torch.compile(model) (torch_tpu routes the default backend to "tpu") or '
                    'torch.compile(model, backend="tpu")')


class _RefuseAnyUse(type):
    def __getattr__(cls, name: str):
        raise RuntimeError(_INDUCTOR_ON_TPU)


class _InductorOnTpu(metaclass=_RefuseAnyUse):
    """Inductor's code generators for "tpu" tensors: inductor cannot generate tpu code, so an
    explicit backend="inductor" (or a default reset to it) stops at the first use with an error
    that names the backends that can."""

    MESSAGE = _INDUCTOR_ON_TPU

    def __init__(self, *args: Any, **kwargs: Any):
        raise RuntimeError(self.MESSAGE)

    @classmethod
    def create(cls, *args: Any, **kwargs: Any):
        raise RuntimeError(cls.MESSAGE)


def register() -> None:
    """Registers the "tpu" Dynamo backend and device interface (when torch._dynamo loads)."""
    register_backend(name="tpu", compiler_fn=tpu_backend)
    # torch.compile(model) with no backend argument: tpu graphs to "tpu", others to Inductor.
    from torch_tpu import _default_backend

    _default_backend.install()
    _graphsafe_rng.register()
    # PyTorch's own table maps "tpu" to its JAX-based interface when first consulted; fill the
    # table first so this registration is the one that stays.
    from torch._dynamo import device_interface

    if not device_interface._device_initialized:
        device_interface.init_device_reg()
    register_interface_for_device("tpu", _TpuInterface)


def register_inductor_hook() -> None:
    """Claims the "tpu" device in Inductor's code generators (when they load) before Inductor
    registers its own, so backend="inductor" fails with a clear error on tpu tensors."""
    from torch._inductor.codegen.common import register_backend_for_device

    register_backend_for_device("tpu", _InductorOnTpu, _InductorOnTpu)

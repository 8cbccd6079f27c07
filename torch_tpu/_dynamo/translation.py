"""FX graph -> the native graph program's node list (exec/graph_program.h): every node goes
through the same lowering registry as eager execution; what cannot be lowered raises
`_Unsupported`, and the graph then runs eagerly."""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

from torch_tpu import _C
from torch_tpu._dynamo import attention, batch_norm, graphsafe_rng
from torch_tpu._dynamo.decompositions import _DEVICE_OVERRIDES, _has_lowering, _overload_name

# Node kinds understood by the native graph program (exec/graph_program.h).
_LOWERED, _VIEW, _CONVERT, _COPY_INTO, _ZEROS = 0, 1, 2, 3, 4


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
        # Non-0-d CPU graph inputs moved to tpu inside the graph (`x.to("tpu")`, `copy_` into a
        # tpu tensor): the program takes only tpu tensors and 0-d host values, so each such input
        # is moved to the device before the program runs, once per call as eager's copy moves it,
        # and bound as an extra input (in `host_inputs`) that the copies convert from:
        # placeholder -> (device, ref of that extra input).
        self.transfers: dict[torch.fx.Node, tuple] = {}
        # Graph input positions the program itself reads (not only returns or writes on the
        # host); see `unread_host_inputs`.
        self._read_inputs: set[int] = set()
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
                        # An output that is an input is returned by the caller, not read.
                        self.outputs.append(self._ref(value, read=False))
                    else:
                        raise _Unsupported(f"a graph output of type {type(value).__name__}")
            else:
                raise _Unsupported(f"FX node {node.op} {node.target}")
        # Non-0-d CPU inputs the program never reads (moved by copies, used by host ops only,
        # written on the host): the program cannot take them, so the caller binds a 0-d stand-in
        # in their place, which no node reads.
        self.unread_host_inputs = [
            index for index, node in enumerate(self.placeholders)
            if node.meta["val"].device.type == "cpu" and node.meta["val"].dim() != 0
            and index not in self._read_inputs]

    def _ref(self, node: torch.fx.Node, read: bool = True) -> tuple:
        if node not in self.refs:
            raise _Unsupported(f"a value of {node.name} used as a tensor")
        ref = self.refs[node]
        if ref[0] != "host":
            if read and ref[0] == "ref" and not ref[1] and ref[2] < len(self.placeholders):
                self._read_inputs.add(ref[2])
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
        if target is torch.ops.aten.copy_.default:
            destination = node.args[0]
            if (isinstance(destination, torch.fx.Node) and destination.op == "placeholder" and
                    destination.meta["val"].device.type == "cpu"):
                # A host tensor (an optimizer's step count) is written after the program runs,
                # also from a host value: the program and the moves to tpu read its old value,
                # as the ops before the write read it eagerly (later ones read the source).
                source = node.args[1]
                self.host_writebacks.append((
                    self.refs[destination][2],
                    ("host", source) if self._host_value(source) else self._ref(source)))
                self.refs[node] = self.refs[destination]
                return
        if self._is_host(node):
            self.host_nodes.append(node)
            self.refs[node] = ("host", node)
            seeded = torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())
            if not seeded and all(source in self.constants or source in self.constant_results
                                  for source in node.all_input_nodes):
                self.constant_results.add(node)
            return
        if graphsafe_rng.is_graphsafe_node(node):
            graphsafe_rng.translate_graphsafe_node(self, node)
            return
        if target is operator.getitem:
            source, item = node.args
            ref = self._ref(source)
            if ref[0] == "multi":
                if ref[1][item] is None:
                    raise _Unsupported(f"result {item} of {source.target}, which no program "
                                       f"computes")
                self.refs[node] = ref[1][item]
                return
            if not ref[1]:
                raise _Unsupported("indexing a graph input")
            self.refs[node] = ("ref", True, ref[2], item)
            return
        if not isinstance(target, torch._ops.OpOverload):
            raise _Unsupported(f"{target} (not an ATen operator)")
        name = _overload_name(target)
        if name in attention.LOWERED:
            self._attention(node, name)
            return
        val = node.meta.get("val")
        # One entry per result, positions kept (absent results of masked backward ops: None).
        results = [([], [], 0, None) if v is None else _meta(v)
                   for v in (val if isinstance(val, (list, tuple)) else [val])]
        if target is torch.ops.aten.copy_.default:
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
        if name in batch_norm.LOWERED:
            # Functionalized batch norm: the eager kernel's lowering, which has its results.
            arguments = self._lowered_arguments(name, target._schema, node.args, node.kwargs)
            extra = batch_norm.extra_results(node.args[0].meta["val"], len(results))
            self._add(node, batch_norm.LOWERING, _LOWERED,
                      batch_norm.LOWERED[name](arguments), results + extra)
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

    def _attention(self, node: torch.fx.Node, name: str) -> None:
        """Fused attention (the device's "overrideable" SDPA): the eager kernel's lowering, whose
        results are the op's tensor results (`attention.py`)."""
        schema = node.target._schema
        arguments = self._lowered_arguments(name, schema, node.args, node.kwargs)
        named = {argument.name: value for argument, value in zip(schema.arguments, arguments)}
        val = node.meta.get("val")
        mapped = attention.LOWERED[name](named, val)
        if mapped is None:
            raise _Unsupported(f"{name} with dropout")
        lowering, lowered, positions = mapped
        results = [([], [], 0, None) if val[p] is None else _meta(val[p]) for p in positions]
        _, _, index, _ = self._push(lowering, _LOWERED, lowered, results)
        refs: list = [None] * len(val)
        for result, position in enumerate(positions):
            refs[position] = ("ref", True, index, result)
        self.refs[node] = ("multi", refs)

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
        # A host source (a graph constant, a 0-d host value) is a program input like any other;
        # a larger CPU graph input is moved to the device before the program runs.
        if source.op == "placeholder" and source_val.device.type == "cpu" and source_val.dim():
            encoded = self._transferred(source, val.device, name)
        else:
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

    def _transferred(self, node: torch.fx.Node, device: torch.device, name: str) -> tuple:
        """The extra program input holding CPU graph input `node` moved to `device`: one per
        input, however many copies read it."""
        if node in self.transfers:
            if self.transfers[node][0] != device:
                raise _Unsupported(f"{name} of the host input {node.name} to several devices")
            return self.transfers[node][1]
        val = node.meta["val"]
        # Moved contiguous (graph_call): the copies give the traced layout from it.
        self.input_metas.append(_meta(torch.empty(val.shape, dtype=val.dtype, device="meta")))
        self.host_inputs.append(node)
        self.transfers[node] = (device, ("ref", False, len(self.input_metas) - 1, 0))
        return self.transfers[node][1]

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

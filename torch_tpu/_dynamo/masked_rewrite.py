"""A graph traced with symbolic sizes, rewritten for concrete (bucket) sizes with masks that keep
padding out of every result.

Per value and dim the rewrite knows a layout: None (every element real), a sympy expression (the
real elements are a prefix of that length: padding at the end), or `Mixed` (padding inside the
dim, as after merging a padded dim with an outer one: `view(B, n, H) -> (B*n, H)`; its factors,
when known, let a later view split it back). Every value that can hold padding has a boolean mask
of its real elements (broadcastable to its shape), built from the real sizes: runtime scalar
arguments of the program, so any length within the bucket runs the same program.

Rules per kind of op (anything else with a padded operand raises `_Unsupported`):
- elementwise ops: the mask is the AND of the operands' masks (padding stays padding);
- views: the same view of the (expanded) mask; slicing and expanding to a symbolic size add the
  mask of the new length; an index into a padded dim must be a non-negative constant;
- reductions and contractions (sum, amax, argmax, mm, bmm, ...): padding is replaced by the
  identity element first (0, -inf, +inf, 1, False, True);
- softmax: padding reads -inf; layer norm: only over dims without padding;
- embedding and advanced indexing: padded indices read index 0, and real indices into a padded
  dim must be known to lie within its real length (an `arange` of it);
- cat along a padded dim: the operands' real parts are laid end to end (a prefix again); along
  another dim the masks are concatenated;
- outputs come back dense at their real sizes: a gather of the real elements, in order, into the
  front of a flat buffer of the bucket's size. Such an output passed back in (a KV cache) comes
  as that whole buffer and is read back into the bucket's layout in the program.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import sympy
import torch
import torch.fx

from torch_tpu._dynamo.masked_rules import (_FACTORIES, _MATMULS, _NLL_LOSS, _POINTWISE_EXTRA,
                                            _REDUCTIONS, _SCANS, _SLICE_BACKWARD, _SOFTMAX,
                                            _SOFTMAX_BACKWARD, _SORTS, MaskRules, Mixed,
                                            _contiguous, _expr, _is_shape_type)
from torch_tpu._dynamo.translation import _Unsupported

aten = torch.ops.aten
prims = torch.ops.prims


def _is_scalar_type(argument) -> bool:
    return str(argument.type) in ("Scalar", "number", "Optional[number]", "Optional[Scalar]")


class MaskedRewriter(MaskRules):
    """Rewrites `gm` for `sizes` (symbol -> value); symbols in `dynamic` vary at run time within
    their bucket (their real values are runtime scalars); the others are constants."""

    def __init__(self, gm: torch.fx.GraphModule, sizes: dict, dynamic: set,
                 device: torch.device, saved_outputs: frozenset = frozenset(),
                 saved_inputs: dict | None = None, stored_inputs: dict | None = None):
        self.gm = gm
        # A training step's forward returns the values its backward needs (output positions
        # `saved_outputs`) as they are, padding included; their layouts (by name) are what the
        # backward's `saved_inputs` are.
        self.saved_outputs = saved_outputs
        self.saved_layouts: dict = {}
        self.saved_inputs = saved_inputs or {}
        # Inputs passed as the whole storage a bounded program compacted them into (position ->
        # its elements): read back into the bucket's layout in the program.
        self.stored_inputs = stored_inputs or {}
        self._from_storage: list = []
        self.sizes = sizes
        self.dynamic = dynamic
        self.device = device
        self.graph = torch.fx.Graph()
        self.env: dict = {}
        self.masks: dict = {}
        self.layouts: dict = {}
        self.bounds: dict = {}  # int values whose real elements lie in [0, expr)
        self.conditions: list = []  # (a, b): the program is right for sizes with a <= b
        self.scalar_exprs: list = []
        self.input_plan: list = []   # per placeholder: None, or the bucket sizes it is padded to
        self.output_plan: list = []
        self._scalars: dict = {}
        self._fakes: list = []
        self._first_op = None

    # ---- sizes -------------------------------------------------------------------------------

    def _static(self, value: Any) -> int:
        expr = _expr(value)
        return int(expr.xreplace(self.sizes)) if expr.free_symbols else int(expr)

    def _is_dynamic(self, value: Any) -> bool:
        return bool(_expr(value).free_symbols & self.dynamic)

    def _bucket_sizes(self, val: torch.Tensor) -> list:
        return [self._static(size) for size in val.shape]

    def _scalar(self, value: Any) -> Any:
        """A size used as a value: its bucket-free constant, or a runtime scalar input (int64;
        float64 for a symbolic float, as a variance's backward scales by 2 / (n - 1))."""
        floating = isinstance(value, torch.SymFloat)
        expr = value.node.expr if floating else _expr(value)
        if not self._is_dynamic(expr):
            return float(expr.xreplace(self.sizes)) if floating else self._static(expr)
        if expr not in self._scalars:
            name = f"real_size_{len(self.scalar_exprs)}"
            if self._first_op is None:
                node = self.graph.placeholder(name)
            else:
                with self.graph.inserting_before(self._first_op):
                    node = self.graph.placeholder(name)
            self._scalars[expr] = node
            self.scalar_exprs.append((expr, torch.float64 if floating else torch.int64))
            self._fakes.append(([], [], 0, torch.float64 if floating else torch.int64,
                                torch.device("cpu")))
        return self._scalars[expr]

    # ---- emitting ----------------------------------------------------------------------------

    def _op(self, target, *args, **kwargs) -> torch.fx.Node:
        node = self.graph.call_function(target, tuple(args), kwargs)
        if self._first_op is None:
            self._first_op = node
        return node

    def _and(self, a, b):
        if a is None:
            return b
        if b is None:
            return a
        return self._op(aten.bitwise_and.Tensor, a, b)

    def _prefix_mask(self, layout: list, sizes: list, dims=None):
        """The mask of a value's layout: per padded dim, the positions below its real length
        (a dim with padding inside: those of the dims it was merged from)."""
        mask = None
        for dim, entry in enumerate(layout):
            if dims is not None and dim not in dims:
                continue
            if entry is None:
                continue
            if isinstance(entry, Mixed):
                if entry.factors is None:
                    raise _Unsupported("a value with padding inside a dim of unknown origin")
                real = self._prefix_mask([factor for _, factor in entry.factors],
                                         [size for size, _ in entry.factors])
                real = self._op(aten.view.default, self._full(real, [
                    size for size, _ in entry.factors]), [sizes[dim]])
            else:
                counted = self._op(aten.arange.default, sizes[dim], dtype=torch.int64,
                                   device=self.device, pin_memory=False)
                real = self._op(aten.lt.Tensor, counted, self._scalar(entry))
            shape = [1] * len(sizes)
            shape[dim] = sizes[dim]
            mask = self._and(mask, self._op(aten.view.default, real, shape))
        return mask

    def _full(self, mask, sizes: list):
        # Contiguous: a view of the mask then reshapes it logically whatever the strides of the
        # value it follows (every view but as_strided has a meaning independent of them).
        return self._op(aten.clone.default, self._op(aten.expand.default, mask, list(sizes)),
                        memory_format=torch.contiguous_format)

    def _neutral(self, value, mask, fill: Any, dtype: torch.dtype):
        if mask is None:
            return value
        constant = self._op(aten.scalar_tensor.default, fill, dtype=dtype, device=self.device)
        return self._op(aten.where.self, mask, value, constant)

    def _any(self, mask, sizes: list, dims: list, keepdim: bool):
        if mask is None:
            return None
        return self._op(aten.any.dims, self._full(mask, sizes), dims, keepdim)

    # ---- the rewrite -------------------------------------------------------------------------

    def rewrite(self) -> tuple:
        nodes = list(self.gm.graph.nodes)
        placeholders = [node for node in nodes if node.op == "placeholder"]
        for node in placeholders:
            self._placeholder(node)
        for node, elements in self._from_storage:
            self.env[node] = self._unpack(node, self.env[node], elements)
        # Masks of padded inputs after every input: the program's arguments come first.
        for node in placeholders:
            layout = self.layouts.get(node)
            if layout is not None:
                self.masks[node] = self._prefix_mask(layout,
                                                     self._bucket_sizes(node.meta["val"]))
        for node in nodes:
            if node.op == "placeholder":
                continue
            if node.op == "get_attr":
                self.env[node] = self.graph.get_attr(node.target)
                self.layouts[node] = None
                self.masks[node] = None
            elif node.op == "call_function":
                self._call(node)
            elif node.op == "output":
                self._output(node)
            else:
                raise _Unsupported(f"FX node {node.op} {node.target}")
        gm = torch.fx.GraphModule(self.gm, self.graph)
        try:
            return gm, self._fake_inputs(gm)
        except Exception as error:  # noqa: BLE001 - a rule emitted what an op does not take
            raise _Unsupported(f"the graph rewritten for padding does not trace "
                               f"({type(error).__name__}: {str(error).splitlines()[0]})") \
                from error

    def _fake_inputs(self, gm: torch.fx.GraphModule) -> list:
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.passes.fake_tensor_prop import FakeTensorProp
        from torch.utils._python_dispatch import _disable_current_modes

        mode = FakeTensorMode(allow_non_fake_inputs=True)
        fakes = []
        # The rewrite runs at a call, inside whatever dispatch modes are active there (at a
        # compiled function's first call AOTAutograd checks every op for custom-op aliasing,
        # which doubled this pass): its fake ops are compile work, not the user's ops.
        with _disable_current_modes():
            with mode:
                for sizes, strides, offset, dtype, device in self._fakes:
                    extent = 1 + sum((s - 1) * st for s, st in zip(sizes, strides) if s > 0)
                    base = torch.empty(offset + extent, dtype=dtype, device=device)
                    fakes.append(base.as_strided(sizes, strides, offset))
            FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fakes)
        return fakes

    def _placeholder(self, node: torch.fx.Node) -> None:
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            self.env[node] = val  # a size (SymInt): used through its expression
            self.input_plan.append(None)
            return
        new = self.graph.placeholder(node.name)
        self.env[node] = new
        geometry = (*val.shape, *val.stride(), val.storage_offset())
        sizes = self._bucket_sizes(val)
        if node.name in self.saved_inputs:
            # A forward's value as the forward left it: the bucket's geometry, its layout.
            self._fakes.append((sizes, [self._static(s) for s in val.stride()],
                                self._static(val.storage_offset()), val.dtype, val.device))
            self.input_plan.append(None)
            layout = list(self.saved_inputs[node.name])
        elif any(self._is_dynamic(value) for value in geometry):
            elements = self.stored_inputs.get(len(self.input_plan))
            if elements is not None:
                self._fakes.append(([elements], [1], 0, val.dtype, val.device))
                self.input_plan.append(elements)
                self._from_storage.append((node, elements))
            else:
                # Padded on the way in: dense, the real elements at the front of each dim.
                self._fakes.append((sizes, _contiguous(sizes), 0, val.dtype, val.device))
                self.input_plan.append(sizes)
            layout = [_expr(s) if self._is_dynamic(s) else None for s in val.shape]
        else:
            self._fakes.append((sizes, [self._static(s) for s in val.stride()],
                                self._static(val.storage_offset()), val.dtype, val.device))
            self.input_plan.append(None)
            layout = [None] * len(sizes)
        self.layouts[node] = layout
        self.masks[node] = None

    def _unpack(self, node: torch.fx.Node, flat, elements: int):
        """An input passed as its whole storage (flat), at the bucket's sizes: each position
        reads the element the input's real geometry puts there (the traced strides and offset,
        at this call's sizes); positions past the real sizes read some element of the storage
        and are padding."""
        val = node.meta["val"]
        sizes = self._bucket_sizes(val)
        position = None
        for dim, size in enumerate(sizes):
            counted = self._op(aten.arange.default, size, dtype=torch.int64, device=self.device,
                               pin_memory=False)
            stride = self._scalar(_expr(val.stride()[dim]))
            term = self._op(aten.mul.Tensor if isinstance(stride, torch.fx.Node) else
                            aten.mul.Scalar, counted, stride)
            shape = [1] * len(sizes)
            shape[dim] = size
            term = self._op(aten.view.default, term, shape)
            position = term if position is None else self._op(aten.add.Tensor, position, term)
        offset = self._scalar(_expr(val.storage_offset()))  # a padded input has a dim at least
        if not isinstance(offset, int) or offset:
            position = self._op(aten.add.Tensor if isinstance(offset, torch.fx.Node) else
                                aten.add.Scalar, position, offset)
        position = self._op(aten.clamp.default, position, 0, elements - 1)
        numel = math.prod(sizes)
        position = self._op(aten.reshape.default, position, [numel])
        gathered = self._op(aten.index_select.default, flat, 0, position)
        return self._op(aten.view.default, gathered, sizes)

    def _map(self, value: Any, shape: bool) -> Any:
        if isinstance(value, torch.fx.Node):
            mapped = self.env[value]
            if isinstance(mapped, torch.fx.Node):
                return mapped
            if isinstance(mapped, (torch.SymInt, int)):
                return self._static(mapped) if shape else self._scalar(mapped)
            if isinstance(mapped, torch.SymFloat) and not shape:
                return self._scalar(mapped)
            if isinstance(mapped, (torch.SymFloat, torch.SymBool)):
                raise _Unsupported("a symbolic float or bool used in the graph")
            return mapped
        if isinstance(value, (list, tuple)):
            return type(value)(self._map(v, shape) for v in value)
        if isinstance(value, torch.SymInt):
            return self._static(value) if shape else self._scalar(value)
        return value

    def _arguments(self, node: torch.fx.Node, all_shapes: bool = False) -> tuple:
        schema = node.target._schema
        args, kwargs = [], {}
        for position, argument in enumerate(schema.arguments):
            shape = all_shapes or _is_shape_type(argument)
            if not argument.kwarg_only and position < len(node.args):
                args.append(self._map(node.args[position], shape))
            elif argument.name in node.kwargs:
                kwargs[argument.name] = self._map(node.kwargs[argument.name], shape)
        for position, argument in enumerate(schema.arguments[:len(args)]):
            if str(argument.type) == "Optional[Tensor]" and isinstance(
                    args[position], (bool, int, float)):
                # A number where a Tensor overload takes an optional tensor (clamp's bounds).
                args[position] = self._op(aten.scalar_tensor.default, args[position],
                                          dtype=torch.int64 if isinstance(args[position], int)
                                          and not isinstance(args[position], bool)
                                          else torch.get_default_dtype(), device=self.device)
            if _is_scalar_type(argument) and isinstance(args[position], torch.fx.Node):
                if self.env.get(node.args[position]) is args[position]:
                    continue  # a real graph value (a 0-d tensor) as eager passes it
                raise _Unsupported(f"{node.target} with a runtime size as a Scalar argument")
        return args, kwargs

    def _tensor_overload(self, node: torch.fx.Node):
        """`div.Scalar(x, s0 * s1)` (a mean's backward), `clamp(x, 0, s0 - 1)` with a runtime
        size where the op takes a number: the op's Tensor overload, which takes the size as a
        0-d tensor with the number's promotion (0-d tensors promote like Python scalars)."""
        target = node.target
        if not isinstance(target, torch._ops.OpOverload):
            return None
        schema = target._schema
        runtime = any(_is_scalar_type(argument) and position < len(node.args) and
                      isinstance(node.args[position], torch.fx.Node) and
                      self._is_dynamic(self.env[node.args[position]])
                      for position, argument in enumerate(schema.arguments))
        name = target._overloadname
        if not runtime or not (name == "default" or name.startswith("Scalar")):
            return None
        overload = getattr(target.overloadpacket,
                           "Tensor" + (name[len("Scalar"):] if name != "default" else ""), None)
        if overload is None or [a.name for a in overload._schema.arguments] != \
                [a.name for a in schema.arguments]:
            return None
        return overload

    def _call(self, node: torch.fx.Node) -> None:
        overload = self._tensor_overload(node)
        if overload is None:
            self._call_op(node)
            return
        original, node.target = node.target, overload
        try:
            self._call_op(node)
        finally:
            node.target = original

    def _call_op(self, node: torch.fx.Node) -> None:
        target = node.target
        val = node.meta.get("val")
        if target is operator.getitem:
            source, item = node.args
            mapped = self.env[source]
            if not isinstance(mapped, torch.fx.Node):
                self.env[node] = mapped[item]
                return
            self.env[node] = self._op(operator.getitem, mapped, item)
            masks, layouts = self.masks.get(source), self.layouts.get(source)
            self.masks[node] = masks[item] if masks is not None else None
            self.layouts[node] = layouts[item] if layouts is not None else None
            return
        if not isinstance(val, (torch.Tensor, list, tuple)) and val is not None:
            self.env[node] = val  # arithmetic on sizes: used through its expression
            return
        operands = [n for n in node.all_input_nodes
                    if isinstance(n.meta.get("val"), torch.Tensor)]
        masked = any(self.masks.get(n) is not None for n in operands)
        results = list(val) if isinstance(val, (list, tuple)) else [val]
        dynamic = any(isinstance(v, torch.Tensor) and any(self._is_dynamic(s) for s in v.shape)
                      for v in results)
        if not isinstance(target, torch._ops.OpOverload):
            if masked or dynamic:
                raise _Unsupported(f"{target} on padded values")
            args = self._map(node.args, shape=True)
            kwargs = self._map(node.kwargs, shape=True)
            self._set(node, self._op(target, *args, **kwargs), None, None)
            return
        if not masked and not dynamic and target not in _FACTORIES:
            args, kwargs = self._arguments(node)
            self._set(node, self._op(target, *args, **kwargs), None, None)
            self._track_bounds(node)
            return
        name = target.name()
        if target in _FACTORIES:
            self._factory(node)
        elif target is aten.copy_.default:
            raise _Unsupported(f"{name} writing padded values into a graph input")
        elif self._negative_position(node):
            pass
        elif target.is_view or target is aten._unsafe_view.default:
            self._view(node)
        elif target in _REDUCTIONS:
            self._reduction(node)
        elif target in _MATMULS:
            self._matmul(node)
        elif target in _SOFTMAX:
            self._along_dim(node, "low")
        elif target in _SCANS:
            self._along_dim(node, _SCANS[target])
        elif target in _SORTS:
            self._sort(node)
        elif target in _NLL_LOSS:
            self._nll_loss(node)
        elif target is aten.native_layer_norm_backward.default:
            self._layer_norm_backward(node)
        elif target is aten.embedding_dense_backward.default:
            self._embedding_backward(node)
        elif target in _SOFTMAX_BACKWARD:
            self._softmax_backward(node)
        elif target in _SLICE_BACKWARD:
            self._slice_backward(node)
        elif target is aten.native_layer_norm.default:
            self._layer_norm(node)
        elif target is aten.embedding.default:
            self._embedding(node)
        elif target is aten.index.Tensor:
            self._index(node)
        elif target is aten.gather.default:
            self._gather(node)
        elif target is aten.cat.default:
            self._cat(node)
        elif torch.Tag.pointwise in target.tags or target in _POINTWISE_EXTRA:
            self._pointwise(node)
        else:
            raise _Unsupported(f"{name} on padded operands (no rule keeps its padding out)")
        self._track_bounds(node)

    def _set(self, node, new, masks, layouts) -> None:
        self.env[node] = new
        val = node.meta.get("val")
        if isinstance(val, (list, tuple)):
            count = len(val)
            self.masks[node] = tuple(masks) if masks is not None else (None,) * count
            self.layouts[node] = tuple(layouts) if layouts is not None else tuple(
                [None] * v.dim() if isinstance(v, torch.Tensor) else None for v in val)
        else:
            self.masks[node] = masks
            self.layouts[node] = layouts if layouts is not None else (
                [None] * val.dim() if isinstance(val, torch.Tensor) else None)

    def _track_bounds(self, node: torch.fx.Node) -> None:
        """Integer values known to lie in [0, n) at their real positions (an arange of n, a clamp
        into [0, n - 1], and what keeps their values: views, copies, adding 0), so indexing a
        padded dim of length n with them stays within its real part."""
        target, args = node.target, node.args
        if target in (aten.arange.default, aten.arange.start, aten.arange.start_step):
            start = args[0] if target is not aten.arange.default else 0
            end = args[0] if target is aten.arange.default else args[1]
            step = args[2] if target is aten.arange.start_step and len(args) > 2 else 1
            if start == 0 and step == 1 and isinstance(end, (torch.fx.Node, int)):
                value = self.env[end] if isinstance(end, torch.fx.Node) else end
                if isinstance(value, (torch.SymInt, int)):
                    self.bounds[node] = _expr(value)
            return
        if target in (aten.clamp.default, aten.clamp.Tensor) and len(args) == 3 and \
                isinstance(args[1], int) and \
                args[1] >= 0 and isinstance(args[2], (torch.fx.Node, int)):
            # clamp(x, 0, m) lies in [0, m + 1) whatever x is (slice_backward's positions).
            top = self.env[args[2]] if isinstance(args[2], torch.fx.Node) else args[2]
            if isinstance(top, (torch.SymInt, int)):
                self.bounds[node] = _expr(top) + 1
            return
        source = args[0] if args and isinstance(args[0], torch.fx.Node) else None
        if source is None or source not in self.bounds:
            return
        keeps = (target.is_view if isinstance(target, torch._ops.OpOverload) else False) or \
            target in (aten.clone.default, aten._to_copy.default,
                       prims.convert_element_type.default) or \
            (target in (aten.add.Tensor, aten.add.Scalar) and len(args) > 1 and args[1] == 0)
        if keeps:
            self.bounds[node] = self.bounds[source]

    # ---- outputs -----------------------------------------------------------------------------

    def _output(self, node: torch.fx.Node) -> None:
        values = node.args[0]
        outputs = []
        for position, value in enumerate(values if isinstance(values, (list, tuple))
                                         else [values]):
            if not isinstance(value, torch.fx.Node):
                outputs.append(None)
                self.output_plan.append(("const", value))
                continue
            mapped = self.env[value]
            if not isinstance(mapped, torch.fx.Node):
                outputs.append(None)
                self.output_plan.append(("symint", _expr(mapped)) if isinstance(
                    mapped, (torch.SymInt, int)) else ("const", mapped))
                continue
            val = value.meta.get("val")
            layout = self.layouts.get(value)
            base = self._input_aliased(val)
            if base is not None and position not in self.saved_outputs and \
                    any(entry is not None for entry in layout or []):
                # A view of an input (AOTAutograd rebuilds such an output from the input with
                # the returned tensor's geometry): the same view of the real input, at the
                # real sizes.
                outputs.append(None)
                self.output_plan.append(("input_view", (base, [_expr(x) for x in val.shape],
                                                        [_expr(x) for x in val.stride()],
                                                        _expr(val.storage_offset()))))
                continue
            if position in self.saved_outputs and isinstance(val, torch.Tensor):
                layout = list(layout or [None] * val.dim())
                if any(isinstance(entry, Mixed) and entry.factors is None for entry in layout):
                    raise _Unsupported("a value saved for the backward with padding inside a "
                                       "dim of unknown origin")
                self.saved_layouts[value.name] = layout
                self.output_plan.append(("saved", len(outputs)))
                outputs.append(mapped)
                continue
            if not isinstance(val, torch.Tensor) or all(entry is None for entry in layout or []):
                self.output_plan.append(("tensor", len(outputs)))
                outputs.append(mapped)
                continue
            # A dim with padding inside is compacted as the dims it was merged from.
            factor_sizes, factor_exprs = [], []
            for entry, size, real in zip(layout, self._bucket_sizes(val), val.shape):
                if isinstance(entry, Mixed):
                    if entry.factors is None:
                        raise _Unsupported("an output with padding inside a dim")
                    for factor_size, factor in entry.factors:
                        factor_sizes.append(factor_size)
                        factor_exprs.append(sympy.Integer(factor_size) if factor is None
                                            else factor)
                else:
                    factor_sizes.append(size)
                    factor_exprs.append(_expr(real))
            exprs = [_expr(s) for s in val.shape]
            self.output_plan.append(("compact", (len(outputs), exprs)))
            outputs.append(self._compact(mapped, factor_sizes, factor_exprs))
        self.graph.output(tuple(outputs) if isinstance(values, (list, tuple)) else outputs[0])

    def _input_aliased(self, val: Any) -> int | None:
        """The argument position of the input whose storage `val` (a traced value) shares."""
        if not isinstance(val, torch.Tensor):
            return None
        from torch.multiprocessing.reductions import StorageWeakRef

        storage = StorageWeakRef(val.untyped_storage())
        for index, node in enumerate(self.gm.graph.find_nodes(op="placeholder")):
            other = node.meta.get("val")
            if isinstance(other, torch.Tensor) and \
                    StorageWeakRef(other.untyped_storage()) == storage:
                return index
        return None

    def _compact(self, value, sizes: list, exprs: list):
        """The real elements of `value` (a prefix of each dim), in order, at the front of a
        flat buffer of the bucket's size."""
        numel = math.prod(sizes)
        flat = self._op(aten.view.default, self._op(aten.clone.default, value,
                                                    memory_format=torch.contiguous_format),
                        [numel])
        counted = self._op(aten.arange.default, numel, dtype=torch.int64, device=self.device,
                           pin_memory=False)
        remaining, position, stride = counted, None, 1
        for dim in reversed(range(len(sizes))):
            # At least 1: a dim of real length 0 leaves no real element, and no division by 0.
            real = self._scalar(sympy.Max(1, exprs[dim]))
            if dim > 0:
                if isinstance(real, int):
                    index = self._op(aten.remainder.Scalar, remaining, real)
                    remaining = self._op(aten.div.Scalar_mode, remaining, real,
                                         rounding_mode="floor")
                else:
                    index = self._op(aten.remainder.Tensor, remaining, real)
                    remaining = self._op(aten.div.Tensor_mode, remaining, real,
                                         rounding_mode="floor")
            else:
                index = remaining
            term = index if stride == 1 else self._op(aten.mul.Tensor, index, stride)
            position = term if position is None else self._op(aten.add.Tensor, position, term)
            stride *= sizes[dim]
        total = self._scalar(sympy.Mul(*exprs))
        inside = self._op(aten.lt.Tensor if isinstance(total, torch.fx.Node) else aten.lt.Scalar,
                          counted, total)
        zero = self._op(aten.scalar_tensor.default, 0, dtype=torch.int64, device=self.device)
        position = self._op(aten.where.self, inside, position, zero)
        return self._op(aten.index_select.default, flat, 0, position)

"""Per kind of op, how `masked_rewrite.py`'s rewriter keeps padding out of results: each rule
emits the op at the bucket's sizes and sets the mask and layout of its result (that module's
docstring says what masks and layouts are)."""

from __future__ import annotations

import math
import operator
from typing import Any, NamedTuple

import sympy
import torch
import torch.fx

from torch_tpu._dynamo.translation import _Unsupported

aten = torch.ops.aten
prims = torch.ops.prims


class Mixed(NamedTuple):
    """Padding inside a dim: `factors` ((bucket size, layout), ...) outer to inner, or None."""
    factors: tuple | None


def _expr(value: Any) -> sympy.Expr:
    if isinstance(value, sympy.Basic):
        return value
    if isinstance(value, torch.SymInt):
        return value.node.expr
    return sympy.Integer(int(value))


def _contiguous(sizes: list) -> list:
    strides, step = [], 1
    for size in reversed(sizes):
        strides.append(step)
        step *= max(size, 1)
    return strides[::-1]


def _is_shape_type(argument) -> bool:
    text = str(argument.type)
    return "int" in text.lower() and "Tensor" not in text and "Scalar" not in text


_POINTWISE_EXTRA = {
    aten.where.self, aten.clone.default, aten._to_copy.default, prims.convert_element_type.default,
    aten.masked_fill.Scalar, aten.masked_fill.Tensor, aten.lift_fresh_copy.default,
    aten.copy.default, aten.fill.Scalar, aten.zeros_like.default, aten.ones_like.default,
    aten.full_like.default, aten.empty_like.default, aten.alias.default,
    aten.floor_divide.default, aten.hardswish.default,
}
_FACTORIES = {
    aten.arange.default, aten.arange.start, aten.arange.start_step, aten.zeros.default,
    aten.ones.default, aten.full.default, aten.empty.memory_format, aten.empty_strided.default,
    aten.new_zeros.default, aten.new_ones.default, aten.new_full.default,
    aten.new_empty.default, aten.new_empty_strided.default,
}
# Reductions: (dims argument position, keepdim position, identity, returns indices).
_REDUCTIONS = {
    aten.sum.dim_IntList: (1, 2, "zero", False), aten.sum.default: (None, None, "zero", False),
    aten.mean.dim: (1, 2, "mean", False), aten.mean.default: (None, None, "mean", False),
    aten.amax.default: (1, 2, "low", False),
    aten.amin.default: (1, 2, "high", False), aten.max.dim: (1, 2, "low", True),
    aten.min.dim: (1, 2, "high", True), aten.argmax.default: (1, 2, "low", True),
    aten.argmin.default: (1, 2, "high", True), aten.any.dim: (1, 2, "false", False),
    aten.any.dims: (1, 2, "false", False), aten.any.default: (None, None, "false", False),
    aten.all.dim: (1, 2, "true", False), aten.all.default: (None, None, "true", False),
    aten.prod.dim_int: (1, 2, "one", False), aten.logsumexp.default: (1, 2, "low", False),
    aten.max.default: (None, None, "low", False), aten.min.default: (None, None, "high", False),
}
_MATMULS = {aten.mm.default: 0, aten.bmm.default: 0, aten.addmm.default: 1,
            aten.baddbmm.default: 1}
_SOFTMAX = {aten._softmax.default, aten._log_softmax.default, aten._safe_softmax.default}
# Scans along a dim: padding reads the identity; a real element only sees those before it.
_SCANS = {aten.cumsum.default: "zero", aten.cumprod.default: "one",
          aten.logcumsumexp.default: "low"}
_NLL_LOSS = {aten.nll_loss_forward.default, aten.nll_loss_backward.default}
_SOFTMAX_BACKWARD = {aten._softmax_backward_data.default, aten._log_softmax_backward_data.default}
_SLICE_BACKWARD = {aten.slice_backward.default, aten.select_backward.default}
_SORTS = {aten.sort.default, aten.sort.stable, aten.topk.default}


def _identity(kind: str, dtype: torch.dtype) -> Any:
    if kind in ("zero", "mean"):
        return False if dtype == torch.bool else 0
    if kind == "one":
        return True if dtype == torch.bool else 1
    if kind in ("false", "true"):
        return kind == "true"
    low = kind == "low"
    if dtype == torch.bool:
        return not low
    if dtype.is_floating_point:
        return -math.inf if low else math.inf
    info = torch.iinfo(dtype)
    return info.min if low else info.max


class MaskRules:
    """The rules, mixed into the rewriter (which provides emitting, masks and sizes)."""

    def _merge(self, layouts: list, rank: int, sizes: list) -> list:
        """The layout of a broadcast result of rank `rank` from right-aligned operand layouts
        (`sizes`: the operands' bucket sizes)."""
        merged = [None] * rank
        for layout, operand_sizes in zip(layouts, sizes):
            if layout is None:
                continue
            offset = rank - len(layout)
            for dim, entry in enumerate(layout):
                if entry is None or operand_sizes[dim] == 1:
                    continue
                current = merged[offset + dim]
                if current is None:
                    merged[offset + dim] = entry
                elif current != entry or entry == Mixed(None):
                    # Their real elements sit at different positions: combining them position
                    # by position would pair unrelated elements.
                    raise _Unsupported("values padded differently along a dim combined "
                                       "element by element")
        return merged

    def _pointwise(self, node: torch.fx.Node) -> None:
        args, kwargs = self._arguments(node)
        new = self._op(node.target, *args, **kwargs)
        operands = [n for n in node.all_input_nodes
                    if isinstance(n.meta.get("val"), torch.Tensor)]
        mask = None
        for operand in operands:
            mask = self._and(mask, self.masks.get(operand))
        val = node.meta["val"]
        layout = self._merge([self.layouts.get(n) for n in operands], val.dim(),
                             [self._bucket_sizes(n.meta["val"]) for n in operands])
        self._set(node, new, mask, layout)

    def _factory(self, node: torch.fx.Node) -> None:
        target = node.target
        if target in (aten.arange.start, aten.arange.start_step):
            for position in (0, 2):
                value = node.args[position] if position < len(node.args) else None
                if isinstance(value, torch.fx.Node) and self._is_dynamic(self.env[value]):
                    raise _Unsupported(f"{target.name()} from a runtime start or step")
        # arange's bounds are Scalars but sizes; a fill value is a value (a runtime size there
        # has no tensor overload: the graph runs per exact shape).
        aranges = (aten.arange.default, aten.arange.start, aten.arange.start_step)
        args, kwargs = self._arguments(node, all_shapes=target in aranges)
        new = self._op(target, *args, **kwargs)
        val = node.meta["val"]
        layout = [_expr(s) if self._is_dynamic(s) else None for s in val.shape]
        self._set(node, new, self._prefix_mask(layout, self._bucket_sizes(val)), layout)

    def _view(self, node: torch.fx.Node) -> None:
        target = node.target
        source = node.args[0]
        source_val = source.meta["val"]
        source_layout = self.layouts.get(source) or [None] * source_val.dim()
        source_sizes = self._bucket_sizes(source_val)
        val = node.meta["val"]
        results = list(val) if isinstance(val, (list, tuple)) else [val]
        layouts, fresh = self._view_layouts(node, source_layout, source_sizes, results)
        args, kwargs = self._arguments(node)
        new = self._op(target, *args, **kwargs)
        source_mask = self.masks.get(source)
        masks = []
        mask_view = None
        if source_mask is not None:
            mask_view = self._op(target, self._full(source_mask, source_sizes), *args[1:],
                                 **kwargs)
        for index, result in enumerate(results):
            mask = None
            if mask_view is not None:
                mask = mask_view if len(results) == 1 and not isinstance(val, (list, tuple)) \
                    else self._op(operator.getitem, mask_view, index)
            sizes = self._bucket_sizes(result)
            mask = self._and(mask, self._prefix_mask(layouts[index], sizes, fresh[index]))
            masks.append(mask)
        if isinstance(val, (list, tuple)):
            self._set(node, new, masks, layouts)
        else:
            self._set(node, new, masks[0], layouts[0])

    def _index_argument(self, node: torch.fx.Node, position: int, name: str, default: Any):
        if position < len(node.args):
            return node.args[position]
        return node.kwargs.get(name, default)

    def _constant_index(self, value: Any, what: str) -> int:
        """A start or index into a padded dim: a non-negative constant, or nothing is known."""
        if isinstance(value, torch.fx.Node):
            value = self.env[value]
        if isinstance(value, torch.SymInt) and not self._is_dynamic(value):
            value = self._static(value)
        if not isinstance(value, int) or value < 0:
            raise _Unsupported(f"{what} into a padded dim at a position that is not a "
                               "non-negative constant")
        return value

    def _view_layouts(self, node, layout: list, sizes: list, results: list) -> tuple:
        """Per result: its layout and the dims whose real length the view itself sets."""
        target = node.target
        rank = len(layout)
        out = results[0]
        out_exprs = [_expr(s) for s in out.shape]
        dynamic = [self._is_dynamic(e) for e in out_exprs]

        def dim_of(position, name, default=0):
            dim = self._index_argument(node, position, name, default)
            return dim + rank if dim < 0 else dim

        if target in (aten.alias.default, aten.detach.default, aten.lift_fresh.default):
            return [list(layout)], [set()]
        if target is aten.permute.default:
            dims = [d + rank if d < 0 else d for d in node.args[1]]
            return [[layout[d] for d in dims]], [set()]
        if target in (aten.transpose.int, aten.t.default):
            first = dim_of(1, "dim0", 0) if target is aten.transpose.int else 0
            second = dim_of(2, "dim1", 1) if target is aten.transpose.int else 1
            permuted = list(layout)
            if rank >= 2:
                permuted[first], permuted[second] = permuted[second], permuted[first]
            return [permuted], [set()]
        if target is aten.unsqueeze.default:
            dim = node.args[1]
            dim = dim + rank + 1 if dim < 0 else dim
            return [layout[:dim] + [None] + layout[dim:]], [set()]
        if target in (aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims):
            if target is aten.squeeze.default:
                dims = {d for d in range(rank) if sizes[d] == 1}
            else:
                listed = node.args[1] if isinstance(node.args[1], (list, tuple)) else [node.args[1]]
                dims = {(d + rank if d < 0 else d) for d in listed if sizes[d + rank if d < 0
                                                                         else d] == 1}
            kept = [entry for d, entry in enumerate(layout) if d not in dims]
            return [kept], [set()]
        if target is aten.expand.default:
            new_rank = out.dim()
            offset = new_rank - rank
            expanded, fresh = [], set()
            for dim in range(new_rank):
                inner = dim - offset
                if inner >= 0 and not (sizes[inner] == 1 and self._static(out_exprs[dim]) != 1):
                    expanded.append(layout[inner])
                elif dynamic[dim]:
                    expanded.append(out_exprs[dim])
                    fresh.add(dim)
                else:
                    expanded.append(None)
            return [expanded], [fresh]
        if target in (aten.slice.Tensor, aten.narrow.default):
            dim = dim_of(1, "dim", 0)
            entry = layout[dim]
            if isinstance(entry, Mixed):
                raise _Unsupported(f"{target.name()} of a dim with padding inside")
            start = self._index_argument(node, 2, "start", 0)
            start = 0 if start is None else start
            if entry is not None or dynamic[dim]:
                self._constant_index(start, target.name())
            sliced = list(layout)
            sliced[dim] = out_exprs[dim] if dynamic[dim] else None
            return [sliced], [{dim} if dynamic[dim] else set()]
        if target is aten.select.int:
            dim = dim_of(1, "dim", 0)
            entry = layout[dim]
            if isinstance(entry, Mixed):
                raise _Unsupported("aten::select.int of a dim with padding inside")
            index = self._index_argument(node, 2, "index", 0)
            if entry is not None:
                self._constant_index(index, "aten::select.int")
            elif isinstance(index, torch.fx.Node) and self._is_dynamic(self.env[index]):
                raise _Unsupported("aten::select.int at a runtime position")
            return [layout[:dim] + layout[dim + 1:]], [set()]
        if target in (aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int,
                      aten.chunk.default):
            default_dim = 0
            dim = dim_of(2 if target is not aten.unbind.int else 1, "dim", default_dim)
            if layout[dim] is not None:
                raise _Unsupported(f"{target.name()} along a padded dim")
            if target is aten.unbind.int:
                return ([layout[:dim] + layout[dim + 1:] for _ in results],
                        [set() for _ in results])
            return [list(layout) for _ in results], [set() for _ in results]
        if target in (aten.view.default, aten._unsafe_view.default, aten.reshape.default):
            return [self._reshape_layout(layout, sizes, out)], [set()]
        raise _Unsupported(f"{target.name()} of a padded value")

    def _reshape_layout(self, layout: list, sizes: list, out: torch.Tensor) -> list:
        """A view's layout: the source dims as factors (bucket size, layout), regrouped by the
        result's sizes (a factor splits when a result dim takes only its outer part); a result
        dim made of one factor takes its layout, of several: a prefix when only the outermost
        factor is padded, else padding inside (`Mixed`, with the factors to split it back)."""
        unknown = [Mixed(None) if self._static(s) > 1 else None for s in out.shape]
        factors = []
        for entry, size in zip(layout, sizes):
            if isinstance(entry, Mixed) and entry.factors is not None:
                factors.extend(entry.factors)
            elif size != 1:
                factors.append((size, entry))  # Mixed(None): padding somewhere inside
        factors.reverse()  # a stack: the outermost factor last
        result = []
        for size_value in out.shape:
            size = self._static(size_value)
            if size == 1:
                result.append(None)
                continue
            group, product = [], 1
            while product < size:
                if not factors:
                    return unknown
                factor_size, entry = factors.pop()
                if product * factor_size > size:
                    # This dim takes the factor's outer part; the inner part stays for the next.
                    outer = size // product
                    if size % product or factor_size % outer:
                        return unknown
                    inner = Mixed(None) if isinstance(entry, Mixed) else None
                    factors.append((factor_size // outer, inner))
                    factor_size = outer
                    if entry is not None and not isinstance(entry, Mixed):
                        if product != 1 or not self._is_dynamic(size_value):
                            return unknown
                        entry = _expr(size_value)
                group.append((factor_size, entry))
                product *= factor_size
            padded = [entry for _, entry in group if entry is not None]
            if not padded:
                result.append(None)
            elif len(group) == 1:
                result.append(group[0][1])
            elif any(isinstance(entry, Mixed) for entry in padded):
                result.append(Mixed(None))
            elif group[0][1] is not None and len(padded) == 1 and self._is_dynamic(size_value):
                result.append(_expr(size_value))
            else:
                result.append(Mixed(tuple(group)))
        return result

    def _dims_argument(self, node, position, rank) -> list:
        dims = self._index_argument(node, position, "dim", None) if position is not None \
            else None
        if dims is None or dims == []:
            return list(range(rank))
        dims = dims if isinstance(dims, (list, tuple)) else [dims]
        return sorted({d + rank if d < 0 else d for d in dims})

    def _reduction(self, node: torch.fx.Node) -> None:
        target = node.target
        dims_position, keep_position, identity, indices = _REDUCTIONS[target]
        source = node.args[0]
        source_val = source.meta["val"]
        rank = source_val.dim()
        layout = self.layouts.get(source) or [None] * rank
        dims = self._dims_argument(node, dims_position, rank)
        keepdim = bool(self._index_argument(node, keep_position, "keepdim", False)) \
            if keep_position is not None else False
        reduced_padding = [layout[d] for d in dims if layout[d] is not None]
        if reduced_padding and identity == "mean":
            self._mean(node, dims, keepdim)
            return
        if indices and any(isinstance(entry, Mixed) for entry in reduced_padding):
            raise _Unsupported(f"{target.name()} (positions) over a dim with padding inside")
        if indices and len(dims) > 1 and any(layout[d] is not None for d in dims[1:]):
            # A flat position counts the padding of every dim but the outermost.
            raise _Unsupported(f"{target.name()} (flat positions) over padded inner dims")
        args, kwargs = self._arguments(node)
        mask = self.masks.get(source)
        if reduced_padding:
            args[0] = self._neutral(args[0], mask, _identity(identity, source_val.dtype),
                                    source_val.dtype)
        new = self._op(target, *args, **kwargs)
        sizes = self._bucket_sizes(source_val)
        result_mask = self._any(mask, sizes, dims, keepdim)
        result_layout = [None if d in dims else entry for d, entry in enumerate(layout)
                         if keepdim or d not in dims]
        val = node.meta["val"]
        if isinstance(val, (list, tuple)):
            self._set(node, new, [result_mask] * len(val), [result_layout] * len(val))
        else:
            self._set(node, new, result_mask, result_layout)

    def _mean(self, node: torch.fx.Node, dims: list, keepdim: bool) -> None:
        """A mean over a padded dim: the sum of the real elements over their count, a runtime
        scalar (half precision sums in float32 and rounds once, as CPU's kernel does)."""
        source = node.args[0]
        source_val = source.meta["val"]
        val = node.meta["val"]
        mask = self.masks.get(source)
        value = self._neutral(self.env[source], mask, 0, source_val.dtype)
        wide = val.dtype in (torch.float16, torch.bfloat16)
        total = self._op(aten.sum.dim_IntList, value, dims, keepdim,
                         dtype=torch.float32 if wide else val.dtype)
        count = self._scalar(sympy.Mul(*[_expr(source_val.shape[d]) for d in dims]))
        mean = self._op(aten.div.Tensor, total, count)
        if wide:
            mean = self._op(prims.convert_element_type.default, mean, val.dtype)
        layout = self.layouts.get(source)
        self._set(node, mean, self._any(mask, self._bucket_sizes(source_val), dims, keepdim),
                  [None if d in dims else entry for d, entry in enumerate(layout)
                   if keepdim or d not in dims])

    def _along_dim(self, node: torch.fx.Node, identity: str) -> None:
        """An op over one dim whose result keeps its operand's shape (softmax, cumsum): padding
        reads the identity (-inf for softmax); a real element sees only real ones."""
        source = node.args[0]
        source_val = source.meta["val"]
        args, kwargs = self._arguments(node)
        mask = self.masks.get(source)
        args[0] = self._neutral(args[0], mask, _identity(identity, source_val.dtype),
                                source_val.dtype)
        new = self._op(node.target, *args, **kwargs)
        self._set(node, new, mask, list(self.layouts.get(source) or [None] * source_val.dim()))

    def _sort(self, node: torch.fx.Node) -> None:
        """sort and topk along a padded dim: padding reads a value that sorts after every real
        one (NaN ascending, as torch puts NaNs last; -inf descending, after the real -infs as the
        sort is made stable), so the sorted real elements stay a prefix; topk's k must lie
        within the real length (a condition of the program, checked per call)."""
        source = node.args[0]
        source_val = source.meta["val"]
        rank = source_val.dim()
        topk = node.target is aten.topk.default
        if topk:
            k = self._index_argument(node, 1, "k", None)
            dim = self._index_argument(node, 2, "dim", -1)
            largest = self._index_argument(node, 3, "largest", True)
            descending, sorted_ = largest, self._index_argument(node, 4, "sorted", True)
        else:
            dim = self._index_argument(node, 1, "dim", -1)
            descending = self._index_argument(node, 2, "descending", False)
        dim = dim + rank if dim < 0 else dim
        layout = list(self.layouts.get(source) or [None] * rank)
        mask = self.masks.get(source)
        entry = layout[dim]
        if isinstance(entry, Mixed):
            raise _Unsupported(f"{node.target.name()} along a dim with padding inside")
        if entry is None:
            args, kwargs = self._arguments(node)
            new = self._op(node.target, *args, **kwargs)
            self._set(node, new, [mask, mask], [layout, layout])
            return
        dtype = source_val.dtype
        if dtype == torch.bool:
            fill = not descending
        elif dtype.is_floating_point:
            fill = -math.inf if descending else math.nan
        else:
            fill = torch.iinfo(dtype).min if descending else torch.iinfo(dtype).max
        filled = self._neutral(self.env[source], mask, fill, dtype)
        if not topk:
            new = self._op(aten.sort.stable, filled, stable=True, dim=dim, descending=descending)
            self._set(node, new, [mask, mask], [layout, layout])
            return
        k = self._static(self.env[k] if isinstance(k, torch.fx.Node) else k)
        self.conditions.append((sympy.Integer(k), entry))
        new = self._op(aten.topk.default, filled, k, dim, largest, sorted_)
        others = [None if d == dim else e for d, e in enumerate(layout)]
        result_mask = None
        if any(e is not None for e in others):
            result_mask = self._any(mask, self._bucket_sizes(source_val), [dim], True)
        self._set(node, new, [result_mask, result_mask], [others, others])

    def _nll_loss(self, node: torch.fx.Node) -> None:
        """Padded rows of a loss are ignored rows: their targets read `ignore_index`, their
        inputs 0, so a mean divides by the real rows' weight only."""
        backward = node.target is aten.nll_loss_backward.default
        first = 1 if backward else 0
        source, target = node.args[first], node.args[first + 1]
        ignore_index = self._index_argument(node, first + 4, "ignore_index", -100)
        args, kwargs = self._arguments(node)
        source_mask, target_mask = self.masks.get(source), self.masks.get(target)
        args[first] = self._neutral(args[first], source_mask, 0, source.meta["val"].dtype)
        args[first + 1] = self._neutral(args[first + 1], target_mask, ignore_index,
                                        target.meta["val"].dtype)
        if backward and isinstance(node.args[0], torch.fx.Node) and \
                self.masks.get(node.args[0]) is not None:
            raise _Unsupported("aten::nll_loss_backward of a padded gradient")
        new = self._op(node.target, *args, **kwargs)
        if backward:
            self._set(node, new, source_mask,
                      list(self.layouts.get(source) or [None] * source.meta["val"].dim()))
            return
        val = node.meta["val"]
        output_layout = [None] * val[0].dim()
        output_mask = None
        if val[0].dim() == 1:  # reduction "none": a loss per row
            output_mask = target_mask
            output_layout = list(self.layouts.get(target) or [None])
        self._set(node, new, [output_mask, None], [output_layout, []])

    def _negative_position(self, node: torch.fx.Node) -> bool:
        """`x[:, -1]`, `x[:, -k:]` on a padded dim: positions counted from the real end, read by
        an index_select at runtime positions. False when the op is not one of these."""
        target = node.target
        if target not in (aten.select.int, aten.slice.Tensor):
            return False
        source = node.args[0]
        source_val = source.meta["val"]
        rank = source_val.dim()
        dim = self._index_argument(node, 1, "dim", 0)
        dim = dim + rank if dim < 0 else dim
        layout = self.layouts.get(source) or [None] * rank
        entry = layout[dim]
        start = self._index_argument(node, 2, "index" if target is aten.select.int else "start",
                                     0)
        if entry is None or isinstance(entry, Mixed) or not isinstance(start, int) or start >= 0:
            return False
        val = node.meta["val"]
        if target is aten.slice.Tensor:
            end = self._index_argument(node, 3, "end", None)
            step = self._index_argument(node, 4, "step", 1)
            if step != 1 or (end is not None and not (isinstance(end, int) and end >= 2 ** 62)) \
                    or self._is_dynamic(val.shape[dim]):
                return False
            count = self._static(val.shape[dim])
        else:
            count = 1
        first = self._scalar(entry - count if target is aten.slice.Tensor else entry + start)
        positions = self._op(aten.arange.default, count, dtype=torch.int64, device=self.device,
                             pin_memory=False)
        positions = self._op(aten.add.Tensor, positions, first)
        new = self._op(aten.index_select.default, self.env[source], dim, positions)
        mask = self.masks.get(source)
        sizes = self._bucket_sizes(source_val)
        mask = None if mask is None else self._op(aten.index_select.default,
                                                  self._full(mask, sizes), dim, positions)
        result_layout = list(layout)
        result_layout[dim] = None
        if target is aten.select.int:
            new = self._op(aten.squeeze.dim, new, dim)
            mask = None if mask is None else self._op(aten.squeeze.dim, mask, dim)
            del result_layout[dim]
        self._set(node, new, mask, result_layout)
        return True

    def _matmul(self, node: torch.fx.Node) -> None:
        first = _MATMULS[node.target]
        args, kwargs = self._arguments(node)
        a, b = node.args[first], node.args[first + 1]
        a_val, b_val = a.meta["val"], b.meta["val"]
        a_mask, b_mask = self.masks.get(a), self.masks.get(b)
        args[first] = self._neutral(args[first], a_mask, 0, a_val.dtype)
        args[first + 1] = self._neutral(args[first + 1], b_mask, 0, b_val.dtype)
        new = self._op(node.target, *args, **kwargs)
        a_sizes, b_sizes = self._bucket_sizes(a_val), self._bucket_sizes(b_val)
        mask = self._and(self._any(a_mask, a_sizes, [a_val.dim() - 1], True),
                         self._any(b_mask, b_sizes, [b_val.dim() - 2], True))
        a_layout = self.layouts.get(a) or [None] * a_val.dim()
        b_layout = self.layouts.get(b) or [None] * b_val.dim()
        rank = node.meta["val"].dim()
        layouts = [a_layout[:-1] + [None], b_layout[:-2] + [None, b_layout[-1]]]
        operand_sizes = [a_sizes[:-1] + [1], b_sizes[:-2] + [1, b_sizes[-1]]]
        if first:
            bias = node.args[0]
            if isinstance(bias, torch.fx.Node):
                mask = self._and(mask, self.masks.get(bias))
                layouts.append(self.layouts.get(bias))
                operand_sizes.append(self._bucket_sizes(bias.meta["val"]))
        self._set(node, new, mask, self._merge(layouts, rank, operand_sizes))

    def _layer_norm(self, node: torch.fx.Node) -> None:
        source = node.args[0]
        source_val = source.meta["val"]
        rank = source_val.dim()
        layout = self.layouts.get(source) or [None] * rank
        normalized = list(range(rank - len(node.args[1]), rank))
        if any(layout[d] is not None for d in normalized):
            raise _Unsupported("aten::native_layer_norm over a padded dim")
        for weight in node.args[2:4]:
            if isinstance(weight, torch.fx.Node) and self.masks.get(weight) is not None:
                raise _Unsupported("aten::native_layer_norm with a padded weight")
        args, kwargs = self._arguments(node)
        new = self._op(node.target, *args, **kwargs)
        mask = self.masks.get(source)
        stats_mask = self._any(mask, self._bucket_sizes(source_val), normalized, True)
        stats_layout = [None if d in normalized else entry for d, entry in enumerate(layout)]
        self._set(node, new, [mask, stats_mask, stats_mask],
                  [list(layout), stats_layout, stats_layout])

    def _zeroed_operands(self, node: torch.fx.Node, args: list) -> list:
        """Every padded tensor operand read as 0 (backward ops that sum over rows: padding
        holds anything, NaN included, and 0 * NaN is no 0)."""
        for position, value in enumerate(node.args):
            if isinstance(value, torch.fx.Node) and self.masks.get(value) is not None:
                args[position] = self._neutral(args[position], self.masks[value], 0,
                                               value.meta["val"].dtype)
        return args

    def _layer_norm_backward(self, node: torch.fx.Node) -> None:
        source = node.args[1]
        source_val = source.meta["val"]
        rank = source_val.dim()
        layout = self.layouts.get(source) or [None] * rank
        normalized = list(range(rank - len(node.args[2]), rank))
        if any(layout[d] is not None for d in normalized):
            raise _Unsupported("aten::native_layer_norm_backward over a padded dim")
        args, kwargs = self._arguments(node)
        new = self._op(node.target, *self._zeroed_operands(node, args), **kwargs)
        mask = self._and(self.masks.get(node.args[0]), self.masks.get(source))
        static = [None] * len(node.args[2])
        self._set(node, new, [mask, None, None], [list(layout), static, static])

    def _embedding_backward(self, node: torch.fx.Node) -> None:
        if self._index_argument(node, 4, "scale_grad_by_freq", False):
            raise _Unsupported("aten::embedding_dense_backward scaling by frequencies that "
                               "count padded indices")
        args, kwargs = self._arguments(node)
        new = self._op(node.target, *self._zeroed_operands(node, args), **kwargs)
        self._set(node, new, None, None)

    def _softmax_backward(self, node: torch.fx.Node) -> None:
        grad, output = node.args[0], node.args[1]
        args, kwargs = self._arguments(node)
        new = self._op(node.target, *self._zeroed_operands(node, args), **kwargs)
        val = node.meta["val"]
        self._set(node, new, self._and(self.masks.get(grad), self.masks.get(output)),
                  self._merge([self.layouts.get(grad), self.layouts.get(output)], val.dim(),
                              [self._bucket_sizes(grad.meta["val"]),
                               self._bucket_sizes(output.meta["val"])]))

    def _slice_backward(self, node: torch.fx.Node) -> None:
        """The gradient of `x[:, a:b]` or `x[:, i]`: written into zeros of x's sizes, at a
        non-negative constant position; its padding lands in x's padding."""
        grad = node.args[0]
        val = node.meta["val"]
        rank = val.dim()
        dim = node.args[2] + rank if node.args[2] < 0 else node.args[2]
        self._constant_index(node.args[3], node.target.name())
        grad_layout = list(self.layouts.get(grad) or [None] * grad.meta["val"].dim())
        if node.target is aten.select_backward.default:
            grad_layout.insert(dim, None)
        if any(isinstance(entry, Mixed) for entry in grad_layout):
            raise _Unsupported(f"{node.target.name()} of a gradient with padding inside a dim")
        layout = [_expr(size) if self._is_dynamic(size) else None for size in val.shape]
        if any(grad_layout[d] is not None and layout[d] is None for d in range(rank)):
            raise _Unsupported(f"{node.target.name()} into a dim without padding")
        args, kwargs = self._arguments(node)
        new = self._op(node.target, *args, **kwargs)
        self._set(node, new, self._prefix_mask(layout, self._bucket_sizes(val)), layout)

    def _embedding(self, node: torch.fx.Node) -> None:
        weight, indices = node.args[0], node.args[1]
        if self.masks.get(weight) is not None:
            raise _Unsupported("aten::embedding of a padded weight")
        indices_val = indices.meta["val"]
        args, kwargs = self._arguments(node)
        mask = self.masks.get(indices)
        args[1] = self._neutral(args[1], mask, 0, indices_val.dtype)
        new = self._op(node.target, *args, **kwargs)
        result_mask = None if mask is None else self._op(aten.unsqueeze.default, mask, -1)
        layout = list(self.layouts.get(indices) or [None] * indices_val.dim()) + [None]
        self._set(node, new, result_mask, layout)

    def _within(self, index: torch.fx.Node, entry: Any) -> bool:
        """Whether `index`'s real values are known to lie within the real part of a dim of
        layout `entry`. Dynamo may give two equal lengths two symbols (an attention mask's
        length and the KV cache's): a bound that is not the length itself is a condition the
        sizes of each call are checked against before its program runs."""
        bound = self.bounds.get(index)
        if bound is None or isinstance(entry, Mixed):
            return False
        if bound != entry:
            self.conditions.append((bound, entry))
        return True

    def _index(self, node: torch.fx.Node) -> None:
        """Advanced indexing over adjacent dims (`x[:, idx]`, `x[i, j]`): padded indices read 0;
        an index into a padded dim must be known to lie within its real part; the result's
        mask is the source's mask indexed alike, and the indices' masks where they land."""
        source, indices = node.args[0], list(node.args[1])
        source_val = source.meta["val"]
        rank = source_val.dim()
        layout = self.layouts.get(source) or [None] * rank
        indexed = [dim for dim, index in enumerate(indices) if index is not None]
        if indexed != list(range(indexed[0], indexed[-1] + 1)):
            raise _Unsupported("aten::index.Tensor of a padded value at dims that are not "
                               "adjacent")
        for dim in indexed:
            entry = layout[dim]
            if entry is not None and not self._within(indices[dim], entry):
                raise _Unsupported("aten::index.Tensor into a padded dim with indices not known "
                                   "to lie within its real part")
        args, kwargs = self._arguments(node)
        mapped = list(args[1])
        index_mask = None
        for dim in indexed:
            mask = self.masks.get(indices[dim])
            mapped[dim] = self._neutral(mapped[dim], mask, 0, indices[dim].meta["val"].dtype)
            index_mask = self._and(index_mask, mask)
        args[1] = mapped
        new = self._op(node.target, *args, **kwargs)
        val = node.meta["val"]
        index_rank = val.dim() - (rank - len(indexed))
        lead, trail = indexed[0], rank - indexed[-1] - 1
        mask = None
        if self.masks.get(source) is not None:
            mask = self._op(node.target, self._full(self.masks[source],
                                                    self._bucket_sizes(source_val)), mapped)
        if index_mask is not None:
            index_shape = self._bucket_sizes(val)[lead:lead + index_rank]
            full = self._full(index_mask, index_shape)
            mask = self._and(mask, self._op(aten.view.default, full,
                                            [1] * lead + index_shape + [1] * trail))
        index_layout = self._merge([self.layouts.get(indices[d]) for d in indexed], index_rank,
                                   [self._bucket_sizes(indices[d].meta["val"]) for d in indexed])
        self._set(node, new, mask, layout[:lead] + index_layout + layout[rank - trail:])

    def _gather(self, node: torch.fx.Node) -> None:
        source, index = node.args[0], node.args[2]
        source_val, index_val = source.meta["val"], index.meta["val"]
        rank = source_val.dim()
        dim = node.args[1] + rank if node.args[1] < 0 else node.args[1]
        layout = self.layouts.get(source) or [None] * rank
        if any(entry is not None for d, entry in enumerate(layout) if d != dim):
            raise _Unsupported("aten::gather of a value padded along a dim it does not gather")
        if layout[dim] is not None and not self._within(index, layout[dim]):
            raise _Unsupported("aten::gather along a padded dim with indices not known to lie "
                               "within its real part")
        args, kwargs = self._arguments(node)
        mask = self.masks.get(index)
        args[2] = self._neutral(args[2], mask, 0, index_val.dtype)
        new = self._op(node.target, *args, **kwargs)
        self._set(node, new, mask, list(self.layouts.get(index) or [None] * index_val.dim()))

    def _cat(self, node: torch.fx.Node) -> None:
        tensors = node.args[0]
        val = node.meta["val"]
        rank = val.dim()
        dim = self._index_argument(node, 1, "dim", 0)
        dim = dim + rank if dim < 0 else dim
        args, kwargs = self._arguments(node)
        new = self._op(node.target, *args, **kwargs)
        parts, layouts = [], []
        for tensor in tensors:
            tensor_val = tensor.meta["val"]
            if tensor_val.dim() != rank:  # legacy empty 1-d inputs
                continue
            sizes = self._bucket_sizes(tensor_val)
            mask = self.masks.get(tensor)
            if mask is None:
                mask = self._op(aten.ones.default, sizes, dtype=torch.bool, device=self.device,
                                pin_memory=False)
            parts.append(self._full(mask, sizes))
            layouts.append(self.layouts.get(tensor) or [None] * rank)
        mask = self._op(aten.cat.default, parts, dim)
        kept = [t for t in tensors if t.meta["val"].dim() == rank]
        layout = self._merge([lay[:dim] + [None] + lay[dim + 1:] for lay in layouts], rank,
                             [self._bucket_sizes(t.meta["val"]) for t in kept])
        entries = [lay[dim] for lay in layouts]
        if any(isinstance(entry, Mixed) for entry in entries):
            layout[dim] = Mixed(None)
        elif any(entry is not None for entry in entries):
            # Each operand's real part moved right after the previous one's (a KV cache grown
            # by a token stays a prefix, so the next call reads it as one).
            position = self._cat_positions(kept, entries, dim)
            new = self._op(aten.index_select.default, new, dim, position)
            mask = self._op(aten.index_select.default, mask, dim, position)
            layout[dim] = _expr(val.shape[dim])
            mask = self._and(mask, self._prefix_mask(layout, self._bucket_sizes(val), [dim]))
        self._set(node, new, mask, layout)

    def _cat_positions(self, tensors: list, entries: list, dim: int):
        """For each position of a cat along a padded dim, where in the plain cat of the padded
        operands its element comes from when the real parts are laid end to end."""
        capacity = sum(self._static(t.meta["val"].shape[dim]) for t in tensors)
        counted = self._op(aten.arange.default, capacity, dtype=torch.int64, device=self.device,
                           pin_memory=False)
        position, offset, real_offset = counted, 0, sympy.Integer(0)
        for tensor, entry in zip(tensors, entries):
            size = self._static(tensor.meta["val"].shape[dim])
            if offset:
                start = self._scalar(real_offset)
                runtime = isinstance(start, torch.fx.Node)
                after = self._op(aten.ge.Tensor if runtime else aten.ge.Scalar, counted, start)
                moved = self._op(aten.sub.Tensor if runtime else aten.sub.Scalar, counted, start)
                moved = self._op(aten.add.Scalar, moved, offset)
                position = self._op(aten.where.self, after, moved, position)
            offset += size
            real_offset = real_offset + (sympy.Integer(size) if entry is None else entry)
        return self._op(aten.clamp.default, position, 0, capacity - 1)

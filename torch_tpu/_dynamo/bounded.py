"""Graphs AOTAutograd traced with symbolic sizes (``dynamic=True``, ``mark_dynamic``, Dynamo's
automatic dynamic shapes), run through programs specialized per size bucket.

Each symbol's value at run time is rounded up to a bucket (the next power of two, no smaller
than the symbol's smallest bucket where padding adds little work, or the upper bound
``mark_dynamic(..., max=)`` gave when that is smaller), and the graph is rewritten for the
buckets' sizes: an inference graph then needs one program per bucket rather than one per length.
Dimensions that can hold padding carry a boolean mask of their real elements, built from the real
sizes, which are runtime scalar arguments of the program (a new length within a bucket never
recompiles). Padding never reaches a result (`masked_rules.py` has the rules per kind of op):
reductions and contractions read it as their identity element (0 for sums and products of
matrices, -inf for max and softmax, ...), elementwise ops and views carry the mask along, index
arithmetic must stay within the real part, and outputs come back as dense tensors of their real
sizes. An op without a rule for padded operands, or a graph with a backward, runs on programs
specialized per exact shape instead (counted in
``torch_tpu.metrics()["compiled_graphs_exact_shapes"]``), as do symbols whose bucket holds only
their own value.
"""

from __future__ import annotations

import collections
import functools
import math
import os
from typing import Any, Callable

import sympy
import torch
import torch.fx

from torch_tpu import _C
from torch_tpu._dynamo.masked_rewrite import MaskedRewriter
from torch_tpu._dynamo.masked_rules import _MATMULS, _contiguous
from torch_tpu._dynamo.messages import _runs_eagerly, _warn_once
from torch_tpu._dynamo.translation import _Unsupported


# Sizes up to this one fill a bucket of their own (1, 2): constants of their programs.
_CONSTANT_SIZES = 2


def _bucket(value: int, upper: int | None, smallest: int = 1) -> int:
    """The size a program serving `value` is built for: the next power of two, at least the
    symbol's `smallest` bucket (`_smallest_bucket`), capped by the symbol's upper bound when
    `value` is within it."""
    bucket = 1 << max(value - 1, 0).bit_length()
    if value > _CONSTANT_SIZES:
        bucket = max(bucket, smallest)
    if upper is not None and value <= upper:
        bucket = min(bucket, upper)
    return bucket


# Each bucket is a whole graph's XLA compile (a second or more), while padding a short length up
# to a larger bucket costs the program little where the graph's work hardly grows with that
# symbol: a decoder step's weights outweigh its KV cache at short lengths, and on a TPU a length
# under 128 fills the same (8, 128) tiles anyway. So a symbol's buckets start at the largest
# power of two up to _SMALLEST_BUCKET_LIMIT at which the graph's work is within
# _PADDING_WORK of its work at the symbol's least value; a graph whose work grows with the
# symbol (a batch of activations, a prompt's logits) keeps buckets from the next power of two.
_SMALLEST_BUCKET_LIMIT = 128
_PADDING_WORK = 0.5


def _work_terms(gm: torch.fx.GraphModule) -> collections.Counter:
    """The graph's work as a multiset of size products: each value's elements, and for a
    contraction its elements times the contracted length (what `_work` sums at given sizes)."""
    terms = collections.Counter()
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if node.op not in ("placeholder", "call_function") or not isinstance(val, torch.Tensor):
            continue
        factors = [_expr(size) for size in val.shape]
        first = _MATMULS.get(node.target)
        if first is not None:
            factors.append(_expr(node.args[first].meta["val"].shape[-1]))
        terms[tuple(factors)] += 1
    return terms


def _work(terms: collections.Counter, values: dict) -> int:
    return sum(count * math.prod(max(0, _evaluate(factor, values)) for factor in factors)
               for factors, count in terms.items())


# Symbols whose values lie at most this far apart share a bucket (`_aligned`).
_ALIGNED_SYMBOLS = 2


def _aligned(buckets: dict, values: dict, upper: dict, moving: set) -> dict:
    """`buckets` with those of `moving` symbols (seen with several values) a step or two apart (a
    KV cache's length and its attention mask's, one longer) raised to the larger of the two where
    they differ. Such symbols would otherwise cross into the next bucket at neighbouring calls,
    and the call between would build a program of its own. A symbol that never changed (a hidden
    size near a length) keeps its bucket, as do buckets of one or two values (constants); a
    bucket never passes its symbol's upper bound."""
    aligned = dict(buckets)
    symbols = [s for s in values if buckets[s] > _CONSTANT_SIZES and s in moving]
    for index, a in enumerate(symbols):
        for b in symbols[index + 1:]:
            if abs(int(values[a]) - int(values[b])) > _ALIGNED_SYMBOLS or aligned[a] == aligned[b]:
                continue
            top = max(aligned[a], aligned[b])
            for symbol in (a, b):
                if upper[symbol] is None or top <= upper[symbol]:
                    aligned[symbol] = top
    return aligned


def _expr(value: Any) -> sympy.Expr:
    if isinstance(value, torch.SymInt):
        return value.node.expr
    return sympy.Integer(int(value))


def _evaluate(expr: sympy.Expr, values: dict) -> int:
    return int(_evaluator(expr)(values))


@functools.lru_cache(maxsize=4096)
def _evaluator(expr: sympy.Expr) -> Callable:
    """`expr` at a call's sizes (symbol -> sympy.Integer), as a Python closure: every call of a
    symbolic graph evaluates its sizes, and rebuilding sympy trees (`xreplace`) would cost a
    millisecond per call. Sums and products of integers and symbols (nearly every size) become
    integer arithmetic; anything else is evaluated by sympy."""
    if expr.is_Integer:
        number = int(expr)
        return lambda values: number
    if expr.is_Symbol:
        return lambda values: int(values[expr])
    if (expr.is_Add or expr.is_Mul) and _integral(expr):
        parts = [_evaluator(arg) for arg in expr.args]
        if expr.is_Add:
            return lambda values: sum(part(values) for part in parts)
        return lambda values: math.prod(part(values) for part in parts)
    return lambda values: expr.xreplace(values) if expr.free_symbols else expr


def _integral(expr: sympy.Expr) -> bool:
    return all(arg.is_Integer or arg.is_Symbol or
               ((arg.is_Add or arg.is_Mul) and _integral(arg)) for arg in expr.args)


class _Specialization:
    """One rewritten graph and its compiled callable, for one bucket (or exact shape) key."""

    def __init__(self, run: Callable, rewriter: MaskedRewriter, key: tuple, bucketed: bool):
        self.run = run
        self.input_plan = rewriter.input_plan  # per placeholder: None, or bucket sizes to pad to
        self.outputs = rewriter.output_plan  # per output: ("tensor", i), ("compact", ...), ...
        self.scalar_exprs = rewriter.scalar_exprs  # runtime scalar inputs, after the tensors
        self.saved_layouts = rewriter.saved_layouts  # a forward's values for its backward
        self.conditions = rewriter.conditions  # (a, b): right for sizes with a <= b only
        self.key = key
        self.sizes = rewriter.sizes
        self.dynamic = rewriter.dynamic
        self.bucketed = bucketed

    def holds(self, values: dict) -> bool:
        return all(_evaluate(a, values) <= _evaluate(b, values) for a, b in self.conditions)


class SymbolicGraph:
    """A boxed callable AOTAutograd runs for a graph traced with symbolic sizes."""

    _count = 0

    def __init__(self, gm: torch.fx.GraphModule, compile_fn: Callable,
                 exact_reason: str | None = None):
        SymbolicGraph._count += 1
        self.name = f"symbolic graph {SymbolicGraph._count}"
        self.gm = gm
        self.compile_fn = compile_fn
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.bucketed = exact_reason is None
        self._boxed_call = True  # AOTAutograd passes the arguments as one list
        self.specializations: dict = {}
        self.eager = False  # the graph cannot be rewritten even at exact sizes: op by op
        # Where each symbol's value comes from: (argument, dim) or (argument, None) for an int.
        self.sources: dict = {}
        self.upper: dict = {}
        self.lower: dict = {}
        self.smallest: dict = {}   # symbol -> its smallest bucket (`_smallest_bucket`)
        self._terms: collections.Counter | None = None
        self.seen: dict = {}       # symbol -> the values it has taken
        self.pinned: set = set()   # symbols whose padding the graph's ops cannot keep out
        self.output_nodes = _graph_outputs(gm)
        self.grown = _grown_outputs(self.output_nodes, self.placeholders)
        for index, node in enumerate(self.placeholders):
            val = node.meta.get("val")
            if isinstance(val, torch.SymInt):
                self._source(val, index, None)
            elif isinstance(val, torch.Tensor):
                for dim, size in enumerate(val.shape):
                    self._source(size, index, dim)
        if not self.sources:
            self.bucketed = False
        elif os.environ.get("TORCH_TPU_BOUNDED_DYNAMISM", "1") == "0":
            self._exact("TORCH_TPU_BOUNDED_DYNAMISM=0")
            self.bucketed = False
        elif exact_reason is not None:
            self._exact(exact_reason)

    def _source(self, size: Any, index: int, dim: int | None) -> None:
        if not isinstance(size, torch.SymInt):
            return
        expr = size.node.expr
        if isinstance(expr, sympy.Symbol) and expr not in self.sources:
            self.sources[expr] = (index, dim)
            bound = size.node.shape_env.var_to_range.get(expr)
            upper = getattr(bound, "upper", None) if bound is not None else None
            lower = getattr(bound, "lower", None) if bound is not None else None
            self.upper[expr] = int(upper) if isinstance(upper, sympy.Integer) else None
            self.lower[expr] = max(1, int(lower)) if isinstance(lower, sympy.Integer) else 1

    def _smallest_bucket(self, symbol: sympy.Symbol, values: dict) -> int:
        """The largest power of two up to _SMALLEST_BUCKET_LIMIT (and the symbol's upper bound)
        at which the graph's work, the other symbols at these values, is within _PADDING_WORK
        of its work at the symbol's least value; decided at the symbol's first bucketed call, so
        that every later value finds the same buckets. Symbols a step or two apart (a KV cache's
        length and its attention mask's) are padded together, as `_aligned` buckets them; a
        batch of 2 beside them is a constant (`_bucketed`), not padded."""
        smallest = self.smallest.get(symbol)
        if smallest is not None:
            return smallest
        if int(values[symbol]) <= _CONSTANT_SIZES:  # decided when it takes another value
            return 1
        if self._terms is None:
            self._terms = _work_terms(self.gm)
        group = [s for s in values
                 if s not in self.smallest and int(values[s]) > _CONSTANT_SIZES and
                 abs(int(values[s]) - int(values[symbol])) <= _ALIGNED_SYMBOLS]
        limit = min([_SMALLEST_BUCKET_LIMIT] +
                    [self.upper[s] for s in group if self.upper[s] is not None])
        smallest = 1
        try:
            least = _work(self._terms, {**values, **{s: sympy.Integer(self.lower[s])
                                                     for s in group}})
            while smallest * 2 <= limit:
                padded = _work(self._terms, {**values, **{s: sympy.Integer(smallest * 2)
                                                          for s in group}})
                if padded > least * (1 + _PADDING_WORK):
                    break
                smallest *= 2
        except (TypeError, ValueError, KeyError):  # a size this call's symbols do not give
            smallest = 1
        for s in group:
            self.smallest[s] = smallest
            _C._record_reason("dynamic_shape_smallest_buckets", f"{values[s]} -> {smallest}")
        return smallest

    def _values(self, args: list) -> dict:
        values = {}
        for symbol, (index, dim) in self.sources.items():
            arg = args[index]
            values[symbol] = sympy.Integer(int(arg) if dim is None else arg.shape[dim])
        return values

    def __call__(self, args: list) -> list:
        values = self._values(args)
        for symbol, value in values.items():
            self.seen.setdefault(symbol, set()).add(int(value))
        spec = self._bucketed(values, self._stored(args, values)) if self.bucketed else None
        if spec is not None and not spec.holds(values):
            spec = None  # these sizes break an assumption of the bucket's program
        if spec is None:
            if self.eager:
                return self.gm(*args)
            key = ("exact",) + tuple(int(values[s]) for s in self.sources)
            spec = self.specializations.get(key)
            if spec is None:
                try:
                    spec = self.specializations[key] = self._build(key, values, set())
                except _Unsupported as reason:
                    # Not even at exact sizes (a size known only at run time, as nonzero's with
                    # capture_dynamic_output_shape_ops): op by op, as an unlowerable graph runs.
                    self.eager, self.bucketed = True, False
                    _runs_eagerly(f"it holds {reason}")
                    return self.gm(*args)
        return self._run(spec, args, values)

    def _stored(self, args: list, values: dict) -> dict:
        """Position -> (storage elements, the output of this graph it is, or None) of the inputs
        the program reads from their storage: those a bounded program returned compacted (a KV
        cache grown by a token comes back as one), so they need no round trip through the host to
        be padded; and, on a first call, an input shaped like an output of this graph grown along
        one dim (the cache before this graph returned it) laid out as traced, so that the first
        call takes the program of the calls after it."""
        stored = {}
        for index, arg in enumerate(args):
            if not isinstance(arg, torch.Tensor) or arg.device.type != "tpu":
                continue
            elements = arg.untyped_storage().nbytes() // arg.element_size()
            source = getattr(arg, "_tpu_compact", None)
            if source is not None:
                graph, position = source
                stored[index] = (elements, position if graph == self.name else None)
            elif index in self.grown and self._laid_out_as_traced(index, arg, values):
                stored[index] = (elements, self.grown[index])
        return stored

    def _laid_out_as_traced(self, index: int, arg: torch.Tensor, values: dict) -> bool:
        val = self.placeholders[index].meta["val"]
        try:
            return (list(arg.shape) == [_evaluate(_expr(s), values) for s in val.shape] and
                    list(arg.stride()) == [_evaluate(_expr(s), values) for s in val.stride()] and
                    arg.storage_offset() == _evaluate(_expr(val.storage_offset()), values))
        except (TypeError, ValueError):  # a stride or offset not given by the graph's sizes
            return False

    def _storage_reads(self, stored: dict, sizes: dict, values: dict) -> tuple:
        """(position, elements the program takes) per stored input: the extent of its traced
        geometry at the bucket's sizes, or, for a value this graph returned (a KV cache), the
        storage this bucket's program returns it in, which is longer by the step it grew.
        Every length of a bucket then finds one program: a storage from the previous bucket's
        program is shorter and is padded on the device to that length once
        (`_storage_prefix`), one from this bucket's program is passed whole. An input whose
        real extent lies past that (a geometry that does not grow with its sizes) takes its
        whole storage, a program per storage size."""
        reads = []
        for index, (elements, output) in stored.items():
            val = self.placeholders[index].meta["val"]
            try:
                bucket_extent = max(1, _extent(val, sizes))
                real_extent = _extent(val, values)
                returned = None if output is None else self._returned_elements(output, sizes)
            except (TypeError, ValueError):  # a size not given by the graph's inputs
                bucket_extent = real_extent = elements
                returned = None
            if real_extent > bucket_extent:
                reads.append((index, elements))
            else:
                reads.append((index, max(bucket_extent, returned or 0)))
        return tuple(reads)

    def _returned_elements(self, position: int, sizes: dict) -> int | None:
        """Storage elements of this graph's output `position` (compacted at the front of a
        buffer of its bucket's sizes) at `sizes`."""
        node = self.output_nodes[position]
        val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor):
            return None
        return math.prod(_evaluate(_expr(size), sizes) for size in val.shape)

    def _bucketed(self, values: dict, stored: dict) -> _Specialization | None:
        """The program of these values' buckets, built on first use; None when the graph cannot
        be rewritten for padding."""
        # A symbol pinned while it had one value is bucketed again once it changes.
        self.pinned = {s for s in self.pinned if len(self.seen[s]) == 1}
        while True:
            moving = {s for s in values if len(self.seen[s]) > 1}
            buckets = _aligned({s: _bucket(int(v), self.upper[s], self._smallest_bucket(s, values))
                                for s, v in values.items()}, values, self.upper, moving)
            # Symbols whose bucket holds one value only (1, 2), and those pinned, are constants.
            dynamic = {s for s, b in buckets.items()
                       if b > _CONSTANT_SIZES and s not in self.pinned}
            sizes = {s: sympy.Integer(buckets[s]) if s in dynamic else values[s]
                     for s in values}
            reads = self._storage_reads(stored, sizes, values)
            key = ("bucket",) + tuple(buckets[s] if s in dynamic else int(values[s])
                                      for s in self.sources) + (reads,)
            spec = self.specializations.get(key)
            if spec is not None:
                return spec
            try:
                spec = self._build(key, sizes, dynamic, stored_inputs=dict(reads))
            except _Unsupported as reason:
                # `dynamic=True` makes every size symbolic, also those that never change (a
                # hidden size a layer norm normalizes over): pin the ones seen with one value
                # only and try again; if none is left, every later call runs per exact shape.
                unchanged = {s for s in dynamic if len(self.seen[s]) == 1}
                if unchanged:
                    self.pinned |= unchanged
                    continue
                self.bucketed = False
                self._exact(str(reason))
                return None
            self.specializations[key] = spec
            _C._record_reason("dynamic_shape_programs", self.name)
            return spec

    def _exact(self, reason: str) -> None:
        _C._record_reason("compiled_graphs_exact_shapes", reason)
        _warn_once(f'torch.compile(backend="tpu"): a graph with dynamic shapes compiles one '
                   f"program per exact shape because {reason}")

    def _build(self, key: tuple, sizes: dict, dynamic: set, **rewrite: Any) -> _Specialization:
        device = next((n.meta["val"].device for n in self.placeholders
                       if isinstance(n.meta.get("val"), torch.Tensor) and
                       n.meta["val"].device.type == "tpu"), torch.device("tpu"))
        rewriter = MaskedRewriter(self.gm, sizes, dynamic, device, **rewrite)
        new_gm, fakes = rewriter.rewrite()
        return _Specialization(self.compile_fn(new_gm, fakes), rewriter, key, key[0] == "bucket")

    def _run(self, spec: _Specialization, args: list, values: dict) -> list:
        inputs = self._inputs(spec, args, values)
        arguments = list(args)
        args.clear()
        return self._outputs(spec, spec.run(inputs), values, arguments)

    def _inputs(self, spec: _Specialization, args: list, values: dict) -> list:
        inputs = []
        for index, node in enumerate(self.placeholders):
            if not isinstance(node.meta.get("val"), torch.Tensor):
                continue
            plan = spec.input_plan[index]
            if plan is None:
                inputs.append(args[index])
            elif isinstance(plan, int):  # the storage of a compacted output
                inputs.append(_storage_prefix(args[index], plan))
            else:
                inputs.append(_padded(args[index], plan))
        for expr, dtype in spec.scalar_exprs:
            value = _evaluator(expr)(values)
            inputs.append(torch.tensor(float(value) if dtype.is_floating_point else int(value),
                                       dtype=dtype))
        return inputs

    def _outputs(self, spec: _Specialization, results: list, values: dict,
                 arguments: list) -> list:
        returned = []
        for kind, item in spec.outputs:
            if kind == "input_view":
                index, sizes, strides, offset = item
                returned.append(arguments[index].as_strided(
                    [_evaluate(e, values) for e in sizes], [_evaluate(e, values) for e in strides],
                    _evaluate(offset, values)))
                continue
            if kind in ("tensor", "saved"):
                returned.append(results[item])
            elif kind == "compact":
                index, exprs = item
                sizes = [_evaluate(e, values) for e in exprs]
                compact = results[index].as_strided(sizes, _contiguous(sizes), 0)
                # Which output it is: fed back (a KV cache), the next call takes its storage.
                compact._tpu_compact = (self.name, len(returned))
                returned.append(compact)
            elif kind == "symint":
                returned.append(_evaluate(item, values))
            else:
                returned.append(item)
        return returned


def _graph_outputs(gm: torch.fx.GraphModule) -> list:
    values = gm.graph.output_node().args[0]
    return list(values) if isinstance(values, (list, tuple)) else [values]


def _grown_outputs(output_nodes: list, placeholders: list) -> dict:
    """Placeholder position -> position of an output shaped like it grown along one symbolic dim
    by a constant (the past keys of a decoder step and the cache it returns, one token longer),
    of the same dtype. Which of several such outputs does not matter: they are as long."""
    grown = {}
    outputs = [node.meta.get("val") if isinstance(node, torch.fx.Node) else None
               for node in output_nodes]
    for index, node in enumerate(placeholders):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        for position, out in enumerate(outputs):
            if isinstance(out, torch.Tensor) and _grown(val, out):
                grown[index] = position
                break
    return grown


def _grown(before: torch.Tensor, after: torch.Tensor) -> bool:
    if before.dtype != after.dtype or before.dim() != after.dim():
        return False
    differing = [(_expr(a), _expr(b)) for a, b in zip(before.shape, after.shape)
                 if _expr(a) != _expr(b)]
    if len(differing) != 1:
        return False
    a, b = differing[0]
    growth = b - a  # sympy cancels the symbol of `s + 1 - s` as it builds the sum
    return bool(a.free_symbols) and growth.is_Integer and int(growth) > 0


def _extent(val: torch.Tensor, sizes: dict) -> int:
    """Storage elements `val`'s traced geometry spans at `sizes` (symbol -> value)."""
    dims = [_evaluate(_expr(size), sizes) for size in val.shape]
    if any(size == 0 for size in dims):
        return 0
    strides = [_evaluate(_expr(stride), sizes) for stride in val.stride()]
    return 1 + _evaluate(_expr(val.storage_offset()), sizes) + sum(
        (size - 1) * stride for size, stride in zip(dims, strides))


def _storage_prefix(tensor: torch.Tensor, elements: int) -> torch.Tensor:
    """The first `elements` of `tensor`'s storage, flat. A storage from the previous bucket's
    program is shorter: it is padded on the device (one small program per pair of sizes), once
    per bucket crossed; the padding lies past the real elements, which the program never reads."""
    available = tensor.untyped_storage().nbytes() // tensor.element_size()
    flat = tensor.as_strided((min(available, elements),), (1,), 0)
    if available >= elements:
        return flat
    return torch.nn.functional.pad(flat, (0, elements - available))


def _padded(tensor: torch.Tensor, bucket_sizes: list) -> torch.Tensor:
    """`tensor` at the front of a zero tensor of the bucket's sizes. A length within a bucket
    must not compile anything, so the padding is written on the host: one round trip of the
    input (counted in metrics()["dynamic_shape_elements"] as its real and padding elements)."""
    real = math.prod(tensor.shape)
    padding = math.prod(bucket_sizes) - real
    _C._record_reason("dynamic_shape_elements", "real", real)
    _C._record_reason("dynamic_shape_elements", "padding", padding)
    if list(tensor.shape) == list(bucket_sizes) and tensor.is_contiguous():
        return tensor
    host = torch.zeros(bucket_sizes, dtype=tensor.dtype)
    host[tuple(slice(0, size) for size in tensor.shape)] = tensor.cpu()
    return host.to(tensor.device)


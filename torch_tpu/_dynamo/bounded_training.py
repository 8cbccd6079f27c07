"""Bounded dynamism for training graphs: a forward and its backward share each call's buckets.

The forward runs like an inference graph (bounded.py), except that the values it saves for the
backward leave it as they are, padding included, with the layout the rewrite found for each
(`MaskedRewriter.saved_layouts`, by node name: the partitioner gives the backward's placeholders
the names of the forward's saved values). The backward of that call then runs the program of the
same buckets, with masks rebuilt from those layouts. The forward tags each saved tensor it made
with (its specialization, the call's sizes), so a backward finds its forward's buckets even when
several forwards ran first. A backward that cannot be rewritten for padding cuts the padding off
the saved values and runs per exact shape, and the pair stops bucketing.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Callable

import torch
import torch.fx

from torch_tpu import _C
from torch_tpu._dynamo.bounded import SymbolicGraph, _evaluate, _Specialization
from torch_tpu._dynamo.masked_rules import Mixed, _expr
from torch_tpu._dynamo.translation import _Unsupported

_LINK = "torch_tpu_training_link"
_link_ids = itertools.count()
_forwards: dict = {}  # link -> the forward's SymbolicGraph (weakly: a dict of the live pairs)


def linked_partition(partition_fn: Callable) -> Callable:
    """`partition_fn` that marks its forward and backward modules as a pair (module meta
    survives the deepcopy AOTAutograd makes of the backward), with the forward's count of
    outputs that are not saved for the backward."""

    def partition(joint: torch.fx.GraphModule, joint_inputs: Any, **kwargs: Any) -> tuple:
        forward, backward = partition_fn(joint, joint_inputs, **kwargs)
        link = next(_link_ids)
        forward.meta[_LINK] = (link, kwargs.get("num_fwd_outputs"))
        backward.meta[_LINK] = (link, None)
        return forward, backward

    return partition


def training_compiler(compile_fn: Callable) -> Callable:
    """The fw/bw compiler of graphs with symbolic sizes."""

    def compile_graph(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        link, user_outputs = gm.meta.get(_LINK, (None, None))
        if link is None:
            return SymbolicGraph(gm, compile_fn, exact_reason="its forward and backward are not "
                                 "a known pair")
        if user_outputs is not None:
            forward = _ForwardGraph(gm, compile_fn, user_outputs)
            _forwards[link] = forward
            return forward
        forward = _forwards.pop(link, None)
        if forward is None:
            return SymbolicGraph(gm, compile_fn, exact_reason="its forward is unknown")
        return _BackwardGraph(gm, compile_fn, forward)

    return compile_graph


class _ForwardGraph(SymbolicGraph):
    def __init__(self, gm: torch.fx.GraphModule, compile_fn: Callable, user_outputs: int):
        super().__init__(gm, compile_fn)
        output = next(n for n in gm.graph.nodes if n.op == "output")
        count = len(output.args[0]) if isinstance(output.args[0], (list, tuple)) else 1
        self.saved_outputs = frozenset(range(user_outputs, count))
        self.last_tag = None

    def _build(self, key: tuple, sizes: dict, dynamic: set, **rewrite: Any) -> _Specialization:
        return super()._build(key, sizes, dynamic, saved_outputs=self.saved_outputs, **rewrite)

    def _run(self, spec: _Specialization, args: list, values: dict) -> list:
        inputs = self._inputs(spec, args, values)
        arguments = list(args)
        args.clear()
        results = spec.run(inputs)
        tag = (spec, values)
        self.last_tag = tag
        for kind, item in spec.outputs:
            # Tagged: tensors this call made (an input may be saved too, and outlive the call).
            if kind == "saved" and not any(results[item] is t for t in inputs):
                results[item]._tpu_bucket = tag
        return self._outputs(spec, results, values, arguments)


class _BackwardGraph(SymbolicGraph):
    def __init__(self, gm: torch.fx.GraphModule, compile_fn: Callable, forward: _ForwardGraph):
        super().__init__(gm, compile_fn)
        self.forward = forward
        forward_outputs = next(n for n in forward.gm.graph.nodes if n.op == "output").args[0]
        saved_names = {node.name for position, node in enumerate(forward_outputs)
                       if position in forward.saved_outputs and isinstance(node, torch.fx.Node)}
        self.saved = {index for index, node in enumerate(self.placeholders)
                      if node.name in saved_names}

    def __call__(self, args: list) -> list:
        tag = next((getattr(args[i], "_tpu_bucket", None) for i in self.saved
                    if getattr(args[i], "_tpu_bucket", None) is not None), None)
        forward_spec, values = tag if tag is not None else self.forward.last_tag
        if not forward_spec.bucketed:
            return self._exact_call(args, values)
        spec = self.specializations.get(forward_spec.key)
        if spec is None:
            try:
                spec = self._build(forward_spec.key, forward_spec.sizes, forward_spec.dynamic,
                                   saved_inputs=self._saved_layouts(forward_spec))
            except _Unsupported as reason:
                self.forward.bucketed = False
                self._exact(str(reason))
                self._cut_padding(args, forward_spec, values)
                return self._exact_call(args, values)
            self.specializations[forward_spec.key] = spec
            _C._record_reason("dynamic_shape_programs", self.name)
        if not spec.holds(values):
            self._cut_padding(args, forward_spec, values)
            return self._exact_call(args, values)
        return self._run(spec, args, values)

    def _saved_layouts(self, forward_spec: _Specialization) -> dict:
        return {self.placeholders[i].name: forward_spec.saved_layouts[self.placeholders[i].name]
                for i in self.saved
                if self.placeholders[i].name in forward_spec.saved_layouts}

    def _exact_call(self, args: list, values: dict) -> list:
        key = ("exact",) + tuple(int(values[s]) for s in sorted(values, key=str))
        spec = self.specializations.get(key)
        if spec is None:
            spec = self.specializations[key] = self._build(key, values, set())
        return self._run(spec, args, values)

    def _cut_padding(self, args: list, forward_spec: _Specialization, values: dict) -> None:
        """The saved values at their real sizes (eagerly: this backward runs per exact shape)."""
        for index in self.saved:
            node = self.placeholders[index]
            layout = forward_spec.saved_layouts.get(node.name)
            if layout is None or all(entry is None for entry in layout):
                continue
            bucket, real = [], []
            for entry, size in zip(layout, args[index].shape):
                factors = entry.factors if isinstance(entry, Mixed) else [(size, entry)]
                for factor_size, factor in factors:
                    bucket.append(factor_size)
                    real.append(factor_size if factor is None else _evaluate(_expr(factor),
                                                                             values))
            val = node.meta["val"]
            sizes = [_evaluate(_expr(s), values) for s in val.shape]
            cut = args[index].contiguous().view(bucket)[tuple(slice(0, n) for n in real)]
            assert math.prod(real) == math.prod(sizes)
            # The traced layout: the exact program reads views of it as traced.
            laid_out = torch.empty_strided(sizes, [_evaluate(_expr(s), values)
                                                   for s in val.stride()],
                                           dtype=cut.dtype, device=cut.device)
            args[index] = laid_out.copy_(cut.reshape(sizes))

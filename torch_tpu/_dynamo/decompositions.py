"""Which ops AOTAutograd decomposes before the FX translation: PyTorch's decompositions, only
for ops the tpu lowering registry does not lower itself."""

from __future__ import annotations

import functools
from typing import Any

import torch

from torch_tpu import _C, _transformer_fast_path
from torch_tpu._dynamo import attention, batch_norm, graphsafe_rng


def _overload_name(op: torch._ops.OpOverload) -> str:
    schema = op._schema
    return schema.name + ("." + schema.overload_name if schema.overload_name else "")


def _has_lowering(op: Any) -> bool:
    return isinstance(op, torch._ops.OpOverload) and _C._has_lowering(_overload_name(op))


def _decompositions() -> dict:
    """PyTorch's decompositions (core ATen first), only for ops the tpu registry does not lower:
    an op with a lowering stays one node, lowered exactly as eager lowers it. Built once per
    size of PyTorch's table (a decomposition registered later builds it again): filtering the
    table's ~1,700 entries costs 0.1-0.3 s, which each new compiled frame paid."""
    from torch._decomp import decomposition_table

    return dict(_decompositions_of(len(decomposition_table)))


@functools.lru_cache(maxsize=4)
def _decompositions_of(table_size: int) -> dict:  # the size only keys the cache
    from torch._decomp import core_aten_decompositions, decomposition_table

    # Reference implementations (torch._refs) write through prims.copy_to, which AOTAutograd
    # rejects in a functional graph: only decompositions proper are taken from the full table.
    table = {op: fn for op, fn in decomposition_table.items()
             if not getattr(fn, "__module__", "").startswith("torch._refs")}
    table.update(core_aten_decompositions())
    table[torch.ops.aten.constant_pad_nd.default] = _constant_pad_nd
    table.update(batch_norm.decompositions())
    # The transformer fast path's tpu kernels are compositions of lowered ops: the same
    # functions decompose it in a graph (a compiled TransformerEncoderLayer is one program).
    table.update(_transformer_fast_path.KERNELS)
    table.update(graphsafe_rng.decompositions())
    handled = _handled_in_graph()
    return {op: fn for op, fn in table.items()
            if isinstance(op, torch._ops.OpOverload) and not _has_lowering(op) and
            not op.is_view and not op._schema.is_mutable and op not in handled and
            _overload_name(op) not in _DEVICE_OVERRIDES and
            _overload_name(op) not in batch_norm.LOWERED and
            _overload_name(op) not in attention.LOWERED}


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


@functools.cache
def _handled_in_graph() -> frozenset:
    """Ops the graph program handles itself (factories, conversions, write-backs)."""
    aten = torch.ops.aten
    return frozenset({
        aten.copy_.default, aten.copy.default, aten._to_copy.default, aten.full.default,
        aten.full_like.default, aten.new_full.default, aten.ones.default, aten.ones_like.default,
        aten.new_ones.default, aten.scalar_tensor.default, aten.empty.memory_format,
        aten.empty_strided.default, aten.zeros.default, aten.zeros_like.default,
        aten.empty_like.default, aten.new_empty.default, aten.new_zeros.default,
        aten.new_empty_strided.default, aten.arange.default, aten.arange.start,
        aten.arange.start_step})


# ATen op -> (the op ATen dispatches it to on a custom device, argument positions it drops).
_DEVICE_OVERRIDES = {
    "aten::convolution": ("aten::convolution_overrideable", ()),
    "aten::convolution_backward": ("aten::convolution_backward_overrideable", (3,)),  # bias_sizes
}

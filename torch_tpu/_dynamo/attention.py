"""Fused scaled dot-product attention under ``torch.compile(backend="tpu")``.

Tracing ``F.scaled_dot_product_attention`` on tpu asks the device which backend to use, as an
eager call does (``csrc/aten/attention_kernels.cc``); where it answers "overrideable", the graphs
hold ``_scaled_dot_product_fused_attention_overrideable`` and its backward. Their schemas return
values the program does not compute (sequence offsets of nested inputs, the maximum lengths as
ints), so they map onto the eager kernels' own lowerings, whose results are the tensors among
them: the output, the log-sum-exp and the (unused) dropout state the backward is given.
"""

from __future__ import annotations

from typing import Any, Callable

FORWARD = "aten::_scaled_dot_product_fused_attention_overrideable"
BACKWARD = "aten::_scaled_dot_product_fused_attention_overrideable_backward"
FORWARD_LOWERING = "torch_tpu::scaled_dot_product_attention"
BACKWARD_LOWERING = "torch_tpu::scaled_dot_product_attention_backward"

# The forward's results the lowering computes, by position in the op's schema: output,
# logsumexp, philox_seed, philox_offset. The others are None or the traced lengths.
_FORWARD_TENSORS = (0, 1, 6, 7)


def _forward(arguments: dict, val: Any) -> tuple[str, list, list] | None:
    if arguments["dropout_p"] != ("value", 0.0) or arguments["return_debug_mask"] != \
            ("value", False):
        return None
    key_count = ("value", int(val[5]))
    lowered = [arguments["query"], arguments["key"], arguments["value"], arguments["attn_bias"],
               arguments["is_causal"], arguments["scale"], key_count]
    return FORWARD_LOWERING, lowered, list(_FORWARD_TENSORS)


def _backward(arguments: dict, val: Any) -> tuple[str, list, list] | None:
    if arguments["dropout_p"] != ("value", 0.0):
        return None
    lowered = [arguments[name] for name in ("grad_out", "query", "key", "value", "attn_bias",
                                            "out", "logsumexp", "is_causal", "scale", "max_k",
                                            "grad_input_mask")]
    return BACKWARD_LOWERING, lowered, [0, 1, 2, 3]


# ATen op -> (named encoded arguments, traced results) -> (lowering, its arguments, the op's
# result positions it computes), or None when the call needs what the lowering does not do.
LOWERED: dict[str, Callable] = {FORWARD: _forward, BACKWARD: _backward}

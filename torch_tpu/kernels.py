"""Tokamax kernels as tpu ops (through :func:`torch.tpu.pallas.jax_op`), in PyTorch's layouts.

Each op takes tensors shaped like its PyTorch counterpart and traces the Tokamax function for the
platform under the tpu device (Mosaic/Pallas kernels on TPU, Tokamax's XLA implementation on the
CPU plugin). Gradients are Tokamax's own (``jax.vjp`` of the op). Needs ``torch_tpu[kernels]``.
"""

from __future__ import annotations

import functools
import sys
from typing import Callable

import torch

from torch_tpu import pallas

__all__ = ["dot_product_attention", "gated_linear_unit", "layer_norm"]


def _tokamax():
    pallas._jax()
    try:
        import tokamax
    except ImportError as error:
        raise ImportError(f"torch_tpu.kernels needs Tokamax: {pallas._EXTRA_HINT}") from error
    from absl import flags

    # Tokamax reads its options as absl flags and parses sys.argv on first use when nothing has
    # parsed them: the host program's own arguments (pytest's, a training script's) would then be
    # taken for flags and fail. Parse none instead, so every Tokamax option has its default.
    if not flags.FLAGS.is_parsed():
        flags.FLAGS([sys.argv[0] if sys.argv else "torch_tpu"])
    return tokamax


@functools.cache
def _attention_op() -> Callable:
    tokamax = _tokamax()

    def attention(query, key, value, *, is_causal, scale):
        # PyTorch's (batch, heads, sequence, head_dim) is Tokamax's (batch, sequence, heads, dim).
        out = tokamax.dot_product_attention(
            query.swapaxes(1, 2), key.swapaxes(1, 2), value.swapaxes(1, 2),
            is_causal=is_causal, scale=scale)
        return out.swapaxes(1, 2)

    return pallas.jax_op(attention, name="tokamax_dot_product_attention")


def dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *,
                          is_causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """Tokamax's attention with the arguments and layout of
    ``torch.nn.functional.scaled_dot_product_attention``: ``(batch, heads, sequence, head_dim)``
    tensors; ``key``/``value`` may have fewer heads (grouped-query attention)."""
    return _attention_op()(query, key, value, is_causal=is_causal, scale=scale)


_ACTIVATIONS = ("silu", "gelu", "relu", "sigmoid")


@functools.cache
def _glu_op() -> Callable:
    tokamax = _tokamax()
    import jax

    def glu(x, gate_weight, up_weight, *, activation):
        return tokamax.gated_linear_unit(x, (gate_weight, up_weight),
                                         activation=getattr(jax.nn, activation))

    return pallas.jax_op(glu, name="tokamax_gated_linear_unit")


def gated_linear_unit(x: torch.Tensor, gate_weight: torch.Tensor, up_weight: torch.Tensor, *,
                      activation: str = "silu") -> torch.Tensor:
    """``activation(x @ gate_weight) * (x @ up_weight)`` (SwiGLU with ``"silu"``); weights are
    ``(in_features, out_features)``. ``activation``: one of silu, gelu (JAX's: the tanh
    approximation), relu, sigmoid."""
    if activation not in _ACTIVATIONS:
        raise ValueError(f"gated_linear_unit: activation must be one of {_ACTIVATIONS}, got "
                         f"{activation!r}")
    return _glu_op()(x, gate_weight, up_weight, activation=activation)


@functools.cache
def _layer_norm_op() -> Callable:
    tokamax = _tokamax()

    def norm(x, weight, bias, *, eps, subtract_mean):
        return tokamax.layer_norm(x, weight, bias, epsilon=eps, subtract_mean=subtract_mean)

    return pallas.jax_op(norm, name="tokamax_layer_norm")


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, *, eps: float = 1e-5,
               rms: bool = False) -> torch.Tensor:
    """Tokamax's layer norm over the last dimension, like ``torch.nn.functional.layer_norm``
    with ``normalized_shape=x.shape[-1:]``; ``rms=True`` is RMSNorm (no mean subtracted, ``bias``
    still added)."""
    return _layer_norm_op()(x, weight, bias, eps=eps, subtract_mean=not rms)

"""Batch normalization under ``torch.compile(backend="tpu")``.

AOTAutograd functionalizes batch norm into ops that PyTorch would decompose for us, but two of
those decompositions do not fit a functional tpu graph:

- evaluation mode (``_native_batch_norm_legit_no_training``): PyTorch decomposes it into
  ``_native_batch_norm_legit``, whose schema writes the running statistics. Decompositions run
  below functionalization, so that mutable op would land in the graph (AOTAutograd rejects it).
  It gets the decomposition below instead: the normalization with the running statistics, as
  pure ops in the order the eager lowering computes them;
- training (``_native_batch_norm_legit_functional``, and ``.no_stats`` without running
  statistics): these map onto the eager kernel's own lowering ``torch_tpu::batch_norm``, whose
  results are exactly theirs (output, saved mean and inverse deviation, new running mean and
  variance), so a compiled step normalizes and updates the statistics exactly as eager does.
"""

from __future__ import annotations

from typing import Any

import torch

# The eager kernel's lowering: (input, weight?, bias?, running_mean?, running_var?, training,
# momentum, eps) -> (out, save_mean, save_invstd, new_running_mean, new_running_var).
LOWERING = "torch_tpu::batch_norm"


def _with_training_stats(arguments: list) -> list:
    return arguments


def _without_stats(arguments: list) -> list:
    # (input, weight, bias, training, momentum, eps): no running statistics.
    return arguments[:3] + [("value", None), ("value", None)] + arguments[3:]


# Functionalized ATen op -> how its schema arguments become the lowering's.
LOWERED = {
    "aten::_native_batch_norm_legit_functional": _with_training_stats,
    "aten::_native_batch_norm_legit.no_stats": _without_stats,
}


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half types normalize in float32, as the lowering (and PyTorch's CPU kernel) does."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def extra_results(input_meta: Any, count: int) -> list:
    """Metas of the lowering's results past the op's own `count` (the statistics a call without
    running statistics does not produce: empty, in the compute dtype)."""
    empty = ([0], [1], 0, compute_dtype(input_meta.dtype))
    return [empty] * (5 - count)


def _inference(input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
               running_mean: torch.Tensor, running_var: torch.Tensor, momentum: float,
               eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Evaluation-mode batch norm from the running statistics, as pure ops. The saved statistics
    (used by no backward formula in evaluation mode) are the mean and inverse deviation, with the
    per-channel shape the op's meta function gives off the CPU."""
    if input.dim() < 2:
        raise RuntimeError(f"batch_norm: expected at least 2-D input, got {input.dim()}-D")
    compute = compute_dtype(input.dtype)
    per_channel = [1, input.shape[1]] + [1] * (input.dim() - 2)
    mean = running_mean.to(dtype=compute, copy=True)
    invstd = torch.rsqrt(running_var.to(dtype=compute) + eps)
    out = (input.to(compute) - mean.reshape(per_channel)) * invstd.reshape(per_channel)
    if weight is not None:
        out = out * weight.to(compute).reshape(per_channel)
    if bias is not None:
        out = out + bias.to(compute).reshape(per_channel)
    return out.to(input.dtype), mean, invstd


def decompositions() -> dict:
    return {torch.ops.aten._native_batch_norm_legit_no_training.default: _inference}

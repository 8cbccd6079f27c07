"""One device program per optimizer step in strict mode.

``torch.optim``'s default implementation for tpu parameters is ``foreach``: a step is a dozen
list-wide ops (AdamW: mul_, lerp_, mul_, addcmul_, sqrt, div_, add_, addcdiv_), each one program
in strict mode. Run op by op, the step holds a parameter-sized intermediate list (``sqrt``'s
result) and, while one update of a state is still running when the next one is launched, that
state's old and new buffers at once: 1.5x the parameters + gradients + states on a 100M-parameter
AdamW step, where CPU's per-parameter loop needs 1.08x. Recorded as one defer-and-fuse graph, the
step is one program that updates parameters and states in place (their buffers are donated) and
keeps the intermediates inside the program, so its memory is what the compiler reports for it, and
its host cost is one launch instead of one per op.

Strict mode therefore runs each ``optimizer.step()`` on tpu parameters as one fused graph: a
global step pre-hook switches to defer-and-fuse and the post-hook switches back, which runs the
graph (asynchronously, as a strict op would run). Results are the defer-and-fuse mode's, which
equal strict's op by op. Not fused: steps given a closure (LBFGS and friends run forward and
backward inside the step), steps traced by torch.compile, and debug mode (which checks every op).
A step that raises leaves the region open until the same optimizer's next step; ops in between are
recorded too (same results; errors surface at the next materialization point).
``torch_tpu.set_optimizer_step_fusion(False)`` or ``TORCH_TPU_FUSE_OPTIMIZER_STEPS=0`` turns this
off.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import torch
from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                   register_optimizer_step_pre_hook)

from torch_tpu import _C

_enabled = os.environ.get("TORCH_TPU_FUSE_OPTIMIZER_STEPS", "1") != "0"
_lock = threading.Lock()
_open_steps: set[int] = set()  # id() of optimizers whose step is being recorded


def set_optimizer_step_fusion(enabled: bool) -> None:
    """Whether strict mode runs each ``optimizer.step()`` on tpu parameters as one fused program
    (the default; ``TORCH_TPU_FUSE_OPTIMIZER_STEPS=0`` starts with it off)."""
    global _enabled
    _enabled = bool(enabled)


def optimizer_step_fusion() -> bool:
    """See :func:`set_optimizer_step_fusion`."""
    return _enabled


def _on_tpu(optimizer: torch.optim.Optimizer) -> bool:
    for group in optimizer.param_groups:
        for param in group["params"]:
            return param.device.type == "tpu"
    return False


def _has_closure(args: tuple, kwargs: dict) -> bool:
    return kwargs.get("closure") is not None or any(callable(arg) for arg in args)


def _before_step(optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
    if not _enabled or torch.compiler.is_compiling() or _has_closure(args, kwargs):
        return
    if not _on_tpu(optimizer):
        return
    with _lock:
        key = id(optimizer)
        if key in _open_steps:
            return  # its previous step raised: the region is still open
        if not _open_steps:
            if _C._eager_mode() != "strict":
                return  # debug mode checks every op; defer-and-fuse fuses already
            _C._set_eager_mode("defer_and_fuse")
        _open_steps.add(key)


def _after_step(optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
    with _lock:
        key = id(optimizer)
        if key not in _open_steps:
            return
        _open_steps.discard(key)
        if not _open_steps and _C._eager_mode() == "defer_and_fuse":
            # Leaving defer-and-fuse launches the recorded step (asynchronously).
            _C._set_eager_mode("strict")


def _open_step_count() -> int:
    """Optimizer steps being recorded now (for tests)."""
    return len(_open_steps)


_handles: list[Any] = [register_optimizer_step_pre_hook(_before_step),
                       register_optimizer_step_post_hook(_after_step)]

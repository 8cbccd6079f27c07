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

Strict mode therefore runs each ``optimizer.step()`` on tpu parameters as one fused graph: the
step switches to defer-and-fuse and, when it returns or raises, back to strict, which runs the
graph (asynchronously, as a strict op would run). Results are the defer-and-fuse mode's, which
equal strict's op by op. The step's own pre- and post-hooks (gradient clipping, EMA updates) are
recorded with it. Not fused: steps given a closure (LBFGS and friends run forward and backward
inside the step) and debug mode (which checks every op).
``torch_tpu.set_optimizer_step_fusion(False)`` or ``TORCH_TPU_FUSE_OPTIMIZER_STEPS=0`` turns this
off.

Under torch.compile too (``torch.compile(optimizer.step)``, or a compiled training step that calls
it), a step on tpu parameters is not traced: Dynamo breaks the graph there and the step runs as
that one fused program. Tracing gives the same single program, but Dynamo and AOTAutograd take
seconds to trace an optimizer's Python (AdamW over minGPT's 28 parameters: about 1.5 s, in every
process, warm or cold), and the traced graph computes the CPU step counts' bias corrections on
the host at every call; the fused step records a dozen list-wide ops and finds its program by
signature. ``fullgraph=True`` around such a step raises Dynamo's graph-break error naming this;
with step fusion off, Dynamo traces the step as PyTorch does.

Why a wrapper as well as torch's global step hooks: a step that raises never reaches its
post-hook, so a region opened by a pre-hook would stay open (and the process in defer-and-fuse)
for as long as the failed optimizer lived. ``torch.optim`` wraps each optimizer class's ``step``
once, when its first instance is made (``Optimizer._patch_step_function``, which also runs on
unpickling); the wrapper below goes around that one, so it covers every optimizer class, user
subclasses included. It opens the region; the global post-hook closes it, inside torch's
``Optimizer.step#...`` profiler annotation, so the profiler links the step's program to the
step; a ``finally`` closes it when the step raised.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any, Callable

import torch
from torch.optim.optimizer import Optimizer, register_optimizer_step_post_hook

from torch_tpu import _C

_enabled = os.environ.get("TORCH_TPU_FUSE_OPTIMIZER_STEPS", "1") != "0"
_lock = threading.Lock()
# Steps being recorded now. The eager mode is process-wide, so steps that overlap (a subclass's
# step calling super().step(), or two threads) share one region; the last one out closes it.
_open_steps = 0
# Per thread, the steps this thread's wrappers opened, innermost last: [id(optimizer), closed].
_this_thread = threading.local()


def set_optimizer_step_fusion(enabled: bool) -> None:
    """Whether strict mode runs each ``optimizer.step()`` on tpu parameters as one fused program
    (the default; ``TORCH_TPU_FUSE_OPTIMIZER_STEPS=0`` starts with it off)."""
    global _enabled
    _enabled = bool(enabled)


def optimizer_step_fusion() -> bool:
    """See :func:`set_optimizer_step_fusion`."""
    return _enabled


def _on_tpu(optimizer: Optimizer) -> bool:
    for group in optimizer.param_groups:
        for param in group["params"]:
            return param.device.type == "tpu"
    return False


def _has_closure(args: tuple, kwargs: dict) -> bool:
    return kwargs.get("closure") is not None or any(callable(arg) for arg in args)


def _open_region(optimizer: Optimizer, args: tuple, kwargs: dict) -> bool:
    """Starts recording this step; False where it runs op by op."""
    global _open_steps
    if not _enabled or torch.compiler.is_compiling() or _has_closure(args, kwargs):
        return False
    if not _on_tpu(optimizer):
        return False
    with _lock:
        if _open_steps == 0:
            if _C._eager_mode() != "strict":
                return False  # debug mode checks every op; defer-and-fuse fuses already
            _C._set_eager_mode("defer_and_fuse")
        _open_steps += 1
        return True


def _close_region() -> None:
    global _open_steps
    with _lock:
        _open_steps -= 1
        if _open_steps == 0 and _C._eager_mode() == "defer_and_fuse":
            # Leaving defer-and-fuse launches the recorded step (asynchronously); after a step
            # that raised, it runs the ops recorded before the error, as strict mode had.
            _C._set_eager_mode("strict")


def _thread_steps() -> list:
    steps = getattr(_this_thread, "steps", None)
    if steps is None:
        steps = _this_thread.steps = []
    return steps


def _call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return function(*args, **kwargs)


# `_call` with Dynamo disabled: a graph break, and the call runs eagerly. Set when torch._dynamo
# loads (register_with_dynamo): importing Dynamo costs seconds, and nothing compiles without it.
_call_outside_the_graph: Callable[..., Any] | None = None


def register_with_dynamo() -> None:
    global _call_outside_the_graph
    import torch._dynamo

    _call_outside_the_graph = torch._dynamo.disable(
        _call, reason="torch_tpu runs an optimizer step on tpu parameters as one fused program "
                      "outside the compiled graph (torch_tpu.set_optimizer_step_fusion(False) "
                      "lets Dynamo trace it)")


def _recorded_as_one_graph(step: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(step)  # keeps torch's `hooked` mark, so torch does not wrap it again
    def step_as_one_graph(self: Optimizer, *args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling() and _enabled and _call_outside_the_graph is not None \
                and _on_tpu(self) and not _has_closure(args, kwargs):
            return _call_outside_the_graph(step_as_one_graph, self, *args, **kwargs)
        if not _open_region(self, args, kwargs):
            return step(self, *args, **kwargs)
        entry = [id(self), False]
        steps = _thread_steps()
        steps.append(entry)
        try:
            return step(self, *args, **kwargs)
        finally:
            steps.pop()  # `entry`: inner steps have unwound
            if not entry[1]:  # the step raised before its post-hook
                _close_region()

    step_as_one_graph._torch_tpu_step_fusion = True  # type: ignore[attr-defined]
    return step_as_one_graph


def _after_step(optimizer: Optimizer, args: tuple, kwargs: dict) -> None:
    steps = _thread_steps()
    if steps and steps[-1][0] == id(optimizer) and not steps[-1][1]:
        steps[-1][1] = True
        _close_region()


_patch_step_function_of_torch = Optimizer._patch_step_function


def _patch_step_function(self: Optimizer) -> None:
    _patch_step_function_of_torch(self)
    cls = type(self)
    if not getattr(cls.step, "_torch_tpu_step_fusion", False):
        cls.step = _recorded_as_one_graph(cls.step)


def _open_step_count() -> int:
    """Optimizer steps being recorded now (for tests)."""
    return _open_steps


Optimizer._patch_step_function = _patch_step_function  # type: ignore[method-assign]
_post_hook = register_optimizer_step_post_hook(_after_step)

"""``torch.tpu.precision``: the precision of matrix products and convolutions in a block.

Outside any block, ``torch.set_float32_matmul_precision`` decides: "highest" -> HIGHEST,
"high" -> HIGH, "medium" -> DEFAULT (StableHLO ``precision_config``). Inside, the block's
precision replaces it for the calling thread. Either way the precision is read when an op is
called (or a compiled graph runs) and is part of the program's key, so changing it builds new
programs instead of reusing ones built with another precision. See docs/semantics.md.
"""

from __future__ import annotations

import contextlib
import enum

from torch_tpu import _C

__all__ = ["Precision", "precision"]


class Precision(enum.Enum):
    """StableHLO's ``precision_config`` values for dot_general and convolution (on TPU: DEFAULT
    is one bfloat16 pass for float32 operands, HIGH three, HIGHEST full float32)."""

    DEFAULT = "default"
    HIGH = "high"
    HIGHEST = "highest"


# A ContextDecorator, as TorchTPU's (a contextlib.contextmanager) is: `@torch.tpu.precision(...)`
# runs each call of the function in the block. Entering pushes and leaving pops, so one instance
# serves nested, recursive and concurrent (other threads') calls alike.
class precision(contextlib.ContextDecorator):  # noqa: N801  (used like a function)
    """Run the block's (or decorated function's) float32 matrix products and convolutions at
    ``mode`` (a :class:`Precision` or its value, "default" | "high" | "highest"), on the calling
    thread; the previous precision comes back on exit, also when the block raises."""

    def __init__(self, mode: "Precision | str") -> None:
        if isinstance(mode, str):
            valid = [p.value for p in Precision]
            if mode not in valid:
                raise ValueError(f"torch.tpu.precision: expected one of {valid} or a "
                                 f"torch.tpu.Precision, got {mode!r}")
            mode = Precision(mode)
        if not isinstance(mode, Precision):
            raise TypeError(f"torch.tpu.precision: expected a torch.tpu.Precision or str, got "
                            f"{type(mode).__name__}")
        self.mode = mode

    def __enter__(self) -> None:
        _C._push_matmul_precision(self.mode.value)

    def __exit__(self, *exc) -> bool:
        _C._pop_matmul_precision()
        return False


def current_precision() -> Precision:
    """The precision float32 matmuls and convolutions built now get on this thread."""
    return Precision(_C._matmul_precision())

"""Warnings and counters of the compiled path: once per message, and the graphs that run
eagerly (op by op) instead of as one program, per reason."""

from __future__ import annotations

import warnings

from torch_tpu import _C

_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, stacklevel=3)


def _runs_eagerly(reason: str) -> None:
    """A graph runs eagerly (op by op) instead of as one program: counted per graph in
    ``torch_tpu.metrics()["compiled_graphs_eager"]`` (reason -> graphs) and warned once per
    reason."""
    _C._record_reason("compiled_graphs_eager", reason)
    _warn_once(f'torch.compile(backend="tpu"): a graph runs eagerly on tpu because {reason}')

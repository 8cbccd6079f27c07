"""Run a callback once a module has finished executing, without importing it from torch_tpu.

For libraries torch_tpu adapts but must not load on ``import torch`` (seconds each): the callback
runs right after the module's own code, or at once when the module is loaded already. A failing
callback warns and never breaks the import of the library itself.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import warnings
from typing import Callable

_pending: dict[str, list[tuple[Callable[[], None], str]]] = {}


def _run(callback: Callable[[], None], what: str) -> None:
    try:
        callback()
    except Exception as error:
        warnings.warn(f"torch_tpu: {what} not set up: {error}", stacklevel=3)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a watched module, hands back the spec the other finders give,
    with an exec_module that runs the callbacks after the module's code."""

    def find_spec(self, name, path, target=None):
        if name not in _pending:
            return None
        callbacks = _pending.pop(name)
        spec = importlib.util.find_spec(name)  # this finder no longer answers for `name`
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            _pending[name] = callbacks  # nothing to wrap: wait for a later import
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            for callback, what in callbacks:
                _run(callback, what)

        spec.loader.exec_module = exec_module
        return spec


_finder = _Finder()


def when_imported(name: str, callback: Callable[[], None], what: str) -> None:
    """Call ``callback()`` once module ``name`` has been imported; ``what`` names it in the
    warning a failure gives."""
    if name in sys.modules:
        _run(callback, what)
        return
    _pending.setdefault(name, []).append((callback, what))
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)

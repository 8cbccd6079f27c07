"""Registers ``Trainer(accelerator="torch_tpu")`` when PyTorch Lightning is imported.

Lightning has no entry point for third-party accelerators, and importing it from
``import torch_tpu`` would cost every user seconds. So torch_tpu watches the import of
Lightning's trainer packages instead: once ``lightning.pytorch`` (or ``pytorch_lightning``) has
finished executing, ``torch_tpu.integrations.lightning.register_package`` runs for it. A package
imported before torch_tpu (torch's backend autoload off) is registered at once.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import warnings

_WATCHED = ("lightning.pytorch", "pytorch_lightning")


def _register(package: str) -> None:
    try:
        from torch_tpu.integrations import lightning

        lightning.register_package(package)
    except Exception as error:  # never break the import of Lightning itself
        warnings.warn(f"torch_tpu: accelerator 'torch_tpu' not registered with {package}: {error}",
                      stacklevel=2)


class _AfterLightningImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a watched package, hands back the spec the other finders give,
    with an exec_module that registers after the package's own code has run."""

    def __init__(self, pending: set[str]) -> None:
        self.pending = pending

    def find_spec(self, name, path, target=None):
        if name not in self.pending:
            return None
        self.pending.discard(name)
        if not self.pending:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run_package = spec.loader.exec_module

        def exec_module(module):
            run_package(module)
            _register(name)

        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    pending = set()
    for package in _WATCHED:
        if package in sys.modules:
            _register(package)
        else:
            pending.add(package)
    if pending:
        sys.meta_path.insert(0, _AfterLightningImport(pending))

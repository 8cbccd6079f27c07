"""torch_tpu: a PyTorch backend that runs the ``tpu`` device through the OpenXLA PJRT C API.

Importing it (or just ``import torch``, which autoloads it) registers the ``tpu`` device and the
``torch.tpu`` module.
"""

from __future__ import annotations


def _autoload() -> None:
    """Entry point for PyTorch's ``torch.backends`` autoloading: importing registers the device.

    Defined before ``import torch`` because ``import torch_tpu`` imports torch, which autoloads
    this (then partially initialized) module and looks this function up.
    """


import torch  # noqa: E402  (loads libtorch, which _C links against)

from torch_tpu import _C, _formatting, _plugin  # noqa: E402

__all__ = ["runtime_info", "metrics", "metrics_report", "reset_metrics", "cache_info",
           "clear_cache"]


def _configure() -> None:
    choice = _plugin.resolve()
    _C._configure_runtime(choice.path, choice.error, choice.create_options)


def runtime_info() -> dict:
    """Describe the PJRT runtime behind the ``tpu`` device (starting it if needed).

    Returns a dict with ``plugin_path``, ``platform_name``, ``platform_version``,
    ``pjrt_api_version``, ``device_count``, ``device_kinds`` and ``plugin_attributes``.
    """
    return _C._runtime_info()


def metrics() -> dict:
    """Counters of compilation, execution, caches, transfers, buffer donation and CPU fallbacks.

    Keys: ``compile_count``, ``compile_seconds``, ``execute_count``, ``cache_hits_memory``,
    ``cache_hits_shared``, ``cache_hits_remote``, ``cache_misses`` (programs found in no cache
    tier, hence compiled), ``cache_corrupt_entries`` (stored entries rejected as truncated,
    corrupted or foreign), ``transfer_to_device_bytes``, ``transfer_to_host_bytes``,
    ``fallback_ops`` (op name -> calls), ``donated_buffers`` and ``donated_bytes`` (program
    inputs whose device buffer an output reused). A counter appears once something counts it.
    """
    return _C._metrics()


def reset_metrics() -> None:
    """Zero every counter of :func:`metrics`."""
    _C._reset_metrics()


def metrics_report() -> str:
    """:func:`metrics` as a readable table."""
    values = metrics()
    fallbacks = values.pop("fallback_ops")
    width = max(len(name) for name in values)
    lines = [f"{name:<{width}}  {value:.3f}" if isinstance(value, float) else
             f"{name:<{width}}  {value}" for name, value in values.items()]
    lines.append(f"{'fallback_ops':<{width}}  {sum(fallbacks.values())} calls")
    lines += [f"  {op}: {calls}" for op, calls in sorted(fallbacks.items())]
    return "\n".join(lines)


_CACHE_TIERS = ("memory", "shared", "remote")


def cache_info() -> dict:
    """Summary of the three compilation-cache tiers (see docs/cache.md).

    Returns ``{"memory": ..., "shared": ..., "remote": ..., "misses": int}`` where each tier maps
    to ``enabled``, ``location`` (directory or URL; None for memory), ``entries`` and ``bytes``
    (None where a store cannot be listed, as over http), ``hits`` and ``hit_rate`` (hits over all
    lookups since the last :func:`reset_metrics`; None before the first lookup).
    """
    values = metrics()
    lookups = values["cache_misses"] + sum(values[f"cache_hits_{tier}"] for tier in _CACHE_TIERS)
    info = {}
    for tier in _CACHE_TIERS:
        summary = _C._cache_tier_info(tier)
        summary["hits"] = values[f"cache_hits_{tier}"]
        summary["hit_rate"] = summary["hits"] / lookups if lookups else None
        info[tier] = summary
    info["misses"] = values["cache_misses"]
    return info


def clear_cache(tier: str = "all") -> None:
    """Empty a compilation-cache tier: ``"memory"``, ``"shared"``, ``"remote"`` or ``"all"``.

    ``"all"`` empties every tier except an http(s):// store, which cannot be listed (clearing it
    by name raises RuntimeError). Executables that live tensors' programs still use stay loaded.
    """
    if tier == "all":
        remote = _C._cache_tier_info("remote")["location"] or ""
        for name in _CACHE_TIERS:
            if name != "remote" or not remote.startswith(("http://", "https://")):
                _C._clear_cache(name)
        return
    if tier not in _CACHE_TIERS:
        raise ValueError(
            f"clear_cache: unknown tier {tier!r}: expected 'memory', 'shared', 'remote' or 'all'")
    _C._clear_cache(tier)


def _register_device() -> None:
    from torch_tpu import tpu

    torch.utils.rename_privateuse1_backend("tpu")
    torch._register_device_module("tpu", tpu)
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)


_configure()
_register_device()
_formatting.install()


def _register_compile_support_lazily() -> None:
    """torch.compile support (torch_tpu._dynamo) registers as the modules it extends load, so
    importing torch_tpu does not pay for loading Dynamo and Inductor."""
    import importlib.abc
    import importlib.util
    import sys

    def on_dynamo() -> None:
        from torch_tpu import _dynamo

        _dynamo.register()

    def on_inductor_codegen() -> None:
        from torch_tpu import _dynamo

        _dynamo.register_inductor_hook()

    pending = {"torch._dynamo": on_dynamo, "torch._inductor.codegen.common": on_inductor_codegen}
    for name in list(pending):
        if name in sys.modules:
            pending.pop(name)()
    if not pending:
        return

    class _AfterImport(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name not in pending:
                return None
            callback = pending.pop(name)
            if not pending:
                sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            loader_exec = spec.loader.exec_module

            def exec_module(module):
                loader_exec(module)
                try:
                    callback()
                except Exception as error:  # never break the import of torch itself
                    import warnings

                    warnings.warn(f"torch_tpu: torch.compile support not registered: {error}")

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _AfterImport())


_register_compile_support_lazily()

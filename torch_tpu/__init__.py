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

from torch_tpu import _C, _formatting, _plugin, _preload  # noqa: E402
from torch_tpu import _transformer_fast_path  # noqa: E402, F401  (registers its tpu kernels)

__all__ = ["runtime_info", "plugin_error", "metrics", "metrics_report", "reset_metrics",
           "cache_info", "clear_cache", "set_eager_mode", "get_eager_mode", "eager_mode",
           "set_optimizer_step_fusion", "optimizer_step_fusion"]


def _configure() -> None:
    choice = _plugin.resolve()
    _plugin.round_float16_like_pytorch(choice)
    _C._configure_runtime(choice.path, choice.error, choice.create_options)


def runtime_info() -> dict:
    """Describe the PJRT runtime behind the ``tpu`` device (starting it if needed).

    Returns a dict with ``plugin_path``, ``platform_name``, ``platform_version``,
    ``pjrt_api_version``, ``device_count``, ``device_kinds`` and ``plugin_attributes``.
    """
    return _C._runtime_info()


def plugin_error() -> str | None:
    """Why the ``tpu`` device cannot be used, or None when it can (starting the runtime if needed).

    The message of the first failed start: the plugin could not be resolved
    (``TORCH_TPU_PJRT_PLUGIN`` names a missing file or an unknown plugin), loaded (not a PJRT
    plugin, a mismatched API version) or started (no devices), or this process was forked after
    the runtime started. It is what ``torch.tpu.is_available()`` returning False stands for, what
    the one warning of ``torch.tpu.device_count()``/``is_available()`` says, and what every use of
    the device raises.
    """
    return _C._plugin_error()


def metrics() -> dict:
    """Counters of compilation, execution, caches, transfers, buffer donation and CPU fallbacks.

    Keys: ``compile_count``, ``compile_seconds``, ``execute_count``, ``cache_hits_memory``,
    ``cache_hits_shared``, ``cache_hits_remote``, ``cache_misses`` (programs found in no cache
    tier, hence compiled), ``cache_corrupt_entries`` (stored entries rejected as truncated,
    corrupted or foreign), ``cache_preloaded`` (executables loaded ahead of their
    first use by warm-start preloading), ``transfer_to_device_bytes``, ``transfer_to_host_bytes``,
    ``fallback_ops`` (op name -> calls), ``donated_buffers`` and ``donated_bytes`` (program
    inputs whose device buffer an output reused), ``fused_graphs`` and ``fused_ops`` (pending
    graphs the defer-and-fuse mode ran as one program each, and the ops they held),
    ``fused_programs`` (those graphs whose program was built, not found from an earlier graph),
    ``fused_bucketed_ops`` (ops recorded in their growing-shape bucket's form),
    ``fused_replays`` (graphs that followed a step seen before to its end and ran its program
    without a lookup; replays that ended early are counted by kind in the reasons counter
    ``fused_replay_divergences``: ``op``, ``storages``, ``cut``, ``outputs``, ``program``),
    ``fuse_cuts`` (why those graphs ran: reason -> count), ``device_collectives`` (tpu_dist
    collectives that ran as device programs instead of through the host transport). A counter
    appears once something counts it.

    Counters that say why (dicts reason -> count): ``growing_shapes_disabled`` (op families of
    growing sizes that keep one program per length because their padded program could not be
    built, ``"<op>: <error>"``, once per family), ``contiguous_layout_fallbacks`` (results laid
    out contiguously because the op's meta kernel gave no layout, where CPU's strides may
    differ, ``"<op>: <error>"``, once per program built), ``compiled_graphs_eager``
    (``torch.compile(backend="tpu")`` graphs that run eagerly op by op instead of as one program,
    reason -> graphs), ``loaded_executable_cap_lowered`` (times the cap on loaded programs was
    lowered because the process's memory mappings neared ``vm.max_map_count``, docs/cache.md).
    """
    return _C._metrics()


def reset_metrics() -> None:
    """Zero every counter of :func:`metrics`."""
    _C._reset_metrics()


def metrics_report() -> str:
    """:func:`metrics` as a readable table."""
    values = metrics()
    fallbacks = values.pop("fallback_ops")
    # Counters with reasons (fuse_cuts, compiled_graphs_eager, ...): a total, then each reason.
    reasons = {name: values.pop(name) for name in list(values) if isinstance(values[name], dict)}
    width = max(len(name) for name in [*values, "fallback_ops", *reasons])
    lines = [f"{name:<{width}}  {value:.3f}" if isinstance(value, float) else
             f"{name:<{width}}  {value}" for name, value in values.items()]
    lines.append(f"{'fallback_ops':<{width}}  {sum(fallbacks.values())} calls")
    lines += [f"  {op}: {calls}" for op, calls in sorted(fallbacks.items())]
    for name, counts in reasons.items():
        lines.append(f"{name:<{width}}  {sum(counts.values())}")
        lines += [f"  {reason}: {count}" for reason, count in sorted(counts.items())]
    return "\n".join(lines)


def set_eager_mode(mode: str) -> None:
    """Choose how eager ops run: ``"strict"`` (asynchronous, one program per op; the default),
    ``"debug"`` (wait and check after every op, as ``TORCH_TPU_LAUNCH_BLOCKING=1``) or
    ``"defer_and_fuse"`` (record ops and run them as one program at the next materialization
    point, as ``TORCH_TPU_DEFER_AND_FUSE=1``). Leaving defer_and_fuse runs the pending graph."""
    _C._set_eager_mode(mode)


def get_eager_mode() -> str:
    """The current eager mode: ``"strict"``, ``"debug"`` or ``"defer_and_fuse"``."""
    return _C._eager_mode()


class eager_mode:  # noqa: N801  (used like a function: ``with torch_tpu.eager_mode(...)``)
    """Context manager running its block in eager mode ``mode`` (see :func:`set_eager_mode`),
    restoring the previous mode on exit."""

    def __init__(self, mode: str) -> None:
        self._mode = mode
        self._previous: list[str] = []

    def __enter__(self) -> "eager_mode":
        self._previous.append(get_eager_mode())
        set_eager_mode(self._mode)
        return self

    def __exit__(self, *exc_info) -> None:
        set_eager_mode(self._previous.pop())


def _run_pending_graph_at_exit() -> None:
    # Work recorded in defer_and_fuse mode runs before the process ends, as it would have in
    # strict mode. Its failure can no longer raise anywhere useful, so it is a warning (on
    # stderr) naming the error, not silence.
    try:
        if _C._fuse_flush("exit"):
            _C._synchronize()
    except Exception as error:  # noqa: BLE001  (any failure is reported the same way)
        import warnings

        warnings.warn(f"torch_tpu: the pending defer_and_fuse graph run at exit failed: "
                      f"{type(error).__name__}: {error}", RuntimeWarning, stacklevel=1)


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
    if torch.distributed.is_available():
        from torch_tpu import distributed

        distributed.register()


_configure()
_register_device()
_formatting.install()
# Registered first so that it runs last at exit, after the pending graph's programs.
_preload.start()

import atexit  # noqa: E402

atexit.register(_run_pending_graph_at_exit)


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

# Strict mode runs each torch.optim step on tpu parameters as one fused program (global step hooks).
from torch_tpu._optimizer_steps import optimizer_step_fusion, set_optimizer_step_fusion  # noqa: E402

# Hugging Face accelerate (and transformers.Trainer): tpu_dist ranks under torchrun and
# `accelerate launch --multi_gpu`, set up once accelerate.state has loaded (docs/ecosystem.md).
from torch_tpu import _after_import  # noqa: E402


def _adapt_accelerate() -> None:
    from torch_tpu.integrations import accelerate  # noqa: F401  (wraps PartialState on import)


_after_import.when_imported("accelerate.state", _adapt_accelerate,
                            "multi-process accelerate on tpu (torch_tpu.integrations.accelerate)")


def _register_lightning_when_imported() -> None:
    """Trainer(accelerator="torch_tpu") once PyTorch Lightning is imported (docs/ecosystem.md)."""
    for package in ("lightning.pytorch", "pytorch_lightning"):
        def register(package: str = package) -> None:
            from torch_tpu.integrations import lightning

            lightning.register_package(package)

        _after_import.when_imported(
            package, register,
            f"Trainer(accelerator='torch_tpu') for {package} (torch_tpu.integrations.lightning)")


_register_lightning_when_imported()

"""Warm-start preloading (docs/cache.md): a run that used programs before starts loading them at
import, in the background, from the compilation cache.

A run is named by its interpreter, working directory, full command line and the environment
variables that shape the PJRT runtime (plugin choice, device counts, compiler flags, ranks). The
name is never stored: manifests are keyed by its SHA-256 (a command line may carry an API key).
The cache's own locations and secrets are left out, so one run warm from the shared tier and another warm from
the persistent tier are the same run. ``TORCH_TPU_PRELOAD=0`` turns preloading (and recording)
off.
"""

from __future__ import annotations

import atexit
import os
import sys

from torch_tpu import _C, _plugin

ENV_PRELOAD = "TORCH_TPU_PRELOAD"
_RUNTIME_PREFIXES = ("TORCH_TPU_", "XLA_", "LIBTPU_", "TPU_")
_RUNTIME_NAMES = {"CUDA_VISIBLE_DEVICES", "LOCAL_WORLD_SIZE", "LOCAL_RANK", "RANK", "WORLD_SIZE"}
# Where programs are cached, not what they are or how the runtime starts.
# Secrets (the signing key, the store's authorization) are left out too: the name is stored only
# as a digest (cache/cache_entry.h), but a digest of a short secret is no place for it either.
_CACHE_SETTINGS = {ENV_PRELOAD, "TORCH_TPU_SHARED_CACHE_DIR", "TORCH_TPU_SHARED_CACHE_MAX_BYTES",
                   "TORCH_TPU_CACHE_DIR", "TORCH_TPU_CACHE_TIMEOUT",
                   "TORCH_TPU_CACHE_MEMORY_MAX_ENTRIES", "TORCH_TPU_CACHE_MEMORY_MAX_BYTES",
                   "TORCH_TPU_CACHE_MAX_ENTRY_BYTES", "TORCH_TPU_CACHE_KEY",
                   "TORCH_TPU_CACHE_KEY_FILE", "TORCH_TPU_CACHE_AUTHORIZATION",
                   "TORCH_TPU_CACHE_AUTHORIZATION_FILE"}

_environment_at_import: list[str] = []


def _runtime_environment() -> list[str]:
    return sorted(f"{name}={value}" for name, value in os.environ.items()
                  if (name.startswith(_RUNTIME_PREFIXES) or name in _RUNTIME_NAMES)
                  and name not in _CACHE_SETTINGS)


def run_name() -> str:
    """The name this run's manifest is stored under."""
    return "\n".join([sys.executable, os.getcwd(), *sys.orig_argv, "", *_environment_at_import])


def _joins_other_processes() -> bool:
    """Whether this is one rank of several on a plugin whose client may span processes (TPU,
    GPU): its client must be created once tpu_dist's group has formed (docs/distributed.md), not
    by the preloader at import."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        world = 1
    return world > 1 and _plugin.resolve().name != "cpu"


def start() -> None:
    """Called at import: preload what the previous run of this name used; record this run's."""
    if os.environ.get(ENV_PRELOAD, "1").strip() == "0" or _joins_other_processes():
        return
    _environment_at_import[:] = _runtime_environment()
    _C._start_preloading(run_name())
    atexit.register(_finish)


def _finish() -> None:
    # A run that changed the runtime's environment after import would, preloading at import next
    # time, start the runtime differently from how this run did: it records no manifest.
    _C._finish_preloading(_runtime_environment() == _environment_at_import)

"""Finding the PJRT plugin that backs the ``tpu`` device.

``TORCH_TPU_PJRT_PLUGIN`` is a plugin name (``cpu``, ``tpu``, ``cuda``) or a path to a ``.so``.
Without it: libtpu when the ``libtpu`` package is installed and a TPU is visible, else the XLA
CPU plugin.
"""

from __future__ import annotations

import glob
import importlib.util
import os
from dataclasses import dataclass, field

ENV_PLUGIN = "TORCH_TPU_PJRT_PLUGIN"
ENV_CPU_DEVICES = "TORCH_TPU_NUM_CPU_DEVICES"


@dataclass(frozen=True)
class _KnownPlugin:
    package: str  # importable module that carries the library
    library: str  # file name inside that module's directory
    pip_name: str  # what to pip install


_KNOWN = {
    "cpu": _KnownPlugin("xla_plugins.xla_cpu_pjrt", "xla_cpu_pjrt.so", "xla-cpu-pjrt==0.0.1"),
    "tpu": _KnownPlugin("libtpu", "libtpu.so", "libtpu"),
    "cuda": _KnownPlugin("jax_plugins.xla_cuda13", "xla_cuda_plugin.so", "jax-cuda13-pjrt"),
}


@dataclass
class PluginChoice:
    """The outcome of resolution: a path, or the reason there is none."""

    name: str
    path: str = ""
    error: str = ""
    create_options: dict = field(default_factory=dict)


def _package_dir(module: str) -> str | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    return os.path.dirname(spec.origin) if spec.origin else None


def _tpu_visible() -> bool:
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def _cpu_device_count() -> int:
    # Under torchrun each process drives tpu:LOCAL_RANK, as with CUDA, so by default the CPU
    # plugin gives every process one device per local rank (they are cheap: host threads).
    raw = os.environ.get(ENV_CPU_DEVICES, os.environ.get("LOCAL_WORLD_SIZE", "1"))
    try:
        count = int(raw)
    except ValueError:
        count = 0
    if count < 1:
        raise RuntimeError(f"{ENV_CPU_DEVICES}={raw!r} must be a positive integer")
    return count


def round_float16_like_pytorch(choice: PluginChoice) -> None:
    """On a host CPU with native float16 arithmetic (AVX512-FP16), XLA's CPU compiler fuses a
    float16 multiply and add into one FMA (one rounding) where PyTorch rounds after each op, so
    float16 results would differ from PyTorch CPU's by an ulp depending on the machine. The CPU
    plugin's code is capped at AVX2 there (XLA_FLAGS' --xla_cpu_max_isa; a value the user set
    is kept), which computes float16 through float32 with a rounding per op, as before."""
    if choice.name != "cpu" or choice.error or "xla_cpu_max_isa" in os.environ.get("XLA_FLAGS", ""):
        return
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            native_float16 = " avx512_fp16" in cpuinfo.read(1 << 16)
    except OSError:
        return
    if native_float16:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   " --xla_cpu_max_isa=AVX2").strip()


def resolve() -> PluginChoice:
    """Resolve the plugin from the environment without loading it."""
    spec = os.environ.get(ENV_PLUGIN, "").strip()
    if spec and (os.sep in spec or spec.endswith(".so")):
        path = os.path.abspath(os.path.expanduser(spec))
        if not os.path.isfile(path):
            return PluginChoice(spec, error=f"{ENV_PLUGIN}={spec}: no such plugin file ({path})")
        return PluginChoice(os.path.basename(path), path=path)
    if spec:
        name = spec.lower()
        if name not in _KNOWN:
            return PluginChoice(
                spec,
                error=f"{ENV_PLUGIN}={spec!r} is not a known plugin; use one of "
                f"{', '.join(sorted(_KNOWN))} or a path to a PJRT plugin .so",
            )
    else:
        name = "tpu" if _package_dir("libtpu") and _tpu_visible() else "cpu"
    known = _KNOWN[name]
    directory = _package_dir(known.package)
    path = os.path.join(directory, known.library) if directory else ""
    how = f"{ENV_PLUGIN}={spec}" if spec else "the default"
    if not directory or not os.path.isfile(path):
        tried = path or f"the Python package {known.package}"
        return PluginChoice(
            name,
            error=f"the {name} PJRT plugin ({how}) was not found at {tried}; "
            f"install it with `pip install {known.pip_name}` or set {ENV_PLUGIN} to a plugin path",
        )
    try:
        options = {"cpu_device_count": _cpu_device_count()} if name == "cpu" else {}
    except RuntimeError as error:  # reported on first use; `import torch` must keep working
        return PluginChoice(name, error=str(error))
    return PluginChoice(name, path=path, create_options=options)

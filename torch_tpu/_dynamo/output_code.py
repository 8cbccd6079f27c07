"""Compiled graphs as AOTAutograd's cache keeps them, so a warm process skips AOTAutograd.

AOTAutograd caches the result of tracing a Dynamo graph (forward and backward graphs, runtime
metadata, its wrappers) in PyTorch's AOTAutograd cache, next to Inductor's FX graph cache
(`torch._inductor` cache directory). A backend's compiled graphs enter that cache when they are
`OutputCode` objects that serialize themselves; on a hit, AOTAutograd rebuilds its runtime
wrappers and calls each graph's `post_compile` instead of tracing. Here a graph serializes its FX
graph with the fake values its nodes carry, and `post_compile` translates it again: the native
program itself comes from the executable cache tiers (docs/cache.md), so a hit compiles nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pathlib
import stat
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.fx
from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCacheDetails
from torch._inductor.output_code import OutputCode

from torch_tpu._dynamo.messages import _warn_once

_backend_key: str | None = None


def backend_cache_key(decompositions: dict) -> str:
    """What besides the Dynamo graph decides AOTAutograd's result for this backend: the native
    module's build (its lowerings decide which ops decompose), the decompositions, the partition
    and the backend's own Python. Added to AOTAutograd's key, so that Inductor's entries and
    those of another torch_tpu build are never taken for this one's."""
    global _backend_key
    if _backend_key is None:
        from torch_tpu import _C

        # The native module's build: its lowerings decide the decompositions.
        native = pathlib.Path(_C.__file__).stat()
        digest = hashlib.sha256(f"{native.st_size} {native.st_mtime_ns}\n".encode())
        for name in sorted(str(op) for op in decompositions):
            digest.update(name.encode() + b"\n")
        package = pathlib.Path(__file__).resolve().parent
        sources = sorted(package.glob("*.py")) + [package.parent / "_transformer_fast_path.py"]
        for source in sources:
            digest.update(source.name.encode() + b"\n" + source.read_bytes())
        _backend_key = "torch_tpu:" + digest.hexdigest()[:32]
    return _backend_key


class TpuAOTCacheDetails(AOTAutogradCacheDetails):
    """AOTAutograd's cache-key details without the parts that only decide what Inductor makes of
    AOTAutograd's graphs (its custom passes, its device backends, a hash of torch's sources):
    computing them imports Inductor's codegen backends and hashes torch's Python files, 0.8 s of
    each process's first compiled graph, most of what a cache hit saves. Inductor's config stays
    (the min-cut partition reads some of its options)."""

    def _init_fx_graph_hash_details(self, gm, example_inputs, fx_config) -> None:
        self.gm = gm
        self.example_inputs = list(example_inputs)
        self.fx_kwargs = {k: v for k, v in sorted(fx_config.items())
                          if k not in ("graph_id", "compile_region_name")}
        self.cache_key_tag = torch.compiler.config.cache_key_tag
        self.inductor_config = torch._inductor.config.save_config_portable(
            ignore_private_configs=False, readonly_values=True)
        self.torch_version = torch.__version__
        self.default_dtype = torch.get_default_dtype()
        self.deterministic_algorithms_settings = (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.utils.deterministic.fill_uninitialized_memory)


def _autograd_cache_key(mod, example_inputs, config, compiler_config_extra=None):
    """`autograd_cache.autograd_cache_key` with this backend's details (TpuAOTCacheDetails)."""
    from torch._functorch._aot_autograd import autograd_cache

    gm = mod.gm if isinstance(mod, torch._dynamo.utils.GmWrapper) else mod
    with autograd_cache.sanitize_gm_for_cache(gm):
        autograd_cache.check_cacheable(gm)
        fx_config = autograd_cache.create_fx_config(compiler_config_extra)
        details = TpuAOTCacheDetails(gm, example_inputs, config, fx_config)
        pickler = autograd_cache.AOTAutogradCachePickler(gm)
        return autograd_cache.AOTAUTOGRAD_CACHE_PREFIX + pickler.get_hash(details), []


def _private_directory(path: str) -> bool:
    """Whether `path` is a directory (not a link) of this user that nobody else can write: the
    cache's entries are pickles, and loading one runs what it names (docs/cache.md)."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and
            not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _cache_directory_is_private() -> bool:
    from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    root = cache_dir()
    entries = AOTAutogradCache._get_tmp_dir()
    if _private_directory(root) and not os.path.lexists(entries):
        with contextlib.suppress(FileExistsError):
            os.mkdir(entries, 0o700)
    if _private_directory(root) and _private_directory(entries):
        return True
    _warn_once(f'torch.compile(backend="tpu"): AOTAutograd\'s cache is not used: {entries} (or '
               f"{root}) is not a directory of this user that only it can write, and loading "
               "an entry runs code; TORCHINDUCTOR_CACHE_DIR names another")
    return False


@contextlib.contextmanager
def aot_cache_scope(decompositions: dict) -> Iterator[None]:
    """AOTAutograd's cache for one call of the backend, where PyTorch's configuration enables it
    (`torch._functorch.config.enable_autograd_cache`, on by default; off under
    `torch.compiler.config.force_disable_caches`):
    - entries bundle their graphs (`bundled_autograd_cache`, as `torch.compile`'s precompile);
    - the backward is compiled with the forward, so the entry is written before the call
      returns (a backward compiled lazily would be written outside this scope, unbundled);
    - the key is this backend's (`_autograd_cache_key`, tagged with `backend_cache_key`).
    Dynamo compiles one frame at a time (its compile lock), so no other compile sees the key.
    The local cache is used only in a private directory (_cache_directory_is_private)."""
    from torch._functorch import config as functorch_config
    from torch._functorch._aot_autograd import autograd_cache

    if not (autograd_cache.should_use_local_autograd_cache() or
            autograd_cache.should_use_remote_autograd_cache()):
        yield
        return
    if autograd_cache.should_use_local_autograd_cache() and not _cache_directory_is_private():
        with functorch_config.patch(enable_autograd_cache=False):
            yield
        return
    tag = torch.compiler.config.cache_key_tag
    key = backend_cache_key(decompositions)
    original_key = autograd_cache.autograd_cache_key
    autograd_cache.autograd_cache_key = _autograd_cache_key
    try:
        with functorch_config.patch(bundled_autograd_cache=True,
                                    force_non_lazy_backward_lowering=True), \
                torch.compiler.config.patch(cache_key_tag=f"{tag}|{key}" if tag else key):
            yield
    finally:
        autograd_cache.autograd_cache_key = original_key


class TpuGraphCode(OutputCode):
    """One forward or backward graph compiled by the "tpu" backend, as AOTAutograd calls it
    (boxed: a list of inputs) and as its cache stores it (the FX graph with its nodes' fake
    values; the native program is translated again after loading)."""

    def __init__(self, gm: torch.fx.GraphModule, compile_graph: Callable,
                 example_inputs: Sequence[Any]):
        super().__init__()
        # An attribute of the instance: wrappers that copy a callable's __dict__ (functools.wraps,
        # as torch._dynamo.disable around a backward) keep it.
        self._boxed_call = True
        self._gm: torch.fx.GraphModule | None = gm
        self._compile_graph = compile_graph
        self._serialized: bytes | None = None
        self._constant_devices: dict[str, str] = {}
        self._run: Callable | None = compile_graph(gm, example_inputs)

    def __call__(self, inputs: list) -> Any:
        return self._run(inputs)

    def prepare_for_serialization(self) -> None:
        # A shallow copy of the live object (AOTAutograd's pre_save): only this copy is stripped.
        from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        from torch.fx._graph_pickler import GraphPickler, Options

        gm = self._gm
        # Graph constants on the device (masks a model builds on tpu) are pickled as host
        # tensors, and go back to their device when the entry is loaded. The live module is
        # shared with the running graph: its buffers are swapped back at once.
        on_device = {name: buffer for name, buffer in gm._buffers.items()
                     if isinstance(buffer, torch.Tensor) and buffer.device.type != "cpu"}
        self._constant_devices = {name: str(buffer.device) for name, buffer in on_device.items()}
        try:
            with unset_fake_temporarily():  # AOTAutograd saves under its fake mode
                for name, buffer in on_device.items():
                    gm._buffers[name] = buffer.cpu()
            # Of the nodes' metadata the translation reads only the fake values: the rest (stack
            # traces, provenance) would take most of the time of loading.
            self._serialized = GraphPickler.dumps(
                gm, Options(ops_filter=None, node_metadata_key_filter=lambda key: key == "val"))
        except Exception as error:  # noqa: BLE001 - whatever cannot be pickled: not cached
            # A bypass, which AOTAutograd logs at info level, not a failure it warns about.
            raise BypassAOTAutogradCache(f"a tpu graph cannot be serialized: {error}") from error
        finally:
            gm._buffers.update(on_device)
        self._gm = None
        self._run = None

    def post_compile(self, example_inputs: Sequence[Any], constants: Any,
                     graph_kwargs: Any) -> None:
        if self._run is not None:
            return
        from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily
        from torch.fx._graph_pickler import GraphPickler

        fake_mode = FakeTensorMode()
        self._gm = GraphPickler.loads(self._serialized, fake_mode)
        with unset_fake_temporarily():
            for name, device in self._constant_devices.items():
                self._gm._buffers[name] = self._gm._buffers[name].to(device)
        self._gm.recompile()  # the unpickled module has its graph, not yet its code
        self._run = self._compile_graph(self._gm, example_inputs)

    def set_triton_bundle(self, triton_bundle: Any) -> None:
        pass  # no Triton kernels

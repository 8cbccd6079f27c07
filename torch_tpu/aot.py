"""Ahead-of-time compilation for Cloud TPU targets on a machine without a TPU.

libtpu (PyPI ``libtpu``) describes a TPU topology by name (``"v5e:2x2"``) and compiles for it
with no device attached (PJRT ``PJRT_TopologyDescription_Create`` + ``PJRT_Compile`` without a
client). :func:`compile_for` runs a function once on the local ``tpu`` device under
``torch.compile(backend="tpu")``, records every program it ran (the compiled forward and
backward graphs, plus eager ops around graph breaks) and compiles each of them for the target::

    result = torch_tpu.aot.compile_for("v5e", model, (x,))
    print(result.hbm_bytes)          # the compiler's own memory accounting, largest program
    result.save("out/")              # serialized TPU executables, loadable by libtpu

The programs are exactly the ones the local device compiled (same lowering, same compile
options), so a program accepted here is the program a TPU VM will compile.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch

from torch_tpu import _C, _plugin, _signals

__all__ = ["TARGETS", "CompiledProgram", "AotResult", "topology", "compile_module",
           "capture_modules", "trace_programs", "compile_for", "libtpu_version"]

#: Short target names -> the smallest libtpu topology of that generation (one chip: our programs
#: are single-device). libtpu spells v7 "tpu7x"; any full topology name is accepted as well.
TARGETS = {
    "v4": "v4:1x1x1",
    "v5e": "v5e:1x1",
    "v5p": "v5p:1x1x1",
    "v6e": "v6e:1x1",
    "v7x": "tpu7x:1x1x1",
}


def _libtpu_path() -> str:
    path = os.path.join(_plugin._package_dir("libtpu") or "", "libtpu.so")
    if not os.path.isfile(path):
        raise RuntimeError("ahead-of-time compilation for TPU needs libtpu: pip install libtpu")
    return path


def libtpu_version() -> str:
    from importlib import metadata

    return metadata.version("libtpu")


def _prepare_environment() -> None:
    """libtpu asks the GCE metadata server what TPU this VM has (about two minutes of retries
    where there is none) and takes a host-wide lock (/tmp/libtpu_lockfile) in
    PJRT_Plugin_Initialize, so a second process fails with "Internal error when accessing libtpu
    multi-process lockfile". Without a TPU there is nothing to ask about and no chip to guard, so
    both are skipped; on a TPU VM libtpu's defaults stand. TPU_WORKER_HOSTNAMES only quiets an
    error libtpu logs when it finds no workers."""
    if not _plugin._tpu_visible():
        os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
        os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")


@functools.lru_cache(maxsize=None)
def topology(target: str) -> "_C._PjrtTopology":
    """The libtpu topology for ``target`` (a key of :data:`TARGETS` or a libtpu topology name
    such as ``"v6e:2x2"``). Raises the plugin's error for a name it does not know."""
    _prepare_environment()
    described = _C._PjrtTopology(_libtpu_path(), TARGETS.get(target, target))
    _signals.adopt_ignored_signals()  # libtpu ignores SIGPROF from here on (torch_tpu/_signals.py)
    return described


@dataclass
class CompiledProgram:
    """One program compiled for a target: its serialized executable and what the compiler
    reports about it."""

    description: str
    serialized: bytes
    memory: dict  # bytes: argument, output, alias, temp, generated_code, peak
    cost: dict  # e.g. "flops", "bytes accessed"
    phase: str = ""

    @property
    def hbm_bytes(self) -> int:
        """Device memory the program needs while it runs: the compiler's peak when it reports
        one, else arguments + outputs - donated + temporaries; plus its code."""
        m = self.memory
        live = m["peak_bytes"] or (m["argument_bytes"] + m["output_bytes"] - m["alias_bytes"] +
                                   m["temp_bytes"])
        return live + m["generated_code_bytes"]


def compile_module(target: str, module_text: str, description: str = "") -> CompiledProgram:
    """Compiles one StableHLO module for ``target``; raises ``torch_tpu._C.PjrtError`` with the
    TPU compiler's diagnostic when it rejects the module."""
    compiled = topology(target).compile(module_text)
    return CompiledProgram(description or compiled["name"], compiled["serialized"],
                           compiled["memory"], compiled["cost"])


@contextlib.contextmanager
def capture_modules() -> Iterator[list]:
    """Collects ``(description, StableHLO text)`` of every program that runs on tpu inside the
    block (each distinct module once); the list is filled when the block exits."""
    captured: list = []
    _C._begin_module_capture()
    try:
        yield captured
    finally:
        captured.extend(_C._end_module_capture())


@dataclass
class AotResult:
    target: str
    topology: str
    platform_version: str
    device_kind: str
    programs: list = field(default_factory=list)

    @property
    def hbm_bytes(self) -> int:
        """The largest program's device memory: what one step needs on one chip."""
        return max((p.hbm_bytes for p in self.programs), default=0)

    def save(self, directory: str | os.PathLike) -> Path:
        """Writes each serialized executable and an index (``programs.json``) to ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        index = {"target": self.target, "topology": self.topology,
                 "platform_version": self.platform_version, "device_kind": self.device_kind,
                 "programs": []}
        for n, program in enumerate(self.programs):
            name = f"program_{n}.{program.phase or 'run'}.pjrt"
            (directory / name).write_bytes(program.serialized)
            index["programs"].append({"file": name, "description": program.description,
                                      "phase": program.phase, "memory": program.memory,
                                      "cost": program.cost})
        (directory / "programs.json").write_text(json.dumps(index, indent=1))
        return directory


def _to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to(device).requires_grad_(value.requires_grad)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    return value


def trace_programs(fn_or_module: Callable, example_inputs: Sequence,
                   backward: bool | None = None) -> list[tuple[str, str, str]]:
    """Runs ``fn_or_module(*example_inputs)`` once on the local tpu device compiled with
    ``torch.compile(backend="tpu")`` (and its backward when anything requires grad, or when
    ``backward`` is True) and returns ``(phase, description, StableHLO)`` of every program that
    ran. A module is copied first: the caller's stays where it is."""
    device = torch.device("tpu")
    fn = fn_or_module
    if isinstance(fn_or_module, torch.nn.Module):
        fn = copy.deepcopy(fn_or_module).to(device)
    inputs = _to_device(tuple(example_inputs), device)
    compiled = torch.compile(fn, backend="tpu")
    with capture_modules() as forward:
        outputs = compiled(*inputs)
    leaves = [t for t in torch.utils._pytree.tree_leaves(outputs)
              if isinstance(t, torch.Tensor) and t.requires_grad]
    with_grad = [t for t in torch.utils._pytree.tree_leaves(inputs)
                 if isinstance(t, torch.Tensor) and t.requires_grad]
    if isinstance(fn, torch.nn.Module):
        with_grad += [p for p in fn.parameters() if p.requires_grad]
    if backward is None:
        backward = bool(leaves)
    if backward and not leaves:
        raise ValueError("compile_for(backward=True): no output requires grad")
    programs = [("forward", d, t) for d, t in forward]
    if backward:
        cotangents = [torch.ones_like(t) for t in leaves]
        with capture_modules() as captured:
            if with_grad:
                # grad() rather than backward(): no .grad accumulation programs in the capture.
                torch.autograd.grad(leaves, with_grad, cotangents, allow_unused=True)
            else:  # what requires grad is captured by a closure: only backward() reaches it
                torch.autograd.backward(leaves, cotangents)
        programs += [("backward", d, t) for d, t in captured]
    torch.tpu.synchronize()
    return programs


def compile_for(target: str | Sequence[str], fn_or_module: Callable, example_inputs: Sequence,
                backward: bool | None = None) -> AotResult | dict[str, AotResult]:
    """Lowers ``fn_or_module`` the way ``torch.compile(backend="tpu")`` does and compiles every
    resulting program for the TPU ``target`` (see :data:`TARGETS`) without a TPU. Given several
    targets, traces once and returns ``{target: AotResult}``. Raises ``torch_tpu._C.PjrtError``
    naming the target and the program the TPU compiler rejects."""
    targets = [target] if isinstance(target, str) else list(target)
    described = {t: topology(t) for t in targets}  # unknown names fail before any tracing
    programs = trace_programs(fn_or_module, example_inputs, backward)
    results = {}
    for name, topo in described.items():
        result = AotResult(name, topo.name, topo.platform_version,
                           topo.device_kinds[0] if topo.device_kinds else "")
        for phase, description, text in programs:
            try:
                program = compile_module(name, text, description)
            except _C.PjrtError as error:
                raise _C.PjrtError(f"{name}: {description}: {error}") from error
            program.phase = phase
            result.programs.append(program)
        results[name] = result
    return results[targets[0]] if isinstance(target, str) else results

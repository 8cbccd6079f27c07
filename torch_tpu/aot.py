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

:func:`compile_training_step` compiles a whole training step (forward and loss, backward, the
optimizer's update) and says whether it fits in the target's HBM::

    step = torch_tpu.aot.compile_training_step("v5e", model, (x,), torch.optim.AdamW,
                                               loss_fn=F.cross_entropy, targets=(y,))
    print(step.summary())            # "v5e: step needs ... GiB of 15.75 GiB HBM (fits)"

``docs/tpu.md`` ("Will it fit?") gives the formula.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch

from torch_tpu import _C, _plugin, _signals

__all__ = ["TARGETS", "SPEC_HBM_BYTES", "CompiledProgram", "AotResult", "topology",
           "hbm_capacity", "compile_module", "capture_modules", "trace_programs", "compile_for",
           "TracedStep", "trace_training_step", "compile_training_step", "libtpu_version",
           "PLACEHOLDER_MESSAGE"]

#: Short target names -> the smallest libtpu topology of that generation (one chip: our programs
#: are single-device). libtpu spells v7 "tpu7x"; any full topology name is accepted as well.
TARGETS = {
    "v4": "v4:1x1x1",
    "v5e": "v5e:1x1",
    "v5p": "v5p:1x1x1",
    "v6e": "v6e:1x1",
    "v7x": "tpu7x:1x1x1",
}

_GiB = 1 << 30

#: HBM of one device of each target, from the chips' public specifications: v4 32 GiB, v5e
#: 16 GiB, v5p 95 GiB, v6e 32 GiB and v7x 192 GiB per chip, where libtpu's one-chip v4 and v7x
#: topologies hold two devices (one per TensorCore) that each address half. Only a fallback:
#: :func:`hbm_capacity` reads the number the TPU compiler itself works with.
SPEC_HBM_BYTES = {
    "v4": 16 * _GiB,
    "v5e": 16 * _GiB,
    "v5p": 95 * _GiB,
    "v6e": 32 * _GiB,
    "v7x": 96 * _GiB,
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


# A program no TPU holds: one f32[2^36] argument (256 GiB) and a result as large. The TPU compiler
# rejects it and says how much HBM it had ("exceeds available HBM (15.75G)").
_HBM_PROBE_MODULE = """module @torch_tpu_hbm_probe {
  func.func public @main(%arg0: tensor<68719476736xf32>) -> tensor<68719476736xf32> {
    %0 = stablehlo.negate %arg0 : tensor<68719476736xf32>
    return %0 : tensor<68719476736xf32>
  }
}"""
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _compiler_bytes(text: str, pattern: str) -> int | None:
    """Bytes the TPU compiler printed after ``pattern`` in ``text`` ("(15.75G)": binary units,
    two decimals), or None."""
    found = re.search(pattern + r"\s*\(([\d.]+)\s*([KMGT]?)i?B?\)", text)
    return int(float(found.group(1)) * _UNITS[found.group(2)]) if found else None


@functools.lru_cache(maxsize=None)
def hbm_capacity(target: str) -> int:
    """Bytes of HBM one device of ``target`` offers a program.

    The source is the TPU compiler itself: libtpu's topology description carries no memory size
    (PJRT device descriptions of a deviceless topology have no memory statistics), but its
    compiler checks every program against the device's available HBM and names that number when
    a program does not fit. Compiling a program larger than any TPU (256 GiB, a fraction of a
    second) reads it: v5e 15.75 GiB, v6e 31.24 GiB, v5p 95.73 GiB, v4 15.25 GiB and v7x
    94.74 GiB per device with libtpu 0.0.52, i.e. the chip's HBM less what libtpu keeps for
    itself. The figure is printed with two decimals (within 5 MiB). :data:`SPEC_HBM_BYTES` is
    used when the compiler's message does not say."""
    try:
        compile_module(target, _HBM_PROBE_MODULE, "hbm probe")
    except _C.PjrtError as error:
        available = _compiler_bytes(str(error), "available HBM")
        if available:
            return available
    fallback = SPEC_HBM_BYTES.get(target)
    if fallback is None:
        raise ValueError(f"the HBM of {target!r} is not known: the TPU compiler did not report it "
                         f"and it is none of {sorted(SPEC_HBM_BYTES)}")
    return fallback


# Bytes per element of StableHLO element types (torch stores i1 as one byte).
_ELEMENT_BYTES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "i16": 2, "i8": 1,
                  "i1": 1, "ui64": 8, "ui32": 4, "ui16": 2, "ui8": 1, "complex<f32>": 8,
                  "complex<f64>": 16}
_TENSOR_TYPE = r"tensor<((?:[^<>]|<[^<>]*>)*)>"


def _tensor_type_bytes(inner: str) -> int:
    """Dense bytes of ``tensor<inner>`` ("4x8xf32", "f64", "2xcomplex<f32>")."""
    dims, element = re.fullmatch(r"((?:\d+x)*)(.+)", inner).groups()
    count = 1
    for dim in dims.split("x")[:-1]:
        count *= int(dim)
    return count * _ELEMENT_BYTES.get(element, 1 if element.startswith("f8") else 4)


def _signature_bytes(module_text: str) -> dict:
    """Dense bytes of the arguments, results and donated (aliased) arguments of ``@main``: what
    the tensors a program reads and writes hold on the local device, before TPU tiling.
    ``scalar_argument_bytes``: the rank-0 arguments among them, which are mostly host scalars
    (learning rates, step counts) passed as runtime arguments rather than tensors."""
    header = re.search(r"func\.func public @main\((.*?)\)\s*->\s*(.*?)\s*\{\s*$", module_text,
                       re.MULTILINE)
    if header is None:
        return {"argument_bytes": 0, "output_bytes": 0, "alias_bytes": 0,
                "scalar_argument_bytes": 0}
    arguments = re.findall(r"%arg\d+: " + _TENSOR_TYPE + r"( \{[^}]*\})?", header.group(1))
    return {"argument_bytes": sum(_tensor_type_bytes(t) for t, _ in arguments),
            "scalar_argument_bytes": sum(_tensor_type_bytes(t) for t, _ in arguments
                                         if not re.match(r"\d", t)),
            "output_bytes": sum(_tensor_type_bytes(t)
                                for t in re.findall(_TENSOR_TYPE, header.group(2))),
            "alias_bytes": sum(_tensor_type_bytes(t) for t, attributes in arguments
                               if "aliasing_output" in attributes)}


@dataclass
class CompiledProgram:
    """One program compiled for a target: its serialized executable and what the compiler
    reports about it."""

    description: str
    serialized: bytes
    memory: dict  # bytes: argument, output, alias, temp, generated_code, peak
    cost: dict  # e.g. "flops", "bytes accessed"
    phase: str = ""
    # Dense bytes of its arguments, results and donated arguments as the local device holds
    # them (from the module's signature; the compiler's figures include TPU tiling).
    signature: dict = field(default_factory=dict)
    # The TPU compiler's diagnostic when it rejected the program for want of HBM ("" otherwise);
    # then ``memory["peak_bytes"]`` is the requirement it printed and nothing was serialized.
    out_of_memory: str = ""
    fingerprint: str = ""  # sha256 of the StableHLO text

    @property
    def hbm_bytes(self) -> int:
        """Device memory the program needs while it runs: the compiler's peak when it reports
        one, else arguments + outputs - donated + temporaries; plus its code."""
        m = self.memory
        live = m["peak_bytes"] or (m["argument_bytes"] + m["output_bytes"] - m["alias_bytes"] +
                                   m["temp_bytes"])
        return live + m["generated_code_bytes"]

    @property
    def live_bytes(self) -> int:
        """HBM in use while the program runs, its code aside: the compiler's peak or arguments +
        outputs - donated + temporaries, whichever is larger (the compiler's peak can be below
        the sum, when buffers are freed while it runs, or above it)."""
        m = self.memory
        return max(m["peak_bytes"], m["argument_bytes"] + m["output_bytes"] - m["alias_bytes"] +
                   m["temp_bytes"])


def _rejected_for_memory(error: Exception, module_text: str,
                         description: str) -> CompiledProgram | None:
    """The record of a program the TPU compiler rejected because it does not fit in HBM (None for
    any other rejection)."""
    message = str(error)
    if "RESOURCE_EXHAUSTED" not in message or "HBM" not in message.upper():
        return None
    signature = _signature_bytes(module_text)
    required = _compiler_bytes(message, r"required for [^(]*") or \
        _compiler_bytes(message, "Used") or 0
    memory = {"generated_code_bytes": 0, "argument_bytes": signature["argument_bytes"],
              "output_bytes": signature["output_bytes"], "alias_bytes": signature["alias_bytes"],
              "temp_bytes": 0, "peak_bytes": max(required, signature["argument_bytes"])}
    return CompiledProgram(description, b"", memory, {}, signature=signature,
                           out_of_memory=message.strip().splitlines()[0])


# Stack for the thread the TPU compiler runs on. It recurses deeply on large programs: compiling a
# 12-layer GPT's whole forward (batch 8 x 1024 tokens) for v6e overflowed the main thread's
# 8 MiB stack (SIGSEGV) and passed on a thread with this much (address space reserved, pages
# touched only as used).
_COMPILE_STACK_BYTES = 1 << 30


def _on_large_stack(function: Callable, *args: Any) -> Any:
    """``function(*args)`` on a new thread with :data:`_COMPILE_STACK_BYTES` of stack."""
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = function(*args)
        except BaseException as error:  # noqa: BLE001  (re-raised on the caller's thread)
            outcome["error"] = error

    previous = threading.stack_size(_COMPILE_STACK_BYTES)
    try:
        thread = threading.Thread(target=run, name="torch_tpu.aot compile")
        thread.start()
    finally:
        threading.stack_size(previous)
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def compile_module(target: str, module_text: str, description: str = "") -> CompiledProgram:
    """Compiles one StableHLO module for ``target``; raises ``torch_tpu._C.PjrtError`` with the
    TPU compiler's diagnostic when it rejects the module."""
    compiled = _on_large_stack(topology(target).compile, module_text)
    return CompiledProgram(description or compiled["name"], compiled["serialized"],
                           compiled["memory"], compiled["cost"],
                           signature=_signature_bytes(module_text),
                           fingerprint=hashlib.sha256(module_text.encode()).hexdigest())


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


def _gib(value: int) -> str:
    return f"{value / _GiB:.2f} GiB"


@dataclass
class AotResult:
    target: str
    topology: str
    platform_version: str
    device_kind: str
    programs: list = field(default_factory=list)
    # The tensors live on the local device in each phase ("forward", "backward", "optimizer"),
    # counted densely (what the storages hold): "start_bytes" when it began, "peak_bytes" while
    # it ran, and "program_runs", how many programs it launched.
    phase_tensors: dict = field(default_factory=dict)
    # What a training step keeps on the device between its phases, in dense bytes:
    # "parameters" (and buffers), "gradients", "optimizer_state", "activations" (what forward
    # leaves for backward, the loss included), "inputs" (inputs and targets).
    resident: dict = field(default_factory=dict)
    placeholders: bool = False  # traced without values (see compile_training_step)

    @property
    def hbm_bytes(self) -> int:
        """The largest program's device memory (its peak and code), without the tensors the
        step holds around it: see :attr:`step_hbm_bytes` for what the step needs."""
        return max((p.hbm_bytes for p in self.programs), default=0)

    @property
    def code_bytes(self) -> int:
        """The code of every distinct program of the step: a TPU keeps each loaded executable's
        code in HBM for as long as the process holds it."""
        distinct = {p.fingerprint or id(p): p.memory["generated_code_bytes"] for p in self.programs}
        return sum(distinct.values())

    def tensors_around(self, program: CompiledProgram) -> int:
        """Dense bytes of the tensors live while ``program`` runs that are not its arguments: the
        tensors live when it starts less its (ranked) arguments. When it is its phase's only
        launch, those are the tensors live when the phase began; otherwise at most the phase's
        peak less the results ``program`` adds (an upper bound: the peak may fall on another
        program)."""
        phase = self.phase_tensors.get(program.phase)
        if not phase:
            return 0
        s = program.signature
        # Rank-0 arguments are left in: mostly host scalars, not among the live tensors (a 0-d
        # tensor argument is then counted twice, a few bytes).
        arguments = s.get("argument_bytes", 0) - s.get("scalar_argument_bytes", 0)
        if phase["program_runs"] == 1:
            live_before = phase["start_bytes"]
        else:
            live_before = phase["peak_bytes"] - (s.get("output_bytes", 0) - s.get("alias_bytes", 0))
        return max(0, live_before - arguments)

    def program_step_bytes(self, program: CompiledProgram) -> int:
        """HBM in use while ``program`` runs within the step: its live bytes (the compiler's:
        arguments, results, temporaries), plus :meth:`tensors_around` it, plus the code of every
        program of the step."""
        return program.live_bytes + self.tensors_around(program) + self.code_bytes

    @property
    def step_hbm_bytes(self) -> int:
        """Peak HBM of the traced step on one device of the target: the largest
        :meth:`program_step_bytes` over its programs. ``docs/tpu.md`` ("Will it fit?") explains
        the formula."""
        return max((self.program_step_bytes(p) for p in self.programs), default=0)

    @property
    def capacity_bytes(self) -> int:
        """The HBM one device of the target offers (:func:`hbm_capacity`)."""
        return hbm_capacity(self.target)

    @property
    def fits(self) -> bool:
        """Whether every program compiled and the step's peak is within the device's HBM."""
        return not any(p.out_of_memory for p in self.programs) and \
            self.step_hbm_bytes <= self.capacity_bytes

    def summary(self) -> str:
        """One line: ``"v5e: step needs 3.07 GiB of 15.75 GiB HBM (fits)"``."""
        verdict = "fits" if self.fits else "does not fit"
        rejected = [p for p in self.programs if p.out_of_memory]
        if rejected:
            verdict += f"; the TPU compiler rejected {len(rejected)} program(s) for want of HBM"
        return (f"{self.target}: step needs {_gib(self.step_hbm_bytes)} of "
                f"{_gib(self.capacity_bytes)} HBM ({verdict})")

    def save(self, directory: str | os.PathLike) -> Path:
        """Writes each serialized executable and an index (``programs.json``) to ``directory``;
        programs the compiler rejected for want of HBM are listed without a file."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        index = {"target": self.target, "topology": self.topology,
                 "platform_version": self.platform_version, "device_kind": self.device_kind,
                 "programs": []}
        for n, program in enumerate(self.programs):
            entry = {"description": program.description, "phase": program.phase,
                     "memory": program.memory, "cost": program.cost}
            if program.out_of_memory:
                entry["out_of_memory"] = program.out_of_memory
            else:
                name = f"program_{n}.{program.phase or 'run'}.pjrt"
                (directory / name).write_bytes(program.serialized)
                entry = {"file": name, **entry}
            index["programs"].append(entry)
        if self.phase_tensors:
            index["step"] = {"hbm_bytes": self.step_hbm_bytes, "capacity_bytes":
                             self.capacity_bytes, "resident": self.resident,
                             "phase_tensors": self.phase_tensors}
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


def _live_tensor_bytes(peak: bool = False) -> int:
    """Bytes of live tpu tensor storages (dense: what the tensors hold, whatever device buffers
    back them), now or at their peak since the last ``reset_peak_memory_stats``."""
    stats = torch.tpu.memory_stats()
    key = "requested_bytes.all." + ("peak" if peak else "current")
    if key in stats:
        return stats[key]
    return torch.tpu.max_memory_allocated() if peak else torch.tpu.memory_allocated()


def _program_runs() -> int:
    """Programs launched so far: executed, or failed by an injected execute failure."""
    metrics = _C._metrics()
    return metrics["execute_count"] + metrics.get("injected_failures", {}).get("execute", 0)


@contextlib.contextmanager
def _phase(name: str, programs: list, phase_tensors: dict) -> Iterator[None]:
    """Runs a phase of a traced step: its programs are captured as ``(name, description, text)``
    and ``phase_tensors[name]`` receives the live tensor bytes when it began and at its peak, and
    how many programs it launched."""
    torch.tpu.reset_peak_memory_stats()
    start, runs = _live_tensor_bytes(), _program_runs()
    with capture_modules() as captured:
        yield
        _C._fuse_flush("torch_tpu.aot")  # deferred ops run (and are captured) within the phase
    programs += [(name, d, t) for d, t in captured]
    phase_tensors[name] = {"start_bytes": start, "peak_bytes": _live_tensor_bytes(peak=True),
                           "program_runs": _program_runs() - runs}


def trace_programs(fn_or_module: Callable, example_inputs: Sequence,
                   backward: bool | None = None,
                   phase_tensors: dict | None = None) -> list[tuple[str, str, str]]:
    """Runs ``fn_or_module(*example_inputs)`` once on the local tpu device compiled with
    ``torch.compile(backend="tpu")`` (and its backward when anything requires grad, or when
    ``backward`` is True) and returns ``(phase, description, StableHLO)`` of every program that
    ran. A module is copied first: the caller's stays where it is. ``phase_tensors``, when given,
    receives each phase's live tensor bytes (see ``AotResult.phase_tensors``)."""
    phase_tensors = {} if phase_tensors is None else phase_tensors
    device = torch.device("tpu")
    fn = fn_or_module
    if isinstance(fn_or_module, torch.nn.Module):
        fn = copy.deepcopy(fn_or_module).to(device)
    inputs = _to_device(tuple(example_inputs), device)
    compiled = torch.compile(fn, backend="tpu")
    programs: list = []
    with _phase("forward", programs, phase_tensors):
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
    if backward:
        cotangents = [torch.ones_like(t) for t in leaves]
        with _phase("backward", programs, phase_tensors):
            if with_grad:
                # grad() rather than backward(): no .grad accumulation programs in the capture.
                torch.autograd.grad(leaves, with_grad, cotangents, allow_unused=True)
            else:  # what requires grad is captured by a closure: only backward() reaches it
                torch.autograd.backward(leaves, cotangents)
    torch.tpu.synchronize()
    return programs


def _compile_programs(targets: list[str], programs: list, rejected_for_memory: bool = False,
                      **fields: Any) -> dict[str, AotResult]:
    """Compiles the traced ``(phase, description, text)`` programs for each target (each
    distinct text once). A program the compiler rejects raises ``PjrtError`` naming the target
    and the program, or, where ``rejected_for_memory`` and the reason is HBM, is kept as a
    program that does not fit (``out_of_memory``)."""
    results = {}
    for name in targets:
        topo = topology(name)
        result = AotResult(name, topo.name, topo.platform_version,
                           topo.device_kinds[0] if topo.device_kinds else "", **fields)
        compiled: dict = {}
        for phase, description, text in programs:
            if text not in compiled:
                try:
                    compiled[text] = compile_module(name, text, description)
                except _C.PjrtError as error:
                    rejected = _rejected_for_memory(error, text, description) \
                        if rejected_for_memory else None
                    if rejected is None:
                        raise _C.PjrtError(f"{name}: {description}: {error}") from error
                    rejected.fingerprint = hashlib.sha256(text.encode()).hexdigest()
                    compiled[text] = rejected
            program = copy.copy(compiled[text])
            program.description, program.phase = description, phase
            result.programs.append(program)
        results[name] = result
    return results


def compile_for(target: str | Sequence[str], fn_or_module: Callable, example_inputs: Sequence,
                backward: bool | None = None) -> AotResult | dict[str, AotResult]:
    """Lowers ``fn_or_module`` the way ``torch.compile(backend="tpu")`` does and compiles every
    resulting program for the TPU ``target`` (see :data:`TARGETS`) without a TPU. Given several
    targets, traces once and returns ``{target: AotResult}``. Raises ``torch_tpu._C.PjrtError``
    naming the target and the program the TPU compiler rejects."""
    targets = [target] if isinstance(target, str) else list(target)
    for name in targets:
        topology(name)  # unknown names fail before any tracing
    phase_tensors: dict = {}
    programs = trace_programs(fn_or_module, example_inputs, backward, phase_tensors)
    results = _compile_programs(targets, programs, phase_tensors=phase_tensors)
    return results[targets[0]] if isinstance(target, str) else results


# The failure every placeholder tensor carries: what a host read of one raises.
PLACEHOLDER_MESSAGE = ("torch_tpu.aot placeholder: this tensor's values are never computed (the "
                       "step was traced without values, compile_training_step(placeholders=True)); "
                       "a step that reads a tensor on the host needs placeholders=False")


class _Placeholders:
    """Makes tpu tensors of any shape that hold no memory and no values: each is a copy of a
    one-element tensor whose contents failed (a PJRT error buffer), so a program reading it is
    built, compiled and captured as for real values, and its results are failed buffers too;
    no values are ever computed. Used inside :func:`_no_execution`, so that programs reading no
    placeholder (optimizer state initialised to zeros) do not compute or allocate either."""

    def __init__(self, device: torch.device):
        self.device = device
        self._seeds: dict = {}

    def __call__(self, like: torch.Tensor) -> torch.Tensor:
        if like.numel() == 0:
            return torch.empty(like.shape, dtype=like.dtype, device=self.device)
        seed = self._seeds.get(like.dtype)
        if seed is None:
            seed = torch.empty(1, dtype=like.dtype, device=self.device)
            _C._fail_storage(seed, PLACEHOLDER_MESSAGE)
            self._seeds[like.dtype] = seed
        return seed.expand(like.shape).clone()

    def tensors(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return self(value).requires_grad_(value.requires_grad)
        if isinstance(value, (list, tuple)):
            return type(value)(self.tensors(v) for v in value)
        if isinstance(value, dict):
            return {k: self.tensors(v) for k, v in value.items()}
        return value

    def module(self, module: torch.nn.Module) -> torch.nn.Module:
        """A copy of ``module`` on the device whose parameters and buffers are placeholders (tied
        ones stay tied); the original's values are not copied."""
        memo: dict = {}
        for tensor in [*module.parameters(), *module.buffers()]:
            if id(tensor) not in memo:
                placeholder = self(tensor.detach())
                memo[id(tensor)] = torch.nn.Parameter(placeholder, tensor.requires_grad) \
                    if isinstance(tensor, torch.nn.Parameter) else placeholder
        return copy.deepcopy(module, memo)


@contextlib.contextmanager
def _no_execution() -> Iterator[None]:
    """Every program launched inside fails at execution (after it was built, compiled and
    captured), so nothing computes; the failures are consumed on exit."""
    from torch_tpu.testing import inject_failure

    with inject_failure("execute", 1 << 62):
        try:
            yield
        finally:
            _C._fuse_flush("torch_tpu.aot")
            try:
                torch.tpu.synchronize()
            except RuntimeError:
                pass  # the placeholders' and the injected failures, reported once


class _StepLoss(torch.nn.Module):
    """``loss_fn(model(*inputs), *targets)``, or the model's output when there is no loss_fn:
    the module a training step compiles."""

    def __init__(self, model: torch.nn.Module, loss_fn: Callable | None, input_count: int):
        super().__init__()
        self.model, self.loss_fn, self.input_count = model, loss_fn, input_count

    def forward(self, *arguments: Any) -> torch.Tensor:
        output = self.model(*arguments[:self.input_count])
        if self.loss_fn is None:
            return output
        return self.loss_fn(output, *arguments[self.input_count:])


def _storage_bytes(tensors: Iterator) -> int:
    """Dense bytes of the distinct storages behind ``tensors`` (tpu ones)."""
    seen: dict = {}
    for tensor in tensors:
        if isinstance(tensor, torch.Tensor) and tensor.device.type == "tpu":
            storage = tensor.untyped_storage()
            seen[storage._cdata] = storage.nbytes()  # _cdata: the StorageImpl, one per storage
    return sum(seen.values())


@dataclass
class TracedStep:
    """A training step recorded on the local device by :func:`trace_training_step`: its
    programs and the tensors it keeps, ready to compile for any target."""

    programs: list  # (phase, description, StableHLO text), in the order they first ran
    # As AotResult.phase_tensors and AotResult.resident.
    phase_tensors: dict = field(default_factory=dict)
    resident: dict = field(default_factory=dict)
    placeholders: bool = False

    @property
    def lower_bound_bytes(self) -> int:
        """What :attr:`AotResult.step_hbm_bytes` is at least on any target, without compiling:
        the same formula with each program's dense arguments + results - donated in place of
        the compiler's figures, no temporaries and no code (the compiler adds TPU tiling,
        temporaries and code). A step whose bound exceeds a device's HBM does not fit it."""
        accounting = AotResult("", "", "", "", phase_tensors=self.phase_tensors)
        bound = 0
        for phase, description, text in self.programs:
            signature = _signature_bytes(text)
            memory = {**signature, "temp_bytes": 0, "peak_bytes": 0, "generated_code_bytes": 0}
            program = CompiledProgram(description, b"", memory, {}, phase, signature=signature)
            bound = max(bound, program.live_bytes + accounting.tensors_around(program))
        return bound

    def compile(self, target: str | Sequence[str]) -> AotResult | dict[str, AotResult]:
        """Compiles the step's programs for ``target`` (or each of several: ``{target:
        AotResult}``). A program the TPU compiler rejects because it does not fit in HBM does
        not raise: it is recorded (``out_of_memory``) and the step does not fit."""
        targets = [target] if isinstance(target, str) else list(target)
        results = _compile_programs(targets, self.programs, rejected_for_memory=True,
                                    phase_tensors=self.phase_tensors, resident=self.resident,
                                    placeholders=self.placeholders)
        return results[targets[0]] if isinstance(target, str) else results


def trace_training_step(model: torch.nn.Module, example_inputs: Sequence,
                        optimizer: Callable = torch.optim.AdamW, *,
                        loss_fn: Callable | None = None, targets: Sequence = (),
                        placeholders: bool | None = None,
                        regions: Sequence[type] = ()) -> TracedStep:
    """Records one training step of ``model`` on the local tpu device, without compiling it for
    a TPU; :func:`compile_training_step` explains the arguments. Two steps run on a copy of the
    model: the first creates the optimizer's state and compiles, the second is recorded (its
    programs, the live tensor bytes of each phase, what it keeps between phases)."""
    on_meta = any(t.is_meta for t in [*model.parameters(), *model.buffers()])
    if placeholders is None:
        placeholders = on_meta
    elif on_meta and not placeholders:
        raise ValueError("trace_training_step: a model on the meta device has no values to "
                         "trace; use placeholders=True")
    device = torch.device("tpu")
    make = _Placeholders(device)
    context = _no_execution() if placeholders else contextlib.nullcontext()
    programs: list = []
    phase_tensors: dict = {}
    resident: dict = {}
    # Each trace compiles a new module: raise Dynamo's recompile limits for it (a model class
    # traced many times, as tools/tpu_fit_report.py does, would otherwise fall back to eager).
    limits = torch._dynamo.config.patch(recompile_limit=1 << 20,
                                        accumulated_recompile_limit=1 << 20)
    with limits, context:
        if placeholders:
            step_model = make.module(model)
            arguments = make.tensors(tuple(example_inputs) + tuple(targets))
            make = None  # its seeds would count among the step's tensors
        else:
            step_model = copy.deepcopy(model).to(device)
            arguments = _to_device(tuple(example_inputs) + tuple(targets), device)
        wrapper = _StepLoss(step_model, loss_fn, len(example_inputs))
        if regions:
            compiled = wrapper
            for module in step_model.modules():
                if isinstance(module, tuple(regions)):
                    module.compile(backend="tpu", dynamic=False)
        else:
            compiled = torch.compile(wrapper, backend="tpu", dynamic=False)
        trained = [p for p in step_model.parameters() if p.requires_grad]
        if not trained:
            raise ValueError("trace_training_step: the model has no parameter that requires grad")
        step_optimizer = optimizer(trained)
        for recorded in (False, True):
            sink_programs = programs if recorded else []
            sink_phases = phase_tensors if recorded else {}
            before_forward = _live_tensor_bytes()
            with _phase("forward", sink_programs, sink_phases):
                loss = compiled(*arguments)
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else ""
                raise ValueError("trace_training_step: the step's loss must be a one-element "
                                 "tensor; pass loss_fn(output, *targets) when the model returns "
                                 f"something else (got {type(loss).__name__}{shape})")
            activations = _live_tensor_bytes() - before_forward
            with _phase("backward", sink_programs, sink_phases):
                loss.backward()
            gradients = _storage_bytes(p.grad for p in trained)
            del loss
            with _phase("optimizer", sink_programs, sink_phases):
                step_optimizer.step()
            step_optimizer.zero_grad(set_to_none=True)
        resident.update(
            parameters=_storage_bytes([*step_model.parameters(), *step_model.buffers()]),
            gradients=gradients,
            optimizer_state=_storage_bytes(
                value for state in step_optimizer.state.values() for value in state.values()),
            activations=activations,
            inputs=_storage_bytes(arguments))
    return TracedStep(programs, phase_tensors, resident, placeholders)


def compile_training_step(target: str | Sequence[str], model: torch.nn.Module,
                          example_inputs: Sequence, optimizer: Callable = torch.optim.AdamW, *,
                          loss_fn: Callable | None = None, targets: Sequence = (),
                          placeholders: bool | None = None,
                          regions: Sequence[type] = ()) -> AotResult | dict[str, AotResult]:
    """Compiles one training step of ``model`` for the TPU ``target`` and accounts for the HBM
    it needs: the result's :attr:`~AotResult.step_hbm_bytes`, :attr:`~AotResult.fits` and
    :meth:`~AotResult.summary`.

    The step is what a training loop runs on a tpu device::

        loss = loss_fn(model(*example_inputs), *targets)   # torch.compile(backend="tpu")
        loss.backward()
        optimizer.step()                                   # eager (one fused program)
        optimizer.zero_grad(set_to_none=True)

    ``optimizer`` is called with the parameters that require grad and returns a
    ``torch.optim.Optimizer`` (a class such as ``torch.optim.AdamW``, or
    ``functools.partial(torch.optim.SGD, lr=0.1, momentum=0.9)``). Without ``loss_fn`` the
    model's output is the loss. The step runs twice on a copy of the model on the local device
    (:func:`trace_training_step`): the first creates the optimizer's state, the second is
    recorded (its forward, backward and optimizer programs, and the tensors live in each phase)
    and compiled for each target.

    ``placeholders``: trace without values, so that a model far larger than this host's memory
    can be measured: parameters, buffers and inputs become tensors that hold no memory and no
    values, and no program computes (each is still built, compiled and captured exactly as with
    values). The default (None) uses placeholders when the model's parameters are on the
    ``meta`` device (``with torch.device("meta"): model = ...``) and copies its values
    otherwise. A step that reads a tensor on the host (``loss.item()``, a data-dependent shape)
    cannot be traced with placeholders.

    ``regions``: module classes compiled instance by instance instead of the whole forward
    (regional compilation, ``module.compile()`` on each instance of, e.g., a transformer block
    class): identical blocks share one program, so the TPU compiles one block however deep the
    model is, and the rest of the forward and the loss run eagerly.

    A program the TPU compiler rejects because it does not fit in HBM does not raise: it is
    recorded (``out_of_memory``) and the step does not fit. Given several targets, traces once
    and returns ``{target: AotResult}``."""
    for name in [target] if isinstance(target, str) else target:
        topology(name)  # unknown names fail before any tracing
    traced = trace_training_step(model, example_inputs, optimizer, loss_fn=loss_fn,
                                 targets=targets, placeholders=placeholders, regions=regions)
    return traced.compile(target)

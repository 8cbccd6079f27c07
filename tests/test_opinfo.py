"""Op coverage of the ``tpu`` device measured with PyTorch's own OpInfo database.

Every entry of ``torch.testing._internal.common_methods_invocations.op_db`` runs on CPU and on
``tpu`` with the same sample inputs (the first ``SAMPLES_PER_OP`` of each entry), forward in
float32, forward in bfloat16 (first sample, within one ulp, reported only) and backward in
float32 (gradients of the outputs against a fixed random cotangent). Each entry gets one status
per pass:

``native``       matches CPU and no CPU fallback happened while it ran on tpu
``fallback``     matches CPU, but ``torch_tpu.metrics()["fallback_ops"]`` was not empty
``mismatch``     wrong values, dtype, shape, structure or device compared with CPU
``error``        an exception (or a time-out, or a crash of the process) on tpu where CPU succeeded
``unsupported``  the pass cannot run: float32 (or float32 autograd) not supported by the entry,
                 inputs that cannot be moved to tpu (sparse, quantized), CPU itself failing on every
                 sample; always with a reason, and excluded from the denominator of the rates
``n/a``          backward only: the entry does not support autograd

Random ops and ops returning uninitialized memory are compared by shape and dtype only.

The measurement runs in a worker subprocess (ops run in-process there, each under a time limit)
watched by a supervisor, so that an op that crashes or hangs the interpreter is recorded as an
``error`` and the run resumes after it. Results go to ``benchmarks/results/opinfo_coverage.json``;
``tools/generate_ops_doc.py`` turns that file into ``docs/ops.md``.

As a script (no pytest)::

    .venv/bin/python tests/test_opinfo.py --json benchmarks/results/opinfo_coverage.json
    .venv/bin/python tests/test_opinfo.py --ops add,mul,nn.functional.conv2d --in-process
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import signal
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

# ----------------------------------------------------------------------------------------------
# Targets and knobs
# ----------------------------------------------------------------------------------------------

#: Share of op_db entries supporting float32 that must pass forward with no CPU fallback: a little
#: under what is measured (82.2%), so coverage cannot silently drop; a time-out on a loaded
#: machine turns an entry into an error.
FORWARD_NATIVE_TARGET = 0.80
#: Share of op_db entries supporting float32 autograd that must pass backward with no fallback
#: (measured 85.5%).
BACKWARD_NATIVE_TARGET = 0.83

#: Samples per entry (the first ones ``sample_inputs`` yields) for the float32 passes.
SAMPLES_PER_OP = 3
#: Samples per entry for the bfloat16 forward pass.
BF16_SAMPLES_PER_OP = 1
#: Per (entry, pass) limit enforced inside the worker with SIGALRM (interrupts Python code).
OP_TIME_LIMIT_S = 30
#: Per (entry, pass) limit enforced by the supervisor, which kills the worker (hangs in C++).
HARD_TIME_LIMIT_S = 120

FORWARD_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
BACKWARD_TOLERANCE = {"rtol": 1e-3, "atol": 1e-4}
#: Below one bfloat16 ulp (2**-8 relative at worst): a Python number rounded to bfloat16 where CPU
#: keeps it in float32 (or the reverse) is off by one ulp and must show as a mismatch.
BF16_TOLERANCE = {"rtol": 4e-3, "atol": 1e-5}
#: DeferAndFuse against strict mode on the same tpu inputs (float32 forward): fusing may reorder
#: float arithmetic, nothing more; integer and bool results must be bit for bit equal.
FUSE_TOLERANCE = {"rtol": 1e-6, "atol": 1e-6}

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_JSON = ROOT / "benchmarks" / "results" / "opinfo_coverage.json"

#: Entries (``name`` or ``name.variant``) whose failure is understood: op -> reason. They still
#: run, keep their measured status, count in the rates, and are marked as known in the JSON.
KNOWN_FAILURES: dict[str, str] = {
    "rsqrt": "bfloat16 pass: CPU's bfloat16 rsqrt is one or two ulp off the correctly rounded "
             "1/sqrt(x) that tpu computes",
}

#: Entries whose values are random: compared by shape and dtype only.
RANDOM_OPS = {
    "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial", "normal",
    "uniform", "rand_like", "randn_like", "randint_like", "randint", "randn", "rand",
    "randperm", "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
    "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout", "nn.functional.rrelu",
    "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
}
#: Entries returning uninitialized memory: compared by shape and dtype only.
UNINITIALIZED_OPS = {
    "empty", "empty_like", "empty_permuted", "empty_strided", "new_empty", "new_empty_strided",
}

#: Entries whose tensor arguments (besides the input) must stay on CPU by PyTorch's API.
CPU_ARGUMENT_OPS = {
    "tensor_split": "tensor_indices_or_sections must be a CPU tensor",
}

PASSES = ("forward", "bfloat16", "backward")
STATUSES = ("native", "fallback", "mismatch", "error", "unsupported")


# ----------------------------------------------------------------------------------------------
# Worker: runs the ops (imports torch)
# ----------------------------------------------------------------------------------------------


class OpTimeout(Exception):
    pass


class Untransferable(Exception):
    pass


class Mismatch(Exception):
    pass


def _short(error: BaseException, limit: int = 300) -> str:
    text = str(error).strip().splitlines()
    first = next((line for line in text if line.strip()), "")
    message = f"{type(error).__name__}: {first}".strip()
    return message if len(message) <= limit else message[: limit - 3] + "..."


def _import_op_db():
    """Import torch, torch_tpu and op_db (torch's test utilities need ``expecttest``, a test
    dependency in pyproject.toml)."""
    import torch
    import torch_tpu  # noqa: F401
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def _draws_random_numbers(sample, op_name: str = "") -> bool:
    """Samples of deterministic ops that ask for dropout (attention with dropout_p > 0, or
    multi-head attention in training mode, where its positional dropout_p applies): their values
    depend on the device's random stream, which differs from CPU's by design."""
    if "attention" in op_name and sample.kwargs.get("training") is True:
        return True
    for name in ("dropout_p", "dropout"):
        value = sample.kwargs.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return True
    return False


def op_key(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


class Harness:
    def __init__(self):
        import torch
        import torch_tpu

        self.torch = torch
        self.torch_tpu = torch_tpu
        self.tpu = torch.device("tpu")

    # -- moving samples ------------------------------------------------------------------------

    def to_tpu(self, value, *, keep_tensors_on_cpu=False):
        """``value`` with every tensor moved to tpu and every cpu device turned into tpu."""
        torch = self.torch
        if isinstance(value, torch.Tensor) and keep_tensors_on_cpu:
            return value.detach().clone().requires_grad_(value.requires_grad)
        if isinstance(value, torch.Tensor):
            if value.layout != torch.strided:
                raise Untransferable(f"{value.layout} tensor input")
            if value.is_quantized:
                raise Untransferable("quantized tensor input")
            try:
                base = value._base
                if (base is not None and base.is_contiguous() and base.storage_offset() == 0
                        and base.numel() * base.element_size()
                        == base.untyped_storage().nbytes()):
                    # A view: move its base and view it the same way, so ops that address the
                    # storage directly (as_strided with a storage_offset) see the same storage.
                    moved = base.detach().to(self.tpu).as_strided(
                        value.size(), value.stride(), value.storage_offset())
                else:
                    moved = value.detach().to(self.tpu)
            except Exception as error:  # noqa: BLE001
                raise Untransferable(f"cannot move input to tpu: {_short(error)}") from error
            return moved.requires_grad_(value.requires_grad)
        if isinstance(value, torch.device) and value.type == "cpu":
            return self.tpu
        if isinstance(value, str) and (value == "cpu" or value.startswith("cpu:")):
            return "tpu"
        if isinstance(value, torch.Generator):
            raise Untransferable("torch.Generator argument")
        keep = {"keep_tensors_on_cpu": keep_tensors_on_cpu}
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return type(value)(*(self.to_tpu(item, **keep) for item in value))
        if isinstance(value, (list, tuple)):
            return type(value)(self.to_tpu(item, **keep) for item in value)
        if isinstance(value, dict):
            return {name: self.to_tpu(item, **keep) for name, item in value.items()}
        return value

    def move_sample(self, op, sample):
        keep = op.name in CPU_ARGUMENT_OPS
        return (self.to_tpu(sample.input),
                self.to_tpu(list(sample.args), keep_tensors_on_cpu=keep),
                self.to_tpu(dict(sample.kwargs), keep_tensors_on_cpu=keep))

    # -- comparing -----------------------------------------------------------------------------

    def compare(self, tpu_out, cpu_out, *, values: bool, tolerance: dict, what: str = "output",
                exact_integers: bool = False):
        torch = self.torch
        from torch.utils._pytree import tree_flatten

        tpu_leaves, tpu_spec = tree_flatten(tpu_out)
        cpu_leaves, cpu_spec = tree_flatten(cpu_out)
        if len(tpu_leaves) != len(cpu_leaves):
            raise Mismatch(f"{what} structure differs: {tpu_spec} vs {cpu_spec}")
        for index, (got, expected) in enumerate(zip(tpu_leaves, cpu_leaves)):
            where = f"{what}[{index}]" if len(cpu_leaves) > 1 else what
            if isinstance(expected, torch.Tensor):
                if not isinstance(got, torch.Tensor):
                    raise Mismatch(f"{where}: expected a tensor, got {type(got).__name__}")
                if expected.device.type == "cpu" and got.device.type != "tpu":
                    raise Mismatch(f"{where}: on device {got.device}, expected tpu")
                if got.dtype != expected.dtype:
                    raise Mismatch(f"{where}: dtype {got.dtype}, expected {expected.dtype}")
                if got.shape != expected.shape:
                    raise Mismatch(f"{where}: shape {tuple(got.shape)}, expected "
                                   f"{tuple(expected.shape)}")
                if values:
                    exact = exact_integers and not (expected.is_floating_point()
                                                    or expected.is_complex())
                    try:
                        torch.testing.assert_close(got.detach().cpu(), expected.detach(),
                                                   equal_nan=True, check_device=False,
                                                   **({"rtol": 0, "atol": 0} if exact
                                                      else tolerance))
                    except AssertionError as error:
                        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
                        detail = "; ".join(lines[:4])
                        raise Mismatch(f"{where}: {detail}") from None
            elif expected is None or got is None:
                if (expected is None) != (got is None):
                    raise Mismatch(f"{where}: {got!r} vs {expected!r}")
            elif values:
                if isinstance(expected, float) and isinstance(got, (int, float)):
                    if not (math.isclose(got, expected, rel_tol=tolerance["rtol"],
                                         abs_tol=tolerance["atol"])
                            or (math.isnan(got) and math.isnan(expected))):
                        raise Mismatch(f"{where}: {got!r} vs {expected!r}")
                elif got != expected:
                    raise Mismatch(f"{where}: {got!r} vs {expected!r}")

    # -- passes ----------------------------------------------------------------------------------

    def _samples(self, op, dtype, count, requires_grad):
        import itertools

        self.torch.manual_seed(0)
        return list(itertools.islice(
            op.sample_inputs("cpu", dtype, requires_grad=requires_grad), count))

    def _fallbacks(self) -> dict:
        return dict(self.torch_tpu.metrics()["fallback_ops"])

    def run_forward(self, op, dtype, count, tolerance) -> dict:
        torch = self.torch
        name = op.name
        values = not (name in RANDOM_OPS or name in UNINITIALIZED_OPS
                      or getattr(op, "has_nondeterministic_output", False))
        samples = self._samples(op, dtype, count, requires_grad=False)
        if not samples:
            return {"status": "unsupported", "reason": "op_db yields no samples for this dtype"}
        fallbacks: collections.Counter = collections.Counter()
        ran = 0
        cpu_failures = []
        fuse_checked = dtype == torch.float32
        fuse_mismatch = None
        for sample in samples:
            try:
                moved = self.move_sample(op, sample)
                # Its own inputs: an op that writes into an input must not see strict mode's write.
                moved_for_fuse = self.move_sample(op, sample) if fuse_checked else None
            except Untransferable as error:
                return {"status": "unsupported", "reason": str(error)}
            try:
                cpu_out = sample.output_process_fn_grad(
                    op(sample.input, *sample.args, **sample.kwargs))
            except OpTimeout:
                raise
            except Exception as error:  # noqa: BLE001
                cpu_failures.append(_short(error))
                continue
            ran += 1
            sample_values = values and not _draws_random_numbers(sample, op.name)
            self.torch_tpu.reset_metrics()
            try:
                tpu_out = sample.output_process_fn_grad(op(moved[0], *moved[1], **moved[2]))
                torch.tpu.synchronize()
            except OpTimeout:
                raise
            except Exception as error:  # noqa: BLE001
                fallbacks.update(self._fallbacks())
                return {"status": "error", "reason": _short(error),
                        "fallback_ops": dict(fallbacks)}
            fallbacks.update(self._fallbacks())
            try:
                self.compare(tpu_out, cpu_out, values=sample_values, tolerance=tolerance)
            except Mismatch as error:
                return {"status": "mismatch", "reason": str(error)[:400],
                        "fallback_ops": dict(fallbacks)}
            except OpTimeout:
                raise
            except Exception as error:  # noqa: BLE001  (reading the result back failed)
                return {"status": "error", "reason": f"reading result: {_short(error)}",
                        "fallback_ops": dict(fallbacks)}
            if fuse_checked and fuse_mismatch is None:
                fuse_mismatch = self.fused_mismatch(op, sample, moved_for_fuse, tpu_out,
                                                    sample_values)
        if not ran:
            return {"status": "unsupported",
                    "reason": f"CPU reference failed on every sample: {cpu_failures[0]}"}
        result = {"status": "fallback" if fallbacks else "native", "samples": ran,
                  "fallback_ops": dict(fallbacks)}
        if fuse_checked:
            result["defer_and_fuse"] = fuse_mismatch or "equal"
        if not values:
            result["compared"] = "shape and dtype only"
        return result

    def fused_mismatch(self, op, sample, moved, strict_out, values: bool) -> str | None:
        """Runs the sample again in DeferAndFuse mode; why its result differs from strict mode's
        (None when it does not)."""
        torch = self.torch
        try:
            with self.torch_tpu.eager_mode("defer_and_fuse"):
                fused_out = sample.output_process_fn_grad(op(moved[0], *moved[1], **moved[2]))
                torch.tpu.synchronize()
            strict_cpu = torch.utils._pytree.tree_map(
                lambda t: t.detach().cpu() if isinstance(t, torch.Tensor) else t, strict_out)
            self.compare(fused_out, strict_cpu, values=values, tolerance=FUSE_TOLERANCE,
                         what="fused output", exact_integers=True)
        except OpTimeout:
            raise
        except Exception as error:  # noqa: BLE001  (Mismatch, or an error strict mode did not raise)
            return f"{type(error).__name__}: {_short(error)}"
        return None

    def run_backward(self, op) -> dict:
        torch = self.torch
        from torch.utils._pytree import tree_flatten

        if not op.supports_autograd:
            return {"status": "n/a", "reason": "entry does not support autograd"}
        if torch.float32 not in op.supported_backward_dtypes("cpu"):
            return {"status": "unsupported", "reason": "float32 backward not supported by entry"}
        values = not (op.name in RANDOM_OPS or op.name in UNINITIALIZED_OPS
                      or getattr(op, "has_nondeterministic_output", False))
        samples = self._samples(op, torch.float32, SAMPLES_PER_OP, requires_grad=True)
        if not samples:
            return {"status": "unsupported", "reason": "op_db yields no samples"}
        fallbacks: collections.Counter = collections.Counter()
        ran = 0
        skipped = []

        def grad_inputs(structure):
            leaves, _ = tree_flatten(structure)
            return [leaf for leaf in leaves
                    if isinstance(leaf, torch.Tensor) and leaf.requires_grad]

        def differentiable(structure):
            leaves, _ = tree_flatten(structure)
            return [index for index, leaf in enumerate(leaves)
                    if isinstance(leaf, torch.Tensor) and leaf.requires_grad
                    and (leaf.is_floating_point() or leaf.is_complex())]

        for number, sample in enumerate(samples):
            cpu_inputs = grad_inputs((sample.input, list(sample.args), dict(sample.kwargs)))
            if not cpu_inputs:
                skipped.append("no input requires grad")
                continue
            try:
                moved = self.move_sample(op, sample)
            except Untransferable as error:
                return {"status": "unsupported", "reason": str(error)}
            tpu_inputs = grad_inputs(moved)
            try:
                cpu_out = sample.output_process_fn_grad(
                    op(sample.input, *sample.args, **sample.kwargs))
                cpu_leaves, _ = tree_flatten(cpu_out)
                chosen = differentiable(cpu_out)
                if not chosen:
                    skipped.append("no differentiable output")
                    continue
                generator = torch.Generator().manual_seed(1000 + number)
                cotangents = [torch.randn(cpu_leaves[i].shape, dtype=cpu_leaves[i].dtype,
                                          generator=generator) for i in chosen]
                cpu_grads = torch.autograd.grad([cpu_leaves[i] for i in chosen], cpu_inputs,
                                                cotangents, allow_unused=True)
            except OpTimeout:
                raise
            except Exception as error:  # noqa: BLE001
                skipped.append(f"CPU reference failed: {_short(error)}")
                continue
            ran += 1
            try:
                tpu_out = sample.output_process_fn_grad(op(moved[0], *moved[1], **moved[2]))
                tpu_leaves, _ = tree_flatten(tpu_out)
                if len(tpu_leaves) != len(cpu_leaves):
                    raise Mismatch("forward output structure differs from CPU")
                outputs = [tpu_leaves[i] for i in chosen]
                for output in outputs:
                    if not (isinstance(output, torch.Tensor) and output.requires_grad):
                        raise Mismatch("tpu output does not require grad")
                # Fallbacks are counted for the backward computation only (the forward pass
                # has its own status).
                self.torch_tpu.reset_metrics()
                tpu_grads = torch.autograd.grad(
                    outputs, tpu_inputs, [c.to(self.tpu) for c in cotangents],
                    allow_unused=True)
                fallbacks.update(self._fallbacks())
            except OpTimeout:
                raise
            except Mismatch as error:
                return {"status": "mismatch", "reason": str(error)}
            except Exception as error:  # noqa: BLE001
                fallbacks.update(self._fallbacks())
                return {"status": "error", "reason": _short(error),
                        "fallback_ops": dict(fallbacks)}
            try:
                self.compare(list(tpu_grads), list(cpu_grads),
                             values=values and not _draws_random_numbers(sample, op.name),
                             tolerance=BACKWARD_TOLERANCE, what="grad")
            except Mismatch as error:
                return {"status": "mismatch", "reason": str(error)[:400],
                        "fallback_ops": dict(fallbacks)}
            except OpTimeout:
                raise
            except Exception as error:  # noqa: BLE001
                return {"status": "error", "reason": f"reading grads: {_short(error)}",
                        "fallback_ops": dict(fallbacks)}
        if not ran:
            return {"status": "unsupported",
                    "reason": f"no usable backward sample: {skipped[0]}"}
        result = {"status": "fallback" if fallbacks else "native", "samples": ran,
                  "fallback_ops": dict(fallbacks)}
        if not values:
            result["compared"] = "shape and dtype only"
        return result

    def run_pass(self, op, which: str) -> dict:
        torch = self.torch
        if which == "forward":
            if torch.float32 not in op.supported_dtypes("cpu"):
                return {"status": "unsupported", "reason": "float32 not supported by entry"}
            return self.run_forward(op, torch.float32, SAMPLES_PER_OP, FORWARD_TOLERANCE)
        if which == "bfloat16":
            if torch.bfloat16 not in op.supported_dtypes("cpu"):
                return {"status": "unsupported", "reason": "bfloat16 not supported by entry"}
            return self.run_forward(op, torch.bfloat16, BF16_SAMPLES_PER_OP, BF16_TOLERANCE)
        return self.run_backward(op)


def _alarm(signum, frame):
    raise OpTimeout()


def worker_main(events_path: str, done_path: str | None, only: set[str] | None) -> None:
    """Run every (entry, pass) not listed in ``done_path``, appending JSON lines to events."""
    import faulthandler

    faulthandler.enable()
    warnings.simplefilter("ignore")
    op_db = _import_op_db()
    harness = Harness()
    done = set()
    if done_path and os.path.exists(done_path):
        done = set(json.loads(Path(done_path).read_text()))
    signal.signal(signal.SIGALRM, _alarm)
    with open(events_path, "a", buffering=1) as events:
        for op in op_db:
            key = op_key(op)
            if only is not None and key not in only and op.name not in only:
                continue
            for which in PASSES:
                if f"{key}|{which}" in done:
                    continue
                events.write(json.dumps({"event": "start", "op": key, "pass": which}) + "\n")
                start = time.perf_counter()
                signal.alarm(OP_TIME_LIMIT_S)
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        result = harness.run_pass(op, which)
                except OpTimeout:
                    result = {"status": "error",
                              "reason": f"timed out after {OP_TIME_LIMIT_S} s (SIGALRM)"}
                except Exception as error:  # noqa: BLE001  (a bug in the harness or op_db)
                    result = {"status": "error", "reason": f"harness: {_short(error)}",
                              "traceback": traceback.format_exc(limit=4)[-800:]}
                finally:
                    signal.alarm(0)
                result["seconds"] = round(time.perf_counter() - start, 3)
                events.write(json.dumps({"event": "result", "op": key, "pass": which,
                                         "name": op.name, "variant": op.variant_test_name,
                                         "result": result}) + "\n")


# ----------------------------------------------------------------------------------------------
# Supervisor: no torch import; restarts the worker after a crash or hang
# ----------------------------------------------------------------------------------------------


def _read_events(path: Path, offset: int) -> tuple[list[dict], int]:
    with open(path) as stream:
        stream.seek(offset)
        data = stream.read()
    complete = data[: data.rfind("\n") + 1] if "\n" in data else ""
    lines = [json.loads(line) for line in complete.splitlines() if line.strip()]
    return lines, offset + len(complete.encode())


class CoverageReport(dict):
    """The report dict, with a short repr for pytest's failure output."""

    def __repr__(self) -> str:
        return f"<OpInfo coverage report: {len(self.get('ops', {}))} entries>"


def measure(json_path: Path = DEFAULT_JSON, only: set[str] | None = None,
            log=print, command: str | None = None) -> dict:
    """Run the whole measurement in supervised worker processes and write ``json_path``."""
    json_path = Path(json_path)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    events_path = json_path.with_suffix(".events.jsonl")
    done_path = json_path.with_suffix(".done.json")
    stderr_path = json_path.with_suffix(".worker.log")
    for path in (events_path, done_path, stderr_path):
        path.unlink(missing_ok=True)
    events_path.touch()
    started = time.time()
    ops: dict[str, dict] = {}
    done: set[str] = set()
    crashes = []
    offset = 0
    while True:
        done_path.write_text(json.dumps(sorted(done)))
        command = [sys.executable, os.path.abspath(__file__), "--worker", str(events_path),
                   "--done", str(done_path)]
        if only is not None:
            command += ["--ops", ",".join(sorted(only))]
        environment = {**os.environ, "PYTHONWARNINGS": "ignore"}
        with open(stderr_path, "ab") as stderr:
            worker = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr,
                                      env=environment, cwd=str(ROOT))
        current, current_since = None, time.time()
        killed_for_hang = False
        while True:
            finished = worker.poll() is not None
            events, offset = _read_events(events_path, offset)
            for event in events:
                item = f"{event['op']}|{event['pass']}"
                if event["event"] == "start":
                    current, current_since = event, time.time()
                else:
                    entry = ops.setdefault(event["op"], {"name": event["name"],
                                                         "variant": event["variant"]})
                    entry[event["pass"]] = event["result"]
                    done.add(item)
                    current = None
                    if event["pass"] == "forward":
                        count = sum(1 for value in ops.values() if "forward" in value)
                        if count % 100 == 0:
                            log(f"  ... {count} entries, {time.time() - started:.0f} s")
            if finished:
                break
            if current is not None and time.time() - current_since > HARD_TIME_LIMIT_S:
                worker.kill()
                worker.wait()
                killed_for_hang = True
                break
            time.sleep(0.2)
        if worker.returncode == 0 and not killed_for_hang:
            break
        if current is None:
            raise RuntimeError(f"worker exited with {worker.returncode} outside any op; "
                               f"see {stderr_path}")
        item = f"{current['op']}|{current['pass']}"
        if killed_for_hang:
            reason = f"hang: killed after {HARD_TIME_LIMIT_S} s"
        else:
            code = worker.returncode
            name = signal.Signals(-code).name if code < 0 else f"exit code {code}"
            reason = f"crashed the process ({name})"
        crashes.append({"op": current["op"], "pass": current["pass"], "reason": reason})
        log(f"  !! {item}: {reason}; restarting the worker")
        ops.setdefault(current["op"], {})[current["pass"]] = {"status": "error",
                                                              "reason": reason}
        done.add(item)
    elapsed = time.time() - started
    report = CoverageReport(build_report(ops, crashes, elapsed))
    report["meta"]["command"] = command or " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
    json_path.write_text(json.dumps(report, indent=1, sort_keys=False))
    for path in (events_path, done_path):
        path.unlink(missing_ok=True)
    return report


def build_report(ops: dict, crashes: list, elapsed: float) -> dict:
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "elapsed_s": round(elapsed, 1),
        "op_db_entries": len(ops),
        "samples_per_op": SAMPLES_PER_OP,
        "bf16_samples_per_op": BF16_SAMPLES_PER_OP,
        "tolerances": {"forward": FORWARD_TOLERANCE, "backward": BACKWARD_TOLERANCE,
                       "bfloat16": BF16_TOLERANCE},
        "targets": {"forward_native": FORWARD_NATIVE_TARGET,
                    "backward_native": BACKWARD_NATIVE_TARGET},
        "crashes_and_hangs": crashes,
    }
    try:
        import torch

        meta["torch_version"] = torch.__version__
    except Exception:  # noqa: BLE001
        pass
    for key, reason in KNOWN_FAILURES.items():
        if key in ops:
            ops[key]["known_failure"] = reason
    summary = {}
    for which in PASSES:
        counts = collections.Counter(entry.get(which, {}).get("status", "missing")
                                     for entry in ops.values())
        denominator = sum(counts[status] for status in ("native", "fallback", "mismatch",
                                                         "error"))
        summary[which] = {
            "counts": dict(counts),
            "denominator": denominator,
            "rates": {status: (counts[status] / denominator if denominator else 0.0)
                      for status in ("native", "fallback", "mismatch", "error")},
            "passing_rate": ((counts["native"] + counts["fallback"]) / denominator
                             if denominator else 0.0),
        }
    fallback_totals: collections.Counter = collections.Counter()
    for entry in ops.values():
        for which in ("forward", "backward"):
            for aten, calls in entry.get(which, {}).get("fallback_ops", {}).items():
                fallback_totals[aten] += 1  # entries, not calls
    meta["fallback_aten_ops_by_entries"] = dict(fallback_totals.most_common())
    return {"meta": meta, "summary": summary, "ops": ops}


def describe(report: dict) -> str:
    lines = [f"op_db entries: {report['meta']['op_db_entries']}, "
             f"{report['meta']['elapsed_s']} s"]
    for which in PASSES:
        part = report["summary"][which]
        counts = part["counts"]
        lines.append(
            f"{which:9s} native {part['rates']['native']:6.1%}  "
            + "  ".join(f"{status} {counts.get(status, 0)}" for status in STATUSES + ("n/a",)
                        if status in counts or status in STATUSES)
            + f"  (denominator {part['denominator']})")
    for crash in report["meta"]["crashes_and_hangs"]:
        lines.append(f"crash/hang: {crash['op']} [{crash['pass']}]: {crash['reason']}")
    return "\n".join(lines)


def _worst(report: dict, which: str, limit: int = 25) -> str:
    failing = [(key, entry[which]) for key, entry in report["ops"].items()
               if entry.get(which, {}).get("status") in ("fallback", "mismatch", "error")]
    lines = [f"  {key}: {result['status']}"
             + (f" ({result.get('reason', '')[:120]})" if result.get("reason") else
                f" (fallback: {', '.join(sorted(result.get('fallback_ops', {})))[:120]})")
             for key, result in failing[:limit]]
    more = len(failing) - limit
    return "\n".join(lines) + (f"\n  ... and {more} more" if more > 0 else "")


# ----------------------------------------------------------------------------------------------
# pytest
# ----------------------------------------------------------------------------------------------

try:
    import pytest
except ImportError:  # script mode without pytest installed
    pytest = None

if pytest is not None:

    @pytest.fixture(scope="module")
    def coverage_report():
        report = measure(DEFAULT_JSON, log=lambda message: None,
                         command="pytest tests/test_opinfo.py")
        print("\n" + describe(report))
        return report

    def test_forward_native_rate(coverage_report):
        part = coverage_report["summary"]["forward"]
        rate = part["rates"]["native"]
        assert rate >= FORWARD_NATIVE_TARGET, (
            f"forward float32 native pass rate {rate:.1%} < target {FORWARD_NATIVE_TARGET:.0%} "
            f"({part['counts']}; {part['counts'].get('unsupported', 0)} entries without float32 "
            f"support excluded); details in {DEFAULT_JSON}\n" + _worst(coverage_report, "forward"))

    def test_backward_native_rate(coverage_report):
        part = coverage_report["summary"]["backward"]
        rate = part["rates"]["native"]
        assert rate >= BACKWARD_NATIVE_TARGET, (
            f"backward float32 native pass rate {rate:.1%} < target "
            f"{BACKWARD_NATIVE_TARGET:.0%} ({part['counts']}; unsupported and n/a excluded); "
            f"details in {DEFAULT_JSON}\n" + _worst(coverage_report, "backward"))

    def test_defer_and_fuse_matches_strict_mode(coverage_report):
        differing = {key: entry["forward"]["defer_and_fuse"]
                     for key, entry in coverage_report["ops"].items()
                     if entry.get("forward", {}).get("defer_and_fuse", "equal") != "equal"}
        checked = sum(1 for entry in coverage_report["ops"].values()
                      if "defer_and_fuse" in entry.get("forward", {}))
        assert checked > 0, "no entry ran in DeferAndFuse mode"
        assert not differing, (f"{len(differing)} of {checked} entries differ between "
                               f"DeferAndFuse and strict mode: {differing}")

    def test_no_crash_or_hang(coverage_report):
        crashes = coverage_report["meta"]["crashes_and_hangs"]
        assert not crashes, f"ops that crashed or hung the process: {crashes}"


# ----------------------------------------------------------------------------------------------
# Script
# ----------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="output JSON file")
    parser.add_argument("--ops", help="comma-separated entries (name or name.variant) to run")
    parser.add_argument("--in-process", action="store_true",
                        help="no supervisor: run in this process, print results (debugging)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--done", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    only = set(args.ops.split(",")) if args.ops else None
    if args.worker:
        worker_main(args.worker, args.done, only)
        return 0
    if args.in_process:
        events = args.json.with_suffix(".events.jsonl")
        events.parent.mkdir(parents=True, exist_ok=True)
        events.unlink(missing_ok=True)
        worker_main(str(events), None, only)
        for line in events.read_text().splitlines():
            event = json.loads(line)
            if event["event"] == "result":
                print(f"{event['op']:40s} {event['pass']:9s} {json.dumps(event['result'])}")
        return 0
    report = measure(args.json, only, command=" ".join(
        ["python tests/test_opinfo.py", *(argv if argv is not None else sys.argv[1:])]))
    print(describe(report))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

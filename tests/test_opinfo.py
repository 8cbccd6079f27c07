"""Op coverage of the ``tpu`` device measured with PyTorch's own OpInfo database.

Every entry of ``torch.testing._internal.common_methods_invocations.op_db`` runs on CPU and on
``tpu`` with the same sample inputs, and each entry gets one verdict per pass:

``forward``    float32, the first ``SAMPLES_PER_OP`` samples; also checks DeferAndFuse mode
``backward``   float32 gradients of the outputs against a fixed random cotangent
``bfloat16``, ``float16``            forward, one sample, tolerances below one ulp
``int64``, ``int32``, ``uint8``, ``bool``  forward on inputs of that dtype, one sample; integer
               and bool outputs compared exactly
``inplace``    float32, the entry's in-place variant (``op.inplace_variant``): the returned tensor
               must be its input, and the written values CPU's
``out``        float32, ``out=`` tensors of size zero (entries with ``supports_out``): they must be
               resized without warning, returned, and hold CPU's values

The verdicts:

``native``       matches CPU and no CPU fallback happened while it ran on tpu
``fallback``     matches CPU, but ``torch_tpu.metrics()["fallback_ops"]`` was not empty
``mismatch``     wrong values, dtype, shape, structure or device compared with CPU
``error``        an exception (or a time-out, or a crash of the process) on tpu where CPU succeeded
``unsupported``  the pass cannot run: dtype or variant not supported by the entry, inputs that
                 cannot be moved to tpu (sparse, quantized), CPU itself failing on every sample;
                 always with a reason, and excluded from the denominator of the rates
``n/a``          backward only: the entry does not support autograd

Random ops and ops returning uninitialized memory are compared by shape and dtype only.

The measurement runs in ``WORKERS`` worker subprocesses, each taking every other op_db entry
(ops run in-process there, each pass under a time limit, retried once after a time-out) watched
by a supervisor, so that an op that crashes or hangs the interpreter is recorded as an ``error``
and the run resumes after it. Results go to ``benchmarks/results/opinfo_coverage.json`` (local).
Compiled programs persist between runs in ``build/opinfo_program_cache`` (a ``TORCH_TPU_CACHE_DIR``
directory tier), so a second run loads most of them instead of compiling.

The gate: ``tests/opinfo_record.json`` (committed) holds the verdicts of a full run. The suite
fails when an (entry, pass) native there is anything else now, naming entry, pass and verdict;
entries that became native are reported, not failed. Refresh the record, and ``docs/ops.md``
that ``tools/generate_ops_doc.py`` generates from it, with::

    .venv/bin/python tests/test_opinfo.py --refresh-record && .venv/bin/python tools/generate_ops_doc.py

(``--refresh-record --from-json`` takes the measurement the last pytest run left in
``benchmarks/results/opinfo_coverage.json`` instead of measuring again.)

As a script (no pytest)::

    .venv/bin/python tests/test_opinfo.py          # full run, prints changes against the record
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
from typing import NamedTuple

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
#: Samples per entry for the other passes: the first one CPU accepts among the first
#: ``EXTRA_SAMPLES_DRAWN`` (an in-place or integer sample CPU rejects does not count).
EXTRA_SAMPLES_PER_OP = 1
EXTRA_SAMPLES_DRAWN = 3
#: Per (entry, pass) limit enforced inside the worker with SIGALRM (interrupts Python code); a
#: pass that hits it is retried once (its programs are compiled and cached by then).
OP_TIME_LIMIT_S = 30
#: Per (entry, pass) limit enforced by the supervisor, which kills the worker (hangs in C++).
HARD_TIME_LIMIT_S = 120
#: Worker processes measuring disjoint shares of op_db at the same time (they share compiled
#: programs through the host-shared cache tier).
WORKERS = 2

FORWARD_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
BACKWARD_TOLERANCE = {"rtol": 1e-3, "atol": 1e-4}
#: Below one bfloat16 ulp (2**-8 relative at worst): a Python number rounded to bfloat16 where CPU
#: keeps it in float32 (or the reverse) is off by one ulp and must show as a mismatch.
BF16_TOLERANCE = {"rtol": 4e-3, "atol": 1e-5}
#: The same for float16 (one ulp is 2**-11 to 2**-10 relative).
F16_TOLERANCE = {"rtol": 5e-4, "atol": 1e-5}
#: DeferAndFuse against strict mode on the same tpu inputs (float32 forward): fusing may reorder
#: float arithmetic, nothing more; integer and bool results must be bit for bit equal.
FUSE_TOLERANCE = {"rtol": 1e-6, "atol": 1e-6}


class PassSpec(NamedTuple):
    """One measurement per entry: inputs of ``dtype``, calling the entry's ``variant``
    (``function``, ``inplace`` or ``out``), on the first ``samples`` samples CPU accepts among the
    first ``drawn``. Integer and bool outputs are compared exactly."""

    dtype: str
    variant: str
    samples: int
    drawn: int
    tolerance: dict


#: The forward passes, in record order (``backward`` is float32 autograd, measured after them).
FORWARD_PASSES = {
    "forward": PassSpec("float32", "function", SAMPLES_PER_OP, SAMPLES_PER_OP, FORWARD_TOLERANCE),
    "bfloat16": PassSpec("bfloat16", "function", EXTRA_SAMPLES_PER_OP, EXTRA_SAMPLES_PER_OP,
                         BF16_TOLERANCE),
    "float16": PassSpec("float16", "function", EXTRA_SAMPLES_PER_OP, EXTRA_SAMPLES_PER_OP,
                        F16_TOLERANCE),
    **{dtype: PassSpec(dtype, "function", EXTRA_SAMPLES_PER_OP, EXTRA_SAMPLES_DRAWN,
                       FORWARD_TOLERANCE) for dtype in ("int64", "int32", "uint8", "bool")},
    "inplace": PassSpec("float32", "inplace", EXTRA_SAMPLES_PER_OP, EXTRA_SAMPLES_DRAWN,
                        FORWARD_TOLERANCE),
    "out": PassSpec("float32", "out", EXTRA_SAMPLES_PER_OP, EXTRA_SAMPLES_DRAWN,
                    FORWARD_TOLERANCE),
}
PASSES = ("forward", "backward", *[which for which in FORWARD_PASSES if which != "forward"])
INTEGER_PASSES = ("int64", "int32", "uint8", "bool")
STATUSES = ("native", "fallback", "mismatch", "error", "unsupported")

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_JSON = ROOT / "benchmarks" / "results" / "opinfo_coverage.json"
#: The committed measurement: the per-entry gate compares with it, docs/ops.md is generated from it.
RECORD = ROOT / "tests" / "opinfo_record.json"
#: The workers' persistent program cache (``TORCH_TPU_CACHE_DIR``'s directory tier), kept between
#: runs in the build folder (``make clean`` removes it).
PROGRAM_CACHE_DIR = ROOT / "build" / "opinfo_program_cache"
#: Refreshes the record (and docs/ops.md) from a full run.
REFRESH_COMMAND = (".venv/bin/python tests/test_opinfo.py --refresh-record && "
                   ".venv/bin/python tools/generate_ops_doc.py")

#: Entries (``name`` or ``name.variant``) whose failure is understood: op -> reason. They still
#: run, keep their measured status, count in the rates, and are marked as known in the JSON.
_TIED_INDICES = ("bfloat16, float16 and integer passes: the indices of equal values follow "
                 "CPU's unstable selection order, which tpu's stable one need not match; the "
                 "values match")
KNOWN_FAILURES: dict[str, str] = {
    "rsqrt": "bfloat16 and float16 passes: CPU's half-precision rsqrt is one or two ulp off the "
             "correctly rounded 1/sqrt(x) that tpu computes",
    "sort": _TIED_INDICES,
    "argsort": _TIED_INDICES,
    "topk": _TIED_INDICES,
    "kthvalue": _TIED_INDICES,
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

    def _values_compared(self, op) -> bool:
        return not (op.name in RANDOM_OPS or op.name in UNINITIALIZED_OPS
                    or getattr(op, "has_nondeterministic_output", False))

    def _empty_outs(self, structure, device):
        """Zero-size tensors of each output's dtype: out= must resize them (no warning)."""
        torch = self.torch
        if isinstance(structure, torch.Tensor):
            return torch.empty(0, dtype=structure.dtype, device=device)
        if isinstance(structure, (list, tuple)) and structure and all(
                isinstance(item, torch.Tensor) for item in structure):
            return tuple(torch.empty(0, dtype=item.dtype, device=device) for item in structure)
        raise Untransferable(f"out= for an output of type {type(structure).__name__}")

    def _compare_other_references(self, op, spec: PassSpec, sample, cpu_out, tpu_out,
                                  mismatch: Exception, *, values: bool, exact: bool) -> None:
        """Raises `mismatch` (CPU's result against `tpu_out`) unless `tpu_out` matches one of
        the other references of a bfloat16 or float16 pass."""
        torch = self.torch
        if spec.dtype not in ("bfloat16", "float16") or spec.variant != "function":
            raise mismatch
        references = []
        try:
            with torch.backends.mkldnn.flags(enabled=False):
                references.append(self._call(op, "function", sample,
                                             (sample.input, sample.args, sample.kwargs)))
        except Exception:  # noqa: BLE001
            pass
        references.append(self._rounded_float32_reference(op, spec, sample, cpu_out))
        for reference in references:
            if reference is None:
                continue
            try:
                self.compare(tpu_out, reference, values=values, tolerance=spec.tolerance,
                             exact_integers=exact)
                return
            except Mismatch:
                continue
        raise mismatch

    def _rounded_float32_reference(self, op, spec: PassSpec, sample, cpu_out):
        """For the bfloat16 and float16 passes of the function variant: ``op`` on CPU with the
        sample's tensors of that dtype in float32, its outputs that CPU gives in that dtype
        rounded back to it. None where that does not apply or CPU cannot compute it."""
        torch = self.torch
        from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

        if spec.dtype not in ("bfloat16", "float16") or spec.variant != "function":
            return None
        dtype = getattr(torch, spec.dtype)

        def widen(value):
            if isinstance(value, torch.Tensor) and value.dtype == dtype:
                return value.detach().float()
            return value

        try:
            wide = self._call(op, "function", sample,
                              (widen(sample.input), tree_map(widen, list(sample.args)),
                               tree_map(widen, dict(sample.kwargs))))
        except Exception:  # noqa: BLE001
            return None
        wide_leaves, wide_spec = tree_flatten(wide)
        cpu_leaves, cpu_spec = tree_flatten(cpu_out)
        if wide_spec != cpu_spec:
            return None
        rounded = [w.to(dtype) if isinstance(c, torch.Tensor) and isinstance(w, torch.Tensor)
                   and c.dtype == dtype and w.dtype == torch.float32 else w
                   for w, c in zip(wide_leaves, cpu_leaves)]
        return tree_unflatten(rounded, wide_spec)

    def _call(self, op, variant, sample, inputs):
        """Runs one variant of ``op`` on ``inputs`` (input, args, kwargs); what to compare: the
        processed output, or (returned value, written tensor) for in-place and out=."""
        torch = self.torch
        first, args, kwargs = inputs
        if variant == "function":
            return sample.output_process_fn_grad(op(first, *args, **kwargs))
        if variant == "inplace":
            returned = op.inplace_variant(first, *args, **kwargs)
            if isinstance(first, torch.Tensor) and returned is not first:
                raise Mismatch("the in-place variant returned a new tensor, not its input")
            return returned, first
        device = first.device if isinstance(first, torch.Tensor) else self.tpu
        # The functional result on CPU tells the number and dtypes of the outputs.
        outs = self._empty_outs(op(sample.input, *sample.args, **sample.kwargs), device)
        returned = op(first, *args, out=outs, **kwargs)
        if isinstance(outs, torch.Tensor) and returned is not outs:
            raise Mismatch("out= variant returned a new tensor, not out")
        return returned, outs

    def run_forward(self, op, spec: PassSpec) -> dict:
        torch = self.torch
        dtype = getattr(torch, spec.dtype)
        values = self._values_compared(op)
        exact = spec.dtype in INTEGER_PASSES
        samples = self._samples(op, dtype, spec.drawn, requires_grad=False)
        if not samples:
            return {"status": "unsupported", "reason": "op_db yields no samples for this dtype"}
        fallbacks: collections.Counter = collections.Counter()
        ran = 0
        cpu_failures = []
        fuse_checked = spec.dtype == "float32" and spec.variant == "function"
        fuse_mismatch = None
        for sample in samples:
            if ran == spec.samples:
                break
            try:
                moved = self.move_sample(op, sample)
                # Its own inputs: an op that writes into an input must not see strict mode's write.
                moved_for_fuse = self.move_sample(op, sample) if fuse_checked else None
            except Untransferable as error:
                return {"status": "unsupported", "reason": str(error)}
            try:
                cpu_out = self._call(op, spec.variant, sample,
                                     (sample.input, sample.args, sample.kwargs))
            except OpTimeout:
                raise
            except Untransferable as error:
                return {"status": "unsupported", "reason": str(error)}
            except Exception as error:  # noqa: BLE001
                cpu_failures.append(_short(error))
                continue
            ran += 1
            sample_values = values and not _draws_random_numbers(sample, op.name)
            self.torch_tpu.reset_metrics()
            try:
                tpu_out = self._call(op, spec.variant, sample, moved)
                torch.tpu.synchronize()
            except (OpTimeout, Untransferable):
                raise
            except Mismatch as error:
                return {"status": "mismatch", "reason": str(error),
                        "fallback_ops": dict(fallbacks)}
            except Exception as error:  # noqa: BLE001
                fallbacks.update(self._fallbacks())
                return {"status": "error", "reason": _short(error),
                        "fallback_ops": dict(fallbacks)}
            fallbacks.update(self._fallbacks())
            try:
                try:
                    self.compare(tpu_out, cpu_out, values=sample_values,
                                 tolerance=spec.tolerance, exact_integers=exact)
                except Mismatch as mismatch:
                    # CPU's low-precision kernel depends on the host: oneDNN takes float16
                    # convolutions on hosts with AVX512-FP16 (ATen's own kernel, which other
                    # hosts run, is the reference then), and CPU's kernel can be the one off the
                    # exact result (its bfloat16 conv_transpose on some hosts: the op computed by
                    # CPU in float32 and rounded to the pass's dtype is the reference then).
                    self._compare_other_references(op, spec, sample, cpu_out, tpu_out, mismatch,
                                                   values=sample_values, exact=exact)
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
        values = self._values_compared(op)
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
        if which == "backward":
            return self.run_backward(op)
        spec = FORWARD_PASSES[which]
        if getattr(self.torch, spec.dtype) not in op.supported_dtypes("cpu"):
            return {"status": "unsupported", "reason": f"{spec.dtype} not supported by entry"}
        if spec.variant == "inplace" and op.inplace_variant is None:
            return {"status": "unsupported", "reason": "entry has no in-place variant"}
        if spec.variant == "out" and not op.supports_out:
            return {"status": "unsupported", "reason": "entry does not support out="}
        return self.run_forward(op, spec)


def _alarm(signum, frame):
    raise OpTimeout()


def worker_main(events_path: str, done_path: str | None, only: set[str] | None,
                shard: tuple[int, int] = (0, 1)) -> None:
    """Run every (entry, pass) of entries ``index % count == shard index`` not listed in
    ``done_path``, appending JSON lines to events."""
    import faulthandler

    faulthandler.enable()
    warnings.simplefilter("ignore")
    op_db = _import_op_db()
    harness = Harness()
    done = set()
    if done_path and os.path.exists(done_path):
        done = set(json.loads(Path(done_path).read_text()))
    signal.signal(signal.SIGALRM, _alarm)
    shard_index, shard_count = shard
    with open(events_path, "a", buffering=1) as events:
        for index, op in enumerate(op_db):
            key = op_key(op)
            if index % shard_count != shard_index:
                continue
            if only is not None and key not in only and op.name not in only:
                continue
            for which in PASSES:
                if f"{key}|{which}" in done:
                    continue
                start = time.perf_counter()
                for attempt in range(2):
                    events.write(json.dumps({"event": "start", "op": key, "pass": which}) + "\n")
                    signal.alarm(OP_TIME_LIMIT_S)
                    try:
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            result = harness.run_pass(op, which)
                        break
                    except OpTimeout:
                        result = {"status": "error", "reason": f"timed out after "
                                  f"{OP_TIME_LIMIT_S} s (SIGALRM), twice"}
                    except Exception as error:  # noqa: BLE001  (a bug in the harness or op_db)
                        result = {"status": "error", "reason": f"harness: {_short(error)}",
                                  "traceback": traceback.format_exc(limit=4)[-800:]}
                        break
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


class _Shard:
    """One supervised worker process measuring every ``count``-th entry; restarted after a crash
    or a hang, skipping what it already finished."""

    def __init__(self, index: int, count: int, json_path: Path, only: set[str] | None):
        self.index, self.count, self.only = index, count, only
        base = json_path.with_suffix("")
        self.events_path = Path(f"{base}.{index}.events.jsonl")
        self.done_path = Path(f"{base}.{index}.done.json")
        self.stderr_path = Path(f"{base}.{index}.worker.log")
        for path in (self.events_path, self.done_path, self.stderr_path):
            path.unlink(missing_ok=True)
        self.events_path.touch()
        self.offset = 0
        self.done: set[str] = set()
        self.finished = False
        self.start()

    def start(self) -> None:
        self.done_path.write_text(json.dumps(sorted(self.done)))
        command = [sys.executable, os.path.abspath(__file__), "--worker", str(self.events_path),
                   "--done", str(self.done_path), "--shard", f"{self.index}/{self.count}"]
        if self.only is not None:
            command += ["--ops", ",".join(sorted(self.only))]
        # Programs outlive the run in a directory tier (unless TORCH_TPU_CACHE_DIR names one):
        # the next run of the suite loads most of them instead of compiling.
        environment = {"TORCH_TPU_CACHE_DIR": str(PROGRAM_CACHE_DIR), **os.environ,
                       "PYTHONWARNINGS": "ignore"}
        with open(self.stderr_path, "ab") as stderr:
            self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr,
                                            env=environment, cwd=str(ROOT))
        self.current, self.current_since = None, time.time()

    def poll(self, ops: dict, crashes: list, log) -> None:
        """Reads new results into ``ops``; restarts the worker after a crash or a hang."""
        exited = self.process.poll() is not None
        events, self.offset = _read_events(self.events_path, self.offset)
        for event in events:
            if event["event"] == "start":
                self.current, self.current_since = event, time.time()
                continue
            entry = ops.setdefault(event["op"], {"name": event["name"],
                                                 "variant": event["variant"]})
            entry[event["pass"]] = event["result"]
            self.done.add(f"{event['op']}|{event['pass']}")
            self.current = None
        hung = (not exited and self.current is not None
                and time.time() - self.current_since > HARD_TIME_LIMIT_S)
        if hung:
            self.process.kill()
            self.process.wait()
        elif not exited:
            return
        elif self.process.returncode == 0:
            self.finished = True
            return
        if self.current is None:
            raise RuntimeError(f"worker exited with {self.process.returncode} outside any op; "
                               f"see {self.stderr_path}")
        item = f"{self.current['op']}|{self.current['pass']}"
        if hung:
            reason = f"hang: killed after {HARD_TIME_LIMIT_S} s"
        else:
            code = self.process.returncode
            reason = ("crashed the process "
                      f"({signal.Signals(-code).name if code < 0 else f'exit code {code}'})")
        crashes.append({"op": self.current["op"], "pass": self.current["pass"],
                        "reason": reason})
        log(f"  !! {item}: {reason}; restarting the worker")
        ops.setdefault(self.current["op"], {})[self.current["pass"]] = {"status": "error",
                                                                       "reason": reason}
        self.done.add(item)
        self.start()

    def clean_up(self) -> None:
        for path in (self.events_path, self.done_path):
            path.unlink(missing_ok=True)


def measure(json_path: Path = DEFAULT_JSON, only: set[str] | None = None,
            log=print, command: str | None = None, workers: int = WORKERS) -> dict:
    """Run the whole measurement in ``workers`` supervised worker processes (op_db entries
    dealt out round-robin) and write ``json_path``."""
    json_path = Path(json_path)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()
    ops: dict[str, dict] = {}
    crashes: list[dict] = []
    shards = [_Shard(index, workers, json_path, only) for index in range(workers)]
    reported = 0
    try:
        while not all(shard.finished for shard in shards):
            for shard in shards:
                if not shard.finished:
                    shard.poll(ops, crashes, log)
            count = sum(1 for value in ops.values() if "forward" in value)
            if count // 100 > reported // 100:
                log(f"  ... {count} entries, {time.time() - started:.0f} s")
            reported = count
            time.sleep(0.2)
    finally:
        for shard in shards:
            if shard.process.poll() is None:
                shard.process.kill()
                shard.process.wait()
    elapsed = time.time() - started
    report = CoverageReport(build_report(ops, crashes, elapsed))
    report["meta"]["workers"] = workers
    report["meta"]["command"] = command or " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
    json_path.write_text(json.dumps(report, indent=1, sort_keys=False))
    for shard in shards:
        shard.clean_up()
    return report


def build_report(ops: dict, crashes: list, elapsed: float) -> dict:
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "elapsed_s": round(elapsed, 1),
        "op_db_entries": len(ops),
        "samples_per_op": SAMPLES_PER_OP,
        "extra_samples_per_op": EXTRA_SAMPLES_PER_OP,
        "passes": {which: {"dtype": spec.dtype, "variant": spec.variant,
                           "samples": spec.samples, "tolerance": spec.tolerance}
                   for which, spec in FORWARD_PASSES.items()},
        "backward_tolerance": BACKWARD_TOLERANCE,
        "targets": {"forward_native": FORWARD_NATIVE_TARGET,
                    "backward_native": BACKWARD_NATIVE_TARGET},
        "crashes_and_hangs": crashes,
    }
    try:
        import torch

        meta["torch_version"] = torch.__version__
    except Exception:  # noqa: BLE001
        pass
    ops = {key: ops[key] for key in sorted(ops)}
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
        fallback_totals.update({aten for which in PASSES  # entries, not calls
                                for aten in entry.get(which, {}).get("fallback_ops", {})})
    meta["fallback_aten_ops_by_entries"] = dict(fallback_totals.most_common())
    return {"meta": meta, "summary": summary, "ops": ops}


# ----------------------------------------------------------------------------------------------
# The committed record and the per-entry gate
# ----------------------------------------------------------------------------------------------

RECORD_REASON_LIMIT = 120


def compact_record(report: dict) -> dict:
    """What tests/opinfo_record.json keeps of a report: verdicts, short reasons, fallback op
    names and rates (no timings, so that a refresh changes only what changed)."""
    meta = {key: report["meta"][key] for key in (
        "date", "torch_version", "op_db_entries", "workers", "elapsed_s", "samples_per_op",
        "extra_samples_per_op", "passes", "backward_tolerance", "targets", "crashes_and_hangs",
        "fallback_aten_ops_by_entries") if key in report["meta"]}
    summary = {which: {"native_rate": round(part["rates"]["native"], 4),
                       "denominator": part["denominator"],
                       "counts": dict(sorted(part["counts"].items()))}
               for which, part in report["summary"].items()}
    ops = {}
    for key in sorted(report["ops"]):
        entry = report["ops"][key]
        compact = {}
        for which in PASSES:
            result = entry.get(which)
            if result is None:
                continue
            verdict = {"status": result["status"]}
            # Why a pass cannot run is kept for float32 forward only (docs/ops.md shows it).
            trivial = result["status"] in ("unsupported", "n/a") and which != "forward"
            if result.get("reason") and not trivial:
                verdict["reason"] = " ".join(result["reason"].split())[:RECORD_REASON_LIMIT]
            if result.get("fallback_ops"):
                verdict["fallback_ops"] = sorted(result["fallback_ops"])
            if result.get("defer_and_fuse", "equal") != "equal":
                verdict["defer_and_fuse"] = result["defer_and_fuse"][:RECORD_REASON_LIMIT]
            if result.get("compared"):
                verdict["compared"] = result["compared"]
            compact[which] = verdict
        if entry.get("known_failure"):
            compact["known_failure"] = entry["known_failure"]
        ops[key] = compact
    return {"meta": meta, "summary": summary, "ops": ops}


def record_text(record: dict) -> str:
    """The record as JSON with one line per (entry, pass), so diffs name what changed."""
    lines = ["{",
             f' "meta": {json.dumps(record["meta"], sort_keys=True)},',
             ' "summary": {']
    summary = list(record["summary"].items())
    for number, (which, part) in enumerate(summary):
        comma = "," if number < len(summary) - 1 else ""
        lines.append(f"  {json.dumps(which)}: {json.dumps(part, sort_keys=True)}{comma}")
    lines += [" },", ' "ops": {']
    ops = list(record["ops"].items())
    for number, (key, entry) in enumerate(ops):
        lines.append(f"  {json.dumps(key)}: {{")
        items = list(entry.items())
        for item_number, (which, verdict) in enumerate(items):
            comma = "," if item_number < len(items) - 1 else ""
            lines.append(f"   {json.dumps(which)}: {json.dumps(verdict, sort_keys=True)}{comma}")
        lines.append("  }" + ("," if number < len(ops) - 1 else ""))
    lines += [" }", "}", ""]
    return "\n".join(lines)


def write_record(report: dict, path: Path = RECORD) -> dict:
    record = compact_record(report)
    Path(path).write_text(record_text(record))
    return record


def compare_with_record(report: dict, record: dict) -> tuple[list[str], list[str]]:
    """(regressions, improvements) of ``report`` against the committed ``record``: an (entry,
    pass) native there and anything else now is a regression; one not native there and native
    now is an improvement. Entries op_db no longer has are skipped."""
    regressions, improvements = [], []
    for key, entry in report["ops"].items():
        recorded = record["ops"].get(key)
        if recorded is None:
            improvements.append(f"{key}: new entry, not in the record")
            continue
        for which in PASSES:
            before = recorded.get(which, {}).get("status", "missing")
            result = entry.get(which, {})
            now = result.get("status", "missing")
            if before == "native" and now != "native":
                why = result.get("reason") or ", ".join(sorted(result.get("fallback_ops", {})))
                regressions.append(f"{key} [{which}]: native -> {now}"
                                   + (f" ({' '.join(why.split())[:200]})" if why else ""))
            elif before != "native" and now == "native":
                improvements.append(f"{key} [{which}]: {before} -> native")
    return regressions, improvements


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

    def test_no_entry_regresses_from_the_record(coverage_report):
        """Every (entry, pass) native in tests/opinfo_record.json is still native; entries that
        became native are reported so that the record gets refreshed."""
        record = json.loads(RECORD.read_text())
        regressions, improvements = compare_with_record(coverage_report, record)
        if regressions:
            # A loaded machine can push a pass past its time limit: measure the regressed
            # entries once more (their programs are cached now); only repeated regressions fail.
            again = measure(DEFAULT_JSON.with_name("opinfo_coverage.rerun.json"),
                            only={item.split(" [")[0] for item in regressions},
                            log=lambda message: None, command="pytest tests/test_opinfo.py")
            regressions, _ = compare_with_record(again, record)
        if improvements:
            message = (f"{len(improvements)} (entry, pass) improved over {RECORD.name}; refresh "
                       f"it with `{REFRESH_COMMAND}`:\n  " + "\n  ".join(improvements))
            print("\n" + message)
            warnings.warn(message, stacklevel=1)
        assert not regressions, (
            f"{len(regressions)} (entry, pass) regressed from native compared with "
            f"{RECORD.relative_to(ROOT)} (details in {DEFAULT_JSON}):\n  "
            + "\n  ".join(regressions))

    def test_record_comparison_names_entry_pass_and_verdict():
        """The gate's comparison on a made-up report: only native -> other fails."""
        record = {"ops": {"add": {"forward": {"status": "native"}, "int64": {"status": "native"},
                                  "out": {"status": "error", "reason": "x"}},
                          "gone": {"forward": {"status": "native"}}}}
        report = {"ops": {"add": {"forward": {"status": "native"},
                                  "int64": {"status": "mismatch",
                                            "reason": "output: dtype torch.float32,\n expected"},
                                  "out": {"status": "native"},
                                  "uint8": {"status": "fallback",
                                            "fallback_ops": {"aten::add.out": 1}}},
                          "new": {"bool": {"status": "native"}}}}
        regressions, improvements = compare_with_record(report, record)
        assert regressions == [
            "add [int64]: native -> mismatch (output: dtype torch.float32, expected)"]
        assert improvements == ["add [out]: error -> native", "new: new entry, not in the record"]

    def test_record_text_is_one_line_per_entry_pass():
        report = {"meta": {"date": "d", "workers": 2}, "ops": {
            "b": {"forward": {"status": "native", "seconds": 1.0, "fallback_ops": {}}},
            "a": {"forward": {"status": "fallback", "fallback_ops": {"aten::x": 2, "aten::w": 1}},
                  "out": {"status": "error", "reason": "Boom:\n  more"}}},
            "summary": {"forward": {"counts": {"native": 1, "fallback": 1}, "denominator": 2,
                                    "rates": {"native": 0.5}}}}
        text = record_text(compact_record(report))
        assert json.loads(text)["ops"]["a"]["out"] == {"status": "error", "reason": "Boom: more"}
        assert text.splitlines()[5:] == [
            ' "ops": {', '  "a": {',
            '   "forward": {"fallback_ops": ["aten::w", "aten::x"], "status": "fallback"},',
            '   "out": {"reason": "Boom: more", "status": "error"}', '  },', '  "b": {',
            '   "forward": {"status": "native"}', '  }', ' }', '}']

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
    parser.add_argument("--workers", type=int, default=WORKERS,
                        help=f"worker processes (default {WORKERS})")
    parser.add_argument("--refresh-record", action="store_true",
                        help=f"measure every entry and write {RECORD.relative_to(ROOT)}")
    parser.add_argument("--from-json", action="store_true",
                        help="with --refresh-record: take the measurement from --json instead")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--done", help=argparse.SUPPRESS)
    parser.add_argument("--shard", default="0/1", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    only = set(args.ops.split(",")) if args.ops else None
    if args.worker:
        index, count = (int(part) for part in args.shard.split("/"))
        worker_main(args.worker, args.done, only, (index, count))
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
    if args.refresh_record and only is not None:
        parser.error("--refresh-record measures every entry; drop --ops")
    if args.refresh_record and args.from_json:
        report = json.loads(args.json.read_text())
    else:
        report = measure(args.json, only, workers=args.workers, command=" ".join(
            ["python tests/test_opinfo.py", *(argv if argv is not None else sys.argv[1:])]))
        print(describe(report))
        print(f"wrote {args.json}")
    if args.refresh_record:
        write_record(report)
        print(f"wrote {RECORD}")
    elif only is None and RECORD.exists():
        regressions, improvements = compare_with_record(report, json.loads(RECORD.read_text()))
        for title, items in (("regressions", regressions), ("improvements", improvements)):
            print(f"{len(items)} {title} against {RECORD.name}" + "".join(
                f"\n  {item}" for item in items))
    return 0


if __name__ == "__main__":
    sys.exit(main())

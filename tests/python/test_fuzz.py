"""The differential fuzzer (tools/fuzz.py) in the suite: a fixed set of seeded random programs over
views, in-place writes, broadcasting, type promotion, reductions, indexing, casts and matmul runs
on PyTorch CPU and on tpu in strict, debug, defer_and_fuse and compiled modes, and must agree.
A failure prints a self-contained repro (docs/testing.md). The first tests check that the
comparator can fail."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import fuzz  # noqa: E402

# Seeds and sizes are fixed: the test is reproducible and bounded (about 30 s on two idle cores,
# 45 s under load).
# Eager modes share the per-op programs they compile, so they are cheap next to compiled mode,
# which traces and compiles every program: it runs on a subset.
EAGER_SEED, EAGER_PROGRAMS = 1, 75
COMPILED_SEED, COMPILED_PROGRAMS = 2, 25


def _reference(seed=3):
    program = fuzz.generate(seed)
    fn, make_inputs = program.functions()
    return program, fuzz.run_program(fn, make_inputs, "cpu", "eager")


def _perturbed(result, pick):
    outputs, inputs, strides = result
    outputs = [o.clone() for o in outputs]
    pick(outputs)
    return outputs, inputs, strides


def test_comparator_flags_a_wrong_result():
    # Programs whose first output is a float and an integer tensor, found by seed (deterministic).
    checked = set()
    for seed in range(200):
        program, reference = _reference(seed)
        first = reference[0][0]
        if first.numel() == 0 or first.dtype in checked:
            continue
        levels = program.output_levels(), program.input_levels()
        assert fuzz.compare_results(reference, reference, *levels) == []

        def add_one(outputs):
            changed = outputs[0].contiguous().clone()
            flat = changed.view(-1)
            if changed.dtype == torch.bool:
                flat[0] = ~flat[0]
            elif not changed.dtype.is_floating_point:
                flat[0] += 1
            elif flat.isfinite().any():  # well past any tolerance: the scale is the largest magnitude
                i = int(flat.isfinite().nonzero()[0])
                flat[i] += 1 + flat[flat.isfinite()].abs().max()
            else:
                flat[0] = 0.0
            outputs[0] = changed

        problems = fuzz.compare_results(_perturbed(reference, add_one), reference, *levels)
        assert problems and problems[0].startswith("output 0"), problems

        def cast(outputs):
            outputs[0] = outputs[0].to(torch.float64)

        assert fuzz.compare_results(_perturbed(reference, cast), reference, *levels)

        def grow(outputs):
            outputs[0] = torch.cat([outputs[0].reshape(-1), outputs[0].reshape(-1)])

        assert fuzz.compare_results(_perturbed(reference, grow), reference, *levels)
        if first.dtype.is_floating_point:
            def nan(outputs):
                changed = outputs[0].contiguous().clone()
                flat = changed.view(-1)
                flat[0] = 0.0 if flat[0].isnan() else float("nan")
                outputs[0] = changed

            assert fuzz.compare_results(_perturbed(reference, nan), reference, *levels)
        checked.add(first.dtype)
        if {torch.float32, torch.int64} <= checked:
            break
    assert {torch.float32, torch.int64} <= checked


def test_comparator_flags_a_changed_input_and_strides():
    program, reference = _reference()
    outputs, inputs, strides = reference
    changed = [i.clone() for i in inputs]
    changed[0] = changed[0].to(torch.float64) if changed[0].dtype != torch.float64 else changed[0] + 1
    levels = program.output_levels(), program.input_levels()
    assert any(p.startswith("input 0") for p in fuzz.compare_results((outputs, changed, strides), reference, *levels))
    wrong_strides = [tuple(reversed(s)) if len(s) > 1 else s for s in strides]
    if any(o.dim() > 1 and o.shape[0] > 1 and o.shape[-1] > 1 and s != w
           for o, s, w in zip(outputs, strides, wrong_strides)):
        assert fuzz.compare_results((outputs, inputs, wrong_strides), reference, *levels)


def test_a_wrong_tpu_result_is_caught_end_to_end(monkeypatch):
    """A tpu run that computes something else (here: its first output off by one on tpu only) is
    reported, with a repro that names the mode and holds the program's source."""
    program, reference = next((p, r) for p, r in map(_reference, range(100)) if r[0][0].numel())
    real_functions = fuzz.Program.functions

    def sabotaged(self):
        fn, make_inputs = real_functions(self)

        def wrong(*inputs):
            outputs = fn(*inputs)
            if inputs[0].device.type == "cpu":
                return outputs
            first = ~outputs[0] if outputs[0].dtype == torch.bool else outputs[0] + 1
            return (first,) + tuple(outputs[1:])
        return wrong, make_inputs

    monkeypatch.setattr(fuzz.Program, "functions", sabotaged)
    found = fuzz.run_one(program, ["strict"])
    assert found and found[0].mode == "strict" and found[0].problems[0].startswith("output 0"), found
    text = fuzz.repro(program, "strict", found[0].problems)
    assert program.source() in text and "MODE = 'strict'" in text
    compile(text, "<repro>", "exec")


def _run(seed, programs, modes):
    mismatches, stats = fuzz.fuzz(seed, programs=programs, modes=modes, log=lambda *_: None,
                                  minimize_budget_s=30.0)
    assert stats["programs"] == programs
    report = "\n\n".join(f"program seed {m.program.seed}, mode {m.mode}:\n" + "\n".join(m.problems)
                         + "\n--- repro ---\n" + m.repro + "\n--- minimized ---\n" + m.minimized
                         for m in mismatches)
    assert not mismatches, f"{len(mismatches)} mismatches between tpu and CPU:\n{report}"


@pytest.mark.strict_mode
def test_fuzz_eager_modes():
    _run(EAGER_SEED, EAGER_PROGRAMS, ["strict", "debug", "defer_and_fuse"])


@pytest.mark.strict_mode
def test_fuzz_compiled():
    _run(COMPILED_SEED, COMPILED_PROGRAMS, ["compiled"])

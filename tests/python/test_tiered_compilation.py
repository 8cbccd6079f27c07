"""Tiered compilation (csrc/exec/tiered_compilation.h): a whole-step program (a fused graph, a
torch.compile graph) compiles quickly first; once it runs again its optimized build is compiled in
the background and later runs take it. Opt-in (TORCH_TPU_TIERED_COMPILATION=1). Each scenario
runs in a fresh process with private cache tiers, so the counts are this program's alone; results
are checked against PyTorch CPU at every tier."""

import pytest

from cache_helpers import results
from conftest import run_python

# A child's preamble: step(x) runs a small fused step on tpu and checks it against CPU;
# report() prints the metrics as one JSON line.
PROGRAM = r'''
import json, os
import torch, torch_tpu

weight = torch.linspace(-1, 1, 48).reshape(6, 8)

def model(x, w):
    return torch.tanh(x @ w).sum(0) * 0.5 + x.mean()

def step(x, function=model):
    got = function(x.to("tpu"), weight.to("tpu")).cpu()  # the read cuts the fused graph
    torch.testing.assert_close(got, model(x, weight))

def report(**extra):
    metrics = torch_tpu.metrics()
    metrics.pop("fallback_ops")
    print("RESULT " + json.dumps({**metrics, **extra}), flush=True)
'''

# Steps of the same shapes are one program; the tier-up wait is off so tests need not idle.
SAME_PROGRAM_STEPS = r'''
inputs = [torch.linspace(-2, 2, 24).reshape(4, 6) * (i + 1) for i in range(4)]
step(inputs[0]); report()
step(inputs[1]); torch_tpu._C._wait_for_tier_ups(); report()
step(inputs[2]); step(inputs[3]); report()
'''


def child_env(tmp_path, **extra) -> dict:
    return {"TORCH_TPU_SHARED_CACHE_DIR": str(tmp_path / "shared"),
            "TORCH_TPU_TIERED_COMPILATION": "1", "TORCH_TPU_DEFER_AND_FUSE": "1",
            "TORCH_TPU_TIER_UP_QUIET_MS": "0", **extra}


def test_a_fused_step_compiles_quickly_and_runs_optimized_once_it_repeats(tmp_path):
    first, second, later = results(run_python(PROGRAM + SAME_PROGRAM_STEPS, **child_env(tmp_path)))
    # The fused graph is the only program: compiled at the quick tier.
    assert first["compile_count"] == first["quick_compiles"] == 1
    assert first["tier_up_compiles"] == 0
    # Its second run asked for the optimized build, which is not a compile of a new program.
    assert second["tier_up_compiles"] == 1
    assert second["compile_count"] == 1 and second["cache_misses"] == 1
    # Later runs take it; nothing else is compiled.
    assert later["tiered_up_programs"] == 1
    assert later["tier_up_compiles"] == 1 and later["compile_count"] == 1
    assert later["fused_graphs"] == 4


def test_a_program_that_runs_once_is_never_optimized(tmp_path):
    code = PROGRAM + r'''
step(torch.ones(4, 6)); step(torch.ones(5, 6)); torch_tpu._C._wait_for_tier_ups(); report()
'''
    report, = results(run_python(code, **child_env(tmp_path)))
    assert report["quick_compiles"] == report["compile_count"] == 2
    assert report["tier_up_compiles"] == 0 and report["tiered_up_programs"] == 0


@pytest.mark.parametrize("setting", [None, "0"], ids=["unset", "0"])
def test_tiered_compilation_is_off_unless_asked_for(tmp_path, setting, monkeypatch):
    # Off by default: the builds round differently, so runs would not repeat bit for bit.
    monkeypatch.delenv("TORCH_TPU_TIERED_COMPILATION", raising=False)
    env = child_env(tmp_path)
    env.pop("TORCH_TPU_TIERED_COMPILATION")
    if setting is not None:
        env["TORCH_TPU_TIERED_COMPILATION"] = setting
    *_, later = results(run_python(PROGRAM + SAME_PROGRAM_STEPS, **env))
    assert later["compile_count"] == 1
    assert later["quick_compiles"] == later["tier_up_compiles"] == later["tiered_up_programs"] == 0


def test_a_warm_process_starts_from_the_optimized_program(tmp_path):
    env = child_env(tmp_path)
    *_, cold = results(run_python(PROGRAM + SAME_PROGRAM_STEPS, **env))
    assert cold["tiered_up_programs"] == 1
    # The store holds both builds; a new process asking for the quick one gets the optimized.
    *_, warm = results(run_python(PROGRAM + SAME_PROGRAM_STEPS, **env))
    assert warm["compile_count"] == warm["quick_compiles"] == 0
    assert warm["tier_up_compiles"] == warm["tiered_up_programs"] == 0
    assert warm["cache_hits_shared"] == 1


def test_a_compiled_graph_tiers_up_too(tmp_path):
    code = PROGRAM + r'''
compiled = torch.compile(model, backend="tpu")
inputs = [torch.linspace(-2, 2, 24).reshape(4, 6) * (i + 1) for i in range(4)]
step(inputs[0], compiled); step(inputs[1], compiled); torch_tpu._C._wait_for_tier_ups()
step(inputs[2], compiled); step(inputs[3], compiled); report()
'''
    report, = results(run_python(code, **child_env(tmp_path, TORCH_TPU_DEFER_AND_FUSE="0")))
    # The graph's program compiled quickly, then optimized; per-op programs (the inputs'
    # transfers, the CPU read) are strict mode's, compiled optimized at once.
    assert report["quick_compiles"] == 1
    assert report["tier_up_compiles"] == report["tiered_up_programs"] == 1


def test_deterministic_algorithms_keep_one_build(tmp_path):
    # The builds round differently (no fused multiply-adds at level 0); a process asking for
    # determinism gets the same values from every run of a step: programs compile optimized at
    # once, and a program compiled quickly before keeps its quick build.
    code = PROGRAM + r'''
x = torch.linspace(-3, 3, 24).reshape(4, 6)
def run():
    got = model(x.to("tpu"), weight.to("tpu")).cpu()
    torch.testing.assert_close(got, model(x, weight))
    torch_tpu._C._wait_for_tier_ups()
    return got
early = [run(), run()]  # quick, then tiering up
torch.use_deterministic_algorithms(True)
kept = [run() for _ in range(3)]
y = torch.linspace(-1, 1, 30).reshape(5, 6)
fresh = [model(y.to("tpu"), weight.to("tpu")).cpu() for _ in range(3)]
torch.testing.assert_close(fresh[0], model(y, weight))
report(kept=all(torch.equal(early[0], v) for v in kept),
       fresh=all(torch.equal(fresh[0], v) for v in fresh))
'''
    report, = results(run_python(code, **child_env(tmp_path)))
    assert report["kept"] and report["fresh"]
    assert report["quick_compiles"] == 1 and report["compile_count"] == 2
    assert report["tiered_up_programs"] == 0

"""Warm-start preloading (docs/cache.md): a run loads, at import, the programs the previous run of
the same command used, and only then. Each case runs the same child program twice (the manifest
is named by the command line), choosing what the child does through variables outside the
runtime's environment."""

import os
import subprocess
import sys

import pytest

from cache_helpers import PROGRAM, results
from conftest import run_python

# Counts strict mode's per-op programs.
pytestmark = pytest.mark.strict_mode

# PHASE picks the child's behaviour without renaming the run (only TORCH_TPU_*, XLA_* and the
# like name it).
CHILD = PROGRAM + r'''
phase = os.environ.get("PHASE", "work")
if phase == "wait_for_preloads":
    # Nothing touches the device until the preloader has loaded what it was expected to.
    expected = int(os.environ["EXPECTED_PRELOADS"])
    deadline = time.monotonic() + 60
    while torch_tpu.metrics()["cache_preloaded"] < expected and time.monotonic() < deadline:
        time.sleep(0.01)
    preloaded_before_first_op = torch_tpu.metrics()["cache_preloaded"]
    work()
    report(preloaded_before_first_op=preloaded_before_first_op)
elif phase == "initialized_around_work":
    expected = int(os.environ["EXPECTED_PRELOADS"])
    deadline = time.monotonic() + 60
    while torch_tpu.metrics()["cache_preloaded"] < expected and time.monotonic() < deadline:
        time.sleep(0.01)
    runtime_started = torch_tpu._C._runtime_is_initialized()
    initialized_before = torch.tpu.is_initialized()
    work()
    report(runtime_started_before_work=runtime_started, initialized_before_work=initialized_before,
           initialized_after_work=torch.tpu.is_initialized())
elif phase == "idle":
    time.sleep(0.5)
    report(runtime_started=torch_tpu._C._runtime_is_initialized())
elif phase == "change_flags_then_work":
    os.environ["XLA_FLAGS"] = "--xla_cpu_enable_fast_math=false"
    work()
    report()
elif phase == "fork_then_work_in_child":
    child = os.fork()
    if child == 0:
        try:
            work()
            code = 0
        except RuntimeError as error:
            print("CHILD ERROR " + str(error), flush=True)
            code = 3
        sys.stdout.flush()
        if os.environ.get("CHILD_EXITS") == "normally":
            sys.exit(code)  # runs the child's exit handlers too
        os._exit(code)
    _, status = os.waitpid(child, 0)
    report(child_exit=os.waitstatus_to_exitcode(status),
           runtime_started=torch_tpu._C._runtime_is_initialized())
else:
    work()
    report()
'''


def run(tmp_path, phase="work", **env):
    settings = {"TORCH_TPU_SHARED_CACHE_DIR": str(tmp_path / "shared"), "PHASE": phase, **env}
    return run_python(CHILD, **settings)


def manifests(directory):
    return sorted(directory.glob("*.preload"))


def test_preloading_does_not_count_as_the_process_using_the_device(tmp_path):
    # torch's DeviceMesh sets each rank's device only while torch.tpu.is_initialized() is false:
    # a runtime the preloader started at import must leave that choice to it.
    cold, = results(run(tmp_path))
    warm, = results(run(tmp_path, "initialized_around_work",
                        EXPECTED_PRELOADS=str(cold["compile_count"])))
    assert warm["runtime_started_before_work"] is True
    assert warm["initialized_before_work"] is False
    assert warm["initialized_after_work"] is True


def test_second_run_loads_the_first_runs_programs_at_import(tmp_path):
    cold, = results(run(tmp_path))
    assert cold["compile_count"] >= 3 and cold["cache_preloaded"] == 0
    # The manifest sits beside the entries without counting as one.
    assert len(manifests(tmp_path / "shared")) == 1
    assert len(list((tmp_path / "shared").glob("*.xc"))) == cold["compile_count"]

    warm, = results(run(tmp_path, "wait_for_preloads",
                        EXPECTED_PRELOADS=str(cold["compile_count"])))
    assert warm["preloaded_before_first_op"] == cold["compile_count"]
    assert warm["compile_count"] == 0
    # A preloaded program counts as a hit of the tier it came from at its first use.
    assert warm["cache_hits_shared"] == cold["compile_count"]
    assert warm["cache_misses"] == 0


def test_warm_persistent_tier_preloads_into_a_new_hosts_shared_tier(tmp_path):
    remote = {"TORCH_TPU_CACHE_DIR": str(tmp_path / "remote")}
    cold, = results(run(tmp_path, **remote))
    assert len(manifests(tmp_path / "remote")) == 1
    # Another host: an empty shared tier, the same command.
    other = {"TORCH_TPU_SHARED_CACHE_DIR": str(tmp_path / "other_shared"), **remote}
    warm, = results(run_python(CHILD, PHASE="wait_for_preloads",
                               EXPECTED_PRELOADS=str(cold["compile_count"]), **other))
    assert warm["preloaded_before_first_op"] == cold["compile_count"]
    assert warm["compile_count"] == 0
    assert warm["cache_hits_remote"] == cold["compile_count"]
    assert len(list((tmp_path / "other_shared").glob("*.xc"))) == cold["compile_count"]


def test_clear_cache_removes_manifests_too(tmp_path):
    results(run(tmp_path))
    assert len(manifests(tmp_path / "shared")) == 1
    results(run_python("import torch_tpu; torch_tpu.clear_cache('shared')",
                       TORCH_TPU_SHARED_CACHE_DIR=str(tmp_path / "shared")))
    assert manifests(tmp_path / "shared") == []
    assert list((tmp_path / "shared").glob("*.xc")) == []


def test_a_run_without_manifest_starts_no_runtime_at_import(tmp_path):
    idle, = results(run(tmp_path, "idle"))
    assert idle["runtime_started"] is False
    # It used no program, so it leaves no manifest either.
    assert manifests(tmp_path / "shared") == []


@pytest.mark.parametrize("change", ["command_line", "compiler_flags", "preload_off"])
def test_another_run_preloads_nothing(tmp_path, change):
    cold, = results(run(tmp_path))
    if change == "command_line":
        completed = run_python(CHILD + "# another script\n", PHASE="work",
                               TORCH_TPU_SHARED_CACHE_DIR=str(tmp_path / "shared"))
    elif change == "compiler_flags":
        completed = run(tmp_path, XLA_FLAGS="--xla_cpu_enable_fast_math=false")
    else:
        completed = run(tmp_path, TORCH_TPU_PRELOAD="0")
    warm, = results(completed)
    assert warm["cache_preloaded"] == 0
    if change == "compiler_flags":
        assert warm["compile_count"] == cold["compile_count"]  # other executables
    else:
        assert warm["compile_count"] == 0
        assert warm["cache_hits_shared"] == cold["compile_count"]


def test_run_that_changes_its_runtime_environment_after_import_records_nothing(tmp_path):
    # Preloading at import next time would start the runtime before the flags are set.
    results(run(tmp_path, "change_flags_then_work"))
    assert manifests(tmp_path / "shared") == []


def test_damaged_entry_is_left_to_the_demand_path_which_reports_it_once(tmp_path):
    cold, = results(run(tmp_path))
    entries = sorted((tmp_path / "shared").glob("*.xc"))
    entries[0].write_bytes(entries[0].read_bytes()[:100])
    loadable = cold["compile_count"] - 1
    warm, = results(run(tmp_path, "wait_for_preloads", EXPECTED_PRELOADS=str(loadable)))
    assert warm["preloaded_before_first_op"] == loadable
    assert warm["cache_corrupt_entries"] == 1
    assert warm["compile_count"] == 1
    assert warm["cache_hits_shared"] == loadable


def test_forked_child_records_no_manifest_for_its_parent(tmp_path):
    # The parent never uses the device: were the child's manifest stored under the parent's
    # name, the parent would start the runtime at its next import and break its children. The
    # child exits through its exit handlers, as a plain os.fork() child does.
    report, = results(run(tmp_path, "fork_then_work_in_child", CHILD_EXITS="normally"))
    assert report["child_exit"] == 0
    assert report["runtime_started"] is False
    assert manifests(tmp_path / "shared") == []


def test_child_forked_after_preloading_started_cannot_use_the_device(tmp_path):
    cold, = results(run(tmp_path, "fork_then_work_in_child"))
    assert cold["child_exit"] == 0
    # The same command once used the device in this process: now it has a manifest.
    results(run(tmp_path, "work"))
    completed = run(tmp_path, "fork_then_work_in_child")
    report, = results(completed)
    assert report["child_exit"] == 3
    assert ("CHILD ERROR torch_tpu: cannot use the tpu device in a forked subprocess"
            in completed.stdout)


@pytest.mark.parametrize("plugin, world, joins", [("cuda", "2", True), ("tpu", "4", True),
                                                  ("cpu", "2", False), ("cuda", "1", False)])
def test_ranks_of_plugins_with_multi_process_clients_do_not_preload(monkeypatch, plugin, world,
                                                                    joins):
    # Their client must be created once tpu_dist's group has formed, not at import.
    from torch_tpu import _preload

    monkeypatch.setenv("TORCH_TPU_PJRT_PLUGIN", plugin)
    monkeypatch.setenv("WORLD_SIZE", world)
    assert _preload._joins_other_processes() is joins

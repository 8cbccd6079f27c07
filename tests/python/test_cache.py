"""The three-tier compilation cache (docs/cache.md): hits across processes, one compile per
program among processes started together, and stored entries that are damaged, foreign or being
written never load. Each case runs in child processes: the tiers are configured once per process."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import torch_tpu
from cache_helpers import PROGRAM, entry_is_whole, entry_key, results
from conftest import run_python

# Counts compiles and cache hits of strict mode's per-op programs.
pytestmark = pytest.mark.strict_mode

WARNING = "torch_tpu compilation cache: ignoring unusable entry"


def tiers(tmp_path, shared=True, remote=True) -> dict:
    env = {"TORCH_TPU_SHARED_CACHE_DIR": str(tmp_path / "shared")}
    if not shared:
        env["TORCH_TPU_SHARED_CACHE_MAX_BYTES"] = "0"
    if remote:
        env["TORCH_TPU_CACHE_DIR"] = str(tmp_path / "remote")
    return env


def test_warm_persistent_tier_makes_a_new_process_compile_nothing(tmp_path):
    cold, = results(run_python(PROGRAM + "work(); report()", **tiers(tmp_path)))
    assert cold["compile_count"] >= 3
    assert cold["cache_misses"] == cold["compile_count"]
    assert len(list((tmp_path / "remote").glob("*.xc"))) == cold["compile_count"]

    # A new host: its shared tier is empty, the persistent one is warm. Loaded executables run
    # on any device, like compiled ones.
    env = tiers(tmp_path)
    env["TORCH_TPU_SHARED_CACHE_DIR"] = str(tmp_path / "other_host_shared")
    warm, = results(run_python(PROGRAM + "work(device='tpu:1'); report()", **env))
    assert warm["compile_count"] == 0
    assert warm["cache_misses"] == 0
    assert warm["cache_hits_remote"] == cold["compile_count"]
    # What came from the persistent tier was copied to that host's shared tier.
    del env["TORCH_TPU_CACHE_DIR"]
    from_shared, = results(run_python(PROGRAM + "work(); report(info=torch_tpu.cache_info())",
                                      **env))
    assert from_shared["compile_count"] == 0
    assert from_shared["cache_hits_shared"] == cold["compile_count"]
    info = from_shared["info"]
    assert info["shared"]["entries"] == cold["compile_count"]
    assert info["shared"]["location"] == str(tmp_path / "other_host_shared")
    assert info["remote"]["enabled"] is False
    assert info["shared"]["hit_rate"] == 1.0


def test_another_device_topology_does_not_share_entries(tmp_path):
    # The device count is part of the runtime's identity, hence of every key.
    env = tiers(tmp_path)
    two, = results(run_python(PROGRAM + "work(); report()", **env))
    one, = results(run_python(PROGRAM + "work(); report()", TORCH_TPU_NUM_CPU_DEVICES="1", **env))
    assert one["compile_count"] == two["compile_count"]
    assert one["cache_hits_shared"] == one["cache_hits_remote"] == one["cache_corrupt_entries"] == 0
    assert len(list((tmp_path / "remote").glob("*.xc"))) == 2 * two["compile_count"]


def test_other_compiler_flags_do_not_share_entries(tmp_path):
    # Plugins read XLA_FLAGS when they compile: an executable built under other flags differs.
    env = tiers(tmp_path)
    plain, = results(run_python(PROGRAM + "work(); report()", **env))
    fast, = results(run_python(PROGRAM + "work(); report()",
                               XLA_FLAGS="--xla_cpu_enable_fast_math=true", **env))
    assert fast["compile_count"] == plain["compile_count"]
    assert fast["cache_hits_shared"] == fast["cache_hits_remote"] == 0
    again, = results(run_python(PROGRAM + "work(); report()",
                                XLA_FLAGS="--xla_cpu_enable_fast_math=true", **env))
    assert again["compile_count"] == 0


def test_processes_started_together_compile_each_program_once(tmp_path):
    start_at = time.time() + 4
    code = PROGRAM + f"time.sleep(max(0, {start_at} - time.time())); work(); report()"
    env = {**os.environ, **tiers(tmp_path, remote=False)}
    children = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(2)]
    reports = []
    for child in children:
        stdout, stderr = child.communicate(timeout=300)
        reports += results(subprocess.CompletedProcess(child.args, child.returncode, stdout,
                                                       stderr))
    programs = len(list((tmp_path / "shared").glob("*.xc")))
    assert programs >= 3
    # Each program compiled once; the other process waited for it and loaded it.
    assert sum(report["compile_count"] for report in reports) == programs
    assert sum(report["cache_hits_shared"] for report in reports) == programs


DAMAGES = ["truncated", "empty", "flipped_byte", "other_format_version", "foreign_file",
           "swapped_between_programs"]
# Not evenly spaced: a width that steps up like a growing sequence would share bucketed programs
# (csrc/exec/growing_shapes.h); each width here has its own.
WIDTHS = [5 + n * (n + 1) for n in range(len(DAMAGES))]


def damage(paths: list[Path], how: str) -> None:
    contents = [path.read_bytes() for path in paths]
    for index, path in enumerate(paths):
        data = contents[index]
        if how == "truncated":
            data = data[:len(data) // 2]
        elif how == "empty":
            data = b""
        elif how == "flipped_byte":
            data = data[:-7] + bytes([data[-7] ^ 0x40]) + data[-6:]
        elif how == "other_format_version":
            data = data[:8] + (999).to_bytes(4, "little") + data[12:]
        elif how == "foreign_file":
            data = b"<html>not found</html>" * 40
        elif how == "swapped_between_programs":
            data = contents[(index + 1) % len(contents)]
        path.write_bytes(data)


@pytest.mark.parametrize("tier", ["shared", "remote"])
def test_damaged_or_foreign_entries_are_counted_and_compiled_over(tmp_path, tier):
    env = tiers(tmp_path, shared=tier == "shared", remote=tier == "remote")
    store = tmp_path / tier
    widths = list(WIDTHS)
    cold, = results(run_python(PROGRAM + f"[work(n) for n in {widths}]; report()", **env))
    # Each kind of damage hits the entries of one width's programs.
    by_width = {n: [] for n in widths}
    for path in store.glob("*.xc"):
        key = entry_key(path.read_bytes())
        # Pointwise programs are built over the flattened operands (4 * width elements).
        width, = [n for n in widths if f"4x{n}xf32" in key or f"<{4 * n}xf32>" in key]
        by_width[width].append(path)
    assert sum(map(len, by_width.values())) == cold["compile_count"]
    for width, how in zip(widths, DAMAGES):
        assert len(by_width[width]) >= 2
        damage(sorted(by_width[width]), how)

    completed = run_python(PROGRAM + (
        f"for n, how in zip({widths}, {DAMAGES}):\n"
        "    torch_tpu.reset_metrics(); work(n); report(how=how)\n"), **env)
    for width, report in zip(widths, results(completed)):
        programs = len(by_width[width])
        assert report["compile_count"] == programs, report["how"]
        assert report["cache_corrupt_entries"] == programs, report["how"]
        assert report[f"cache_hits_{tier}"] == 0, report["how"]
    # Logged once per process, however many entries were bad.
    assert completed.stderr.count(WARNING) == 1, completed.stderr

    # Compiling over the bad entries rewrote them: a new process loads them all.
    warm, = results(run_python(PROGRAM + f"[work(n) for n in {widths}]; report()", **env))
    assert warm["compile_count"] == 0
    assert warm[f"cache_hits_{tier}"] == cold["compile_count"]
    assert warm["cache_corrupt_entries"] == 0


def test_concurrent_writers_never_expose_a_partial_entry(tmp_path):
    # Two processes started together write the same entries (shared tier off, so no lock orders
    # them) while this process and they read them back.
    start_at = time.time() + 3
    code = PROGRAM + (f"time.sleep(max(0, {start_at} - time.time()))\n"
                      "for n in range(1, 7): work(n)\n"
                      "report()")
    env = {**os.environ, **tiers(tmp_path, shared=False)}
    (tmp_path / "remote").mkdir()
    children = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(2)]
    partial_reads = []
    whole_reads = 0
    done = threading.Event()

    def watch():
        nonlocal whole_reads
        while not done.is_set():
            for path in (tmp_path / "remote").glob("*.xc"):
                try:
                    data = path.read_bytes()
                except FileNotFoundError:
                    continue
                if entry_is_whole(data):
                    whole_reads += 1
                else:
                    partial_reads.append((path.name, len(data)))
            time.sleep(0.001)  # leave the two cores to the writers

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        reports = []
        for child in children:
            stdout, stderr = child.communicate(timeout=300)
            reports += results(subprocess.CompletedProcess(child.args, child.returncode, stdout,
                                                           stderr))
    finally:
        done.set()
        watcher.join()
    assert partial_reads == []
    assert whole_reads > 0
    assert all(report["cache_corrupt_entries"] == 0 for report in reports)
    assert not list((tmp_path / "remote").glob("*.tmp.*"))


def test_malformed_store_url_is_refused_with_a_clear_error(tmp_path):
    code = PROGRAM + ("try:\n    work()\nexcept RuntimeError as error:\n"
                      "    print('ERROR', str(error).splitlines()[0])\n")
    completed = run_python(code, TORCH_TPU_CACHE_DIR="https://cache.example:port/torch_tpu",
                           TORCH_TPU_SHARED_CACHE_DIR=str(tmp_path / "shared"))
    assert completed.returncode == 0, completed.stderr
    assert ("ERROR aten::mul.Tensor(Float[4, 6], Long[] on cpu): TORCH_TPU_CACHE_DIR="
            "https://cache.example:port/torch_tpu: expected http[s]://host[:port][/path]"
            ) in completed.stdout


def test_shared_tier_evicts_least_recently_used_entries_past_its_cap(tmp_path):
    cap = 12000  # room for about two of these programs
    env = {**tiers(tmp_path, remote=False), "TORCH_TPU_SHARED_CACHE_MAX_BYTES": str(cap)}
    report, = results(run_python(PROGRAM + "work(); work(7); report()", **env))
    sizes = [path.stat().st_size for path in (tmp_path / "shared").glob("*.xc")]
    assert report["compile_count"] >= 6
    assert 1 <= len(sizes) < report["compile_count"]
    assert sum(sizes) <= cap


def test_shared_directory_others_can_write_is_not_used(tmp_path):
    # Executables loaded from a directory another user controls would run their code.
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared").chmod(0o777)
    completed = run_python(PROGRAM + "work(); report(info=torch_tpu.cache_info())",
                           **tiers(tmp_path, remote=False))
    report, = results(completed)
    assert report["info"]["shared"]["enabled"] is False
    assert not list((tmp_path / "shared").iterdir())
    assert (f"torch_tpu compilation cache: host shared tier off: {tmp_path / 'shared'} is not a "
            "directory of this user's that only they can write") in completed.stderr


@pytest.mark.parametrize("bound, value, kept", [("ENTRIES", "2", 2), ("BYTES", "1", 1)])
def test_memory_tier_is_bounded(tmp_path, bound, value, kept):
    # Past the byte bound the newest executable still stays: it is about to run.
    code = PROGRAM + "work(); report(info=torch_tpu.cache_info())"
    report, = results(run_python(code, **{f"TORCH_TPU_CACHE_MEMORY_MAX_{bound}": value},
                                 **tiers(tmp_path, shared=False, remote=False)))
    assert report["compile_count"] >= 3
    assert report["info"]["memory"]["entries"] == kept


def test_cache_info_and_clear_cache_in_this_process():
    info = torch_tpu.cache_info()
    assert set(info) == {"memory", "shared", "remote", "misses"}
    assert set(info["memory"]) == {"enabled", "location", "entries", "bytes", "hits", "hit_rate"}
    torch_tpu.clear_cache("memory")
    assert torch_tpu.cache_info()["memory"]["entries"] == 0
    with pytest.raises(ValueError, match=r"^clear_cache: unknown tier 'disk': expected 'memory', "
                                         r"'shared', 'remote' or 'all'$"):
        torch_tpu.clear_cache("disk")


def test_programs_with_device_checks_hit_whatever_ran_before(tmp_path):
    # A device-side check writes an id the process assigns; the id is an argument, so the module
    # and its key are the same in a process that registered other checks first.
    gather = ("torch.testing.assert_close(torch.arange(5.).to('tpu')[torch.tensor([4, 0]).to('tpu')]"
              ".cpu(), torch.tensor([4., 0.]))\n")
    other = "torch.tensor([1., 2.]).to('tpu').index_select(0, torch.tensor([1]).to('tpu')).cpu()\n"
    env = tiers(tmp_path, remote=False)
    cold, = results(run_python(PROGRAM + gather + "report()", **env))
    assert cold["compile_count"] >= 1
    warm, = results(run_python(PROGRAM + other + "torch_tpu.reset_metrics()\n" + gather +
                               "report()", **env))
    assert warm["compile_count"] == 0
    assert warm["cache_hits_shared"] == cold["compile_count"]

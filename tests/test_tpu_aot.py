"""TPU readiness without a TPU: every lowered overload's sample program and the example models'
forward + backward programs compile for v5e and v6e with libtpu (deviceless AOT), and no target
rejects what it accepted when ``tests/tpu_aot_record.json`` was committed.

Every OpInfo entry's sample runs on the local device to capture its programs (slow: it lives
next to test_opinfo.py, outside tests/python). libtpu compiles only programs whose text differs
from the recorded one's (or all of them when libtpu's version differs): the compiler is
deterministic, so an unchanged program keeps its recorded verdict. The example models are traced
every time and compiled only when their programs' fingerprint differs from the recorded one. Update the record with
``.venv/bin/python tools/tpu_aot_report.py`` after a lowering change (it compiles only what
changed; ``--recompile`` compiles everything).

The measurement runs in a child process (the tool's own command line): libtpu changes process-wide
state (signal dispositions, crash handlers, a host-wide lock), and a crash inside the compiler fails
this test with the child's output instead of taking the pytest worker down with it.
"""

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import tpu_aot_report  # noqa: E402

RECORD = json.loads(tpu_aot_report.DEFAULT_JSON.read_text())


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    # The tool reuses the verdicts of the JSON it is pointed at and overwrites it with its report.
    report = tmp_path_factory.mktemp("tpu_aot") / "report.json"
    shutil.copy(tpu_aot_report.DEFAULT_JSON, report)
    child = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "tpu_aot_report.py"), "--json", str(report),
         "--targets", ",".join(RECORD["targets"]), "--no-doc"],
        cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if child.returncode != 0:
        ended = (f"signal {signal.Signals(-child.returncode).name}" if child.returncode < 0
                 else f"exit status {child.returncode}")
        pytest.fail(f"tools/tpu_aot_report.py ended with {ended}:\n{child.stderr[-6000:]}")
    return json.loads(report.read_text())


def test_no_target_rejects_an_overload_it_accepted(measured):
    regressions = []
    for overload, passes in RECORD["ops"].items():
        for pass_name, recorded in passes.items():
            now = measured["ops"].get(overload, {}).get(pass_name)
            if now is None:
                continue  # no longer reached by a sample: reported by the coverage test below
            for target, result in recorded["targets"].items():
                if result["accepted"] and not now["targets"][target]["accepted"]:
                    regressions.append(f"{overload} ({pass_name}) on {target}: "
                                       f"{now['targets'][target]['error']}")
    assert not regressions, "\n".join(regressions)


def test_programs_not_in_the_record_are_accepted(measured):
    rejected = []
    for overload, passes in measured["ops"].items():
        for pass_name, now in passes.items():
            if pass_name in RECORD["ops"].get(overload, {}):
                continue
            rejected += [f"{overload} ({pass_name}) on {target}: {result['error']}"
                         for target, result in now["targets"].items() if not result["accepted"]]
    assert not rejected, "\n".join(rejected)


def test_every_recorded_overload_still_has_a_sample(measured):
    missing = sorted(set(RECORD["ops"]) - set(measured["ops"]))
    assert not missing, f"overloads no OpInfo sample reaches any more: {missing}"


def test_every_lowered_functional_overload_has_a_sample(measured):
    # In-place and out= variants run their functional lowering's program plus a write-back.
    unsampled = sorted(set(measured["lowered_without_sample"]) -
                       set(measured["variants_without_sample"]))
    assert not unsampled, (f"lowered overloads no sample reaches: {unsampled}; give each a call in "
                           "tools/tpu_aot_report.py's DIRECT_SAMPLES")


def test_example_models_compile_forward_and_backward(measured):
    for name, model in measured["models"].items():
        for target, result in model["targets"].items():
            assert result["accepted"], f"{name} on {target}: {result.get('error')}"
            phases = {p["phase"] for p in result["programs"]}
            assert phases == {"forward", "backward"}, (name, target, phases)
            assert result["hbm_bytes"] > 0

"""TPU readiness without a TPU: every lowered overload's sample program and the example models'
forward + backward programs compile for v5e and v6e with libtpu (deviceless AOT), and no target
rejects what it accepted when ``tests/tpu_aot_record.json`` was committed.

Slow (every OpInfo entry runs on the local device, then libtpu compiles each sample): it lives
next to test_opinfo.py, outside tests/python. Regenerate the record with
``.venv/bin/python tools/tpu_aot_report.py`` after a lowering change is meant to alter it.
"""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import tpu_aot_report  # noqa: E402

RECORD = json.loads(tpu_aot_report.DEFAULT_JSON.read_text())


@pytest.fixture(scope="module")
def measured():
    return tpu_aot_report.measure(list(RECORD["targets"]))


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

"""torchtitan's Llama 3 debug model trains on tpu with the losses of the same run on PyTorch CPU.

dist_workers/torchtitan_llama3.py builds torchtitan 0.3.0's `debugmodel` flavour and trains 3
AdamW steps on synthetic tokens: in one process on tpu against one process on the CPU, and under
torchrun with 2 ranks sharded by torchtitan's FSDP2 function (`apply_fsdp_to_decoder`) over a
DeviceMesh on tpu_dist against the same on CPU/Gloo (and against one process). No op may run on
the CPU fallback. Why the worker and not torchtitan's trainer: docs/ecosystem.md "torchtitan".
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torchtitan") is None,
                                reason="torchtitan is not installed (pip install --no-deps "
                                "torchtitan==0.3.0, see tools/install_deps.py)")

WORKER = os.path.join(os.path.dirname(__file__), "dist_workers", "torchtitan_llama3.py")
TIMEOUT = 300


def run(device, nproc=None):
    launcher = ([] if nproc is None else
                ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"])
    result = subprocess.run([sys.executable, *launcher, WORKER, device], capture_output=True,
                            text=True, timeout=TIMEOUT)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    reports = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(reports) == 1, output[-6000:]
    return json.loads(reports[0][len("RESULT "):])


def assert_same_losses(actual, expected):
    assert len(actual) == len(expected) == 3
    torch.testing.assert_close(torch.tensor(actual), torch.tensor(expected), rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def cpu_losses():
    losses = run("cpu")["losses"]
    assert losses[-1] < losses[0]
    return losses


def test_debug_model_trains_on_tpu_like_on_cpu(cpu_losses):
    tpu = run("tpu")
    assert_same_losses(tpu["losses"], cpu_losses)
    assert tpu["fallback_ops"] == {}


def test_fsdp2_over_tpu_dist_trains_like_gloo_and_like_one_process(cpu_losses):
    gloo, tpu_dist = run("cpu", nproc=2), run("tpu", nproc=2)
    assert_same_losses(tpu_dist["losses"], gloo["losses"])
    assert_same_losses(tpu_dist["losses"], cpu_losses)
    assert tpu_dist["fallback_ops"] == {}

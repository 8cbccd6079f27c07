"""Shared by the torch.compile tests: a fresh Dynamo per test, and the check that every graph ran
as one program."""

import pytest
import torch
import torch._dynamo

import torch_tpu
from conftest import run_python


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles from scratch (no graphs cached by an earlier test) and counts its own
    metrics."""
    torch._dynamo.reset()
    torch_tpu.reset_metrics()
    yield
    torch._dynamo.reset()


def assert_native():
    """Every graph ran as one program: none ran eagerly, no op on the CPU fallback."""
    torch.tpu.synchronize()
    metrics = torch_tpu.metrics()
    assert metrics.get("compiled_graphs_eager", {}) == {}
    assert metrics.get("fallback_ops", {}) == {}


def assert_runs(code: str, **env: str) -> None:
    """`code` runs in a fresh interpreter (settings read once per process) and prints 'ok' last."""
    result = run_python(code + "print('ok')\n", **env)
    assert result.stdout.strip().endswith("ok"), result.stderr[-2000:]

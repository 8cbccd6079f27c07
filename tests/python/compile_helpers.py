"""Shared by the torch.compile tests: a fresh Dynamo per test, the check that every graph ran as
one program, and the buckets graphs with symbolic sizes run."""

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


def smallest_bucket(lengths):
    """The smallest bucket of the symbol first bucketed at one of `lengths`: where padding adds
    little to a graph's work, short lengths share one bucket (keys read "value -> smallest")."""
    chosen = {int(key.split(" -> ")[1]) for key in
              torch_tpu.metrics().get("dynamic_shape_smallest_buckets", {})
              if int(key.split(" -> ")[0]) in lengths}
    assert len(chosen) == 1, torch_tpu.metrics().get("dynamic_shape_smallest_buckets")
    return chosen.pop()


def buckets_of(lengths, smallest=1):
    """Buckets `lengths` fall in: powers of two, none below `smallest`."""
    return len({max(smallest, 1 << (length - 1).bit_length()) for length in lengths})

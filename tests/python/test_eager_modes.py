"""Strict mode is asynchronous and reports device failures at the next sync; debug mode is
synchronous and checks indices of index-taking ops."""

import time

import pytest
import torch

import torch_tpu
from conftest import run_python


def test_strict_mode_returns_before_queued_work_completes():
    x = torch.randn(2_000_000, device="tpu")
    y = x * 1.0001 + 0.5  # compile both executables first
    torch.tpu.synchronize()
    for _ in range(100):
        y = y * 1.0001 + 0.5
    queued_without_waiting = not torch_tpu._C._is_ready(y)
    torch.tpu.synchronize()
    assert queued_without_waiting, "the last op had already finished when control returned"
    assert torch_tpu._C._is_ready(y)


def test_device_failure_surfaces_at_the_next_sync_not_earlier():
    x = torch.ones(1000, device="tpu")
    torch_tpu._C._fail_storage(x, "injected device fault")
    y = (x * 2).sum()  # queued: must not raise here
    with pytest.raises(RuntimeError, match="injected device fault"):
        torch.tpu.synchronize()
    with pytest.raises(RuntimeError, match="injected device fault"):
        y.item()
    # The device stays usable.
    assert torch.equal((torch.ones(3, device="tpu") * 3).cpu(), torch.full((3,), 3.0))
    torch.tpu.synchronize()


DEBUG_CASES = """
import torch
x = torch.randn(5, 4, device="tpu")
long = lambda *v: torch.tensor(v, device="tpu")
cases = {
    "index": lambda: x[long(1, 7)],
    "index_select": lambda: x.index_select(0, long(0, 5)),
    "gather": lambda: x.gather(1, long(0, 4).view(1, 2).expand(5, 2).contiguous()),
    "scatter": lambda: x.scatter(0, long(9, 0, 0, 0).view(1, 4), torch.ones(1, 4, device="tpu")),
    "embedding": lambda: torch.nn.functional.embedding(long(2, 6), x),
    "index_put_": lambda: x.index_put_((long(-6),), torch.zeros(4, device="tpu")),
    "take": lambda: x.take(long(20)),
}
for name, case in cases.items():
    try:
        case()
        print(name, "NO ERROR")
    except IndexError as error:
        print(name, "IndexError", error)
print("usable", (x.sum() == x.cpu().sum()).item() or abs(x.sum().item() - x.cpu().sum().item()) < 1e-4)
"""


def test_debug_mode_raises_index_error_for_each_index_taking_op():
    result = run_python(DEBUG_CASES, TORCH_TPU_LAUNCH_BLOCKING="1")
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(" ", 1) for line in result.stdout.strip().splitlines())
    expected = {
        "index": "index 7 is out of bounds for dimension 0 with size 5",
        "index_select": "index 5 is out of bounds for dimension 0 with size 5",
        "gather": "index 4 is out of bounds for dimension 1 with size 4",
        "scatter": "index 9 is out of bounds for dimension 0 with size 5",
        "embedding": "index 6 is out of bounds for dimension 0 with size 5",
        "index_put_": "index -6 is out of bounds for dimension 0 with size 5",
        "take": "index 20 is out of bounds for dimension 0 with size 20",
    }
    for op, message in expected.items():
        assert lines[op].startswith("IndexError"), (op, lines[op])
        assert message in lines[op], (op, lines[op])
    assert lines["usable"] == "True"


@pytest.mark.strict_mode
def test_strict_mode_does_not_pay_for_index_checks():
    x = torch.randn(5, 4, device="tpu")
    index = torch.tensor([0, 4], device="tpu")
    x.index_select(0, index)
    torch_tpu.reset_metrics()
    x.index_select(0, index)
    assert torch_tpu.metrics()["execute_count"] == 1  # no bounds-check program ran


def test_debug_mode_runs_synchronously():
    result = run_python(
        "import torch, torch_tpu\n"
        "x = torch.randn(1_000_000, device='tpu')\n"
        "y = x * 2 + 1\n"
        "print(torch_tpu._C._is_ready(y), torch_tpu._C._debug_mode())\n",
        TORCH_TPU_LAUNCH_BLOCKING="1",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-2:] == ["True", "True"]

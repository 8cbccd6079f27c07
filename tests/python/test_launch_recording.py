"""Launch recording (the benchmarks' floor, benchmarks/common.py recorded_floor): every program a
step launches is kept with its argument buffers, in order, and replayed from C++ without
touching any tensor."""

import pytest
import torch

import torch_tpu

pytestmark = pytest.mark.strict_mode


def test_a_step_records_each_launch_and_replaying_them_changes_no_tensor():
    x = torch.arange(6.0, device="tpu")
    y = torch.ones(6, device="tpu")

    def step():
        x.add_(y)  # in place: its program aliases x's buffer
        return (x * 2).sum()

    step()
    torch.tpu.synchronize()
    before = torch_tpu.metrics()["execute_count"]
    torch_tpu._C._set_launch_recording(True)
    try:
        result = step()
        torch.tpu.synchronize()
        launched = torch_tpu.metrics()["execute_count"] - before
        assert torch_tpu._C._recorded_launch_count() == launched == 3
        seconds = torch_tpu._C._replay_recorded_launches(4)
        assert seconds > 0
    finally:
        torch_tpu._C._set_launch_recording(False)
    # Replays donate nothing and publish nothing: the step's results stand.
    assert torch.equal(x.cpu(), torch.arange(6.0) + 2)
    assert result.item() == ((torch.arange(6.0) + 2) * 2).sum().item()
    assert torch_tpu._C._recorded_launch_count() == 0  # switching recording off forgets them


def test_replaying_without_a_recorded_launch_raises():
    torch_tpu._C._set_launch_recording(True)
    try:
        with pytest.raises(RuntimeError, match="ReplayRecordedLaunches: no launch recorded"):
            torch_tpu._C._replay_recorded_launches(1)
    finally:
        torch_tpu._C._set_launch_recording(False)

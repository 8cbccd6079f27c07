"""A compiled graph's program compiles off the Python thread, as a strict launch's does
(csrc/exec/program_issue.h): a call whose program is new returns with its outputs queued behind
the compile, so the backward (and the optimizer step) are issued while the forward's program
still compiles. Values must equal CPU's; a compile error surfaces at the next sync, naming the
graph."""

import copy
import os

import pytest
import torch
from torch import nn

import torch_tpu
from compile_helpers import assert_native, fresh_dynamo  # noqa: F401  (autouse fixture)
from conftest import sample

C = torch_tpu._C

pytestmark = pytest.mark.skipif(
    C._debug_mode() or os.environ.get("TORCH_TPU_COMPILE_THREADS") == "0",
    reason="debug mode and TORCH_TPU_COMPILE_THREADS=0 compile synchronously")


def _model(seed):
    torch.manual_seed(seed)
    # Sizes no other test uses, so that every program is new.
    return nn.Sequential(nn.Linear(13, 29), nn.GELU(), nn.LayerNorm(29), nn.Linear(29, 7 + seed))


def test_forward_and_backward_are_issued_before_their_programs_compile():
    cpu_model = _model(0)
    tpu_model = copy.deepcopy(cpu_model).to("tpu")

    def loss_of(model, x):
        return model(x).square().mean()

    compiled = torch.compile(loss_of, backend="tpu")
    x = sample((5, 13), torch.float32, seed=1)
    torch.tpu.synchronize()
    C._hold_compiles(True)
    try:
        loss = compiled(tpu_model, x.to("tpu"))
        loss.backward()
        # The forward graph, autograd's seed gradient and the backward graph: all issued while
        # no compile could start.
        queued = C._queued_launches()
    finally:
        C._hold_compiles(False)
    assert queued >= 3, queued
    want = loss_of(cpu_model, x)
    want.backward()
    torch.testing.assert_close(loss.cpu(), want.detach())
    for tpu_parameter, cpu_parameter in zip(tpu_model.parameters(), cpu_model.parameters(),
                                            strict=True):
        torch.testing.assert_close(tpu_parameter.grad.cpu(), cpu_parameter.grad)
    assert C._queued_launches() == 0
    assert_native()


def test_a_compile_error_of_a_compiled_graph_surfaces_at_sync_naming_the_graph():
    tpu_model = _model(1).to("tpu")
    compiled = torch.compile(tpu_model, backend="tpu")
    rows = sample((6, 13), torch.float32, seed=2)
    x = rows[:5].to("tpu")
    # The same sizes and strides as a view into a longer storage: the graph Dynamo traced, a
    # program of its own.
    shifted = rows.to("tpu")[1:]
    with torch.no_grad():
        compiled(x)
        torch.tpu.synchronize()
        C._inject_compile_failure("injected compiler error")
        y = compiled(shifted)  # its compile fails in the background: no error here
        with pytest.raises(RuntimeError, match=r"compiled graph \d+\(.*injected compiler error"):
            torch.tpu.synchronize()
        with pytest.raises(RuntimeError, match="injected compiler error"):
            y.cpu()
        # The graph and the device stay usable.
        torch.testing.assert_close(compiled(x).cpu(), _model(1)(rows[:5]))


def test_a_graph_that_writes_its_inputs_queues_its_writes_in_order():
    # BatchNorm's running statistics are graph inputs the program writes: a launch queued
    # behind its compile must leave them as eager does, and eager ops issued after it (still
    # queued) must read the written values.
    torch.manual_seed(2)
    cpu_model = nn.Sequential(nn.Linear(11, 17), nn.BatchNorm1d(17))
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    compiled = torch.compile(tpu_model, backend="tpu")
    x = sample((6, 11), torch.float32, seed=3)
    torch.tpu.synchronize()
    C._hold_compiles(True)
    try:
        out = compiled(x.to("tpu"))
        doubled_mean = tpu_model[1].running_mean * 2  # reads the queued write
        queued = C._queued_launches()
    finally:
        C._hold_compiles(False)
    assert queued >= 2, queued
    want = cpu_model(x)
    torch.testing.assert_close(out.detach().cpu(), want.detach())
    torch.testing.assert_close(tpu_model[1].running_mean.cpu(), cpu_model[1].running_mean)
    torch.testing.assert_close(tpu_model[1].running_var.cpu(), cpu_model[1].running_var)
    torch.testing.assert_close(doubled_mean.cpu(), cpu_model[1].running_mean * 2)
    assert tpu_model[1].num_batches_tracked.item() == cpu_model[1].num_batches_tracked.item()

"""Strict mode compiles off the Python thread: a launch whose program is not compiled yet returns
at once and waits in the device's launch queue (csrc/exec/launch_queue.h), behind which later
launches keep their order. Results must equal CPU's; compile errors surface at the next sync."""

import os
import threading

import pytest
import torch

import torch_tpu
from conftest import run_python

C = torch_tpu._C

pytestmark = [
    pytest.mark.strict_mode,
    pytest.mark.skipif(C._debug_mode() or os.environ.get("TORCH_TPU_COMPILE_THREADS") == "0",
                       reason="debug mode and TORCH_TPU_COMPILE_THREADS=0 compile synchronously"),
]

_next_width = [0]


def _fresh(rows=3, seed=0):
    """A CPU tensor and its tpu copy of a width no other test uses, so its programs are new."""
    _next_width[0] += 1
    # Not evenly spaced, so no two widths share a bucketed program (csrc/exec/growing_shapes.h).
    width = 1000 + 37 * _next_width[0] ** 2 + seed
    cpu = torch.randn(rows, width, generator=torch.Generator().manual_seed(width))
    return cpu, cpu.to("tpu")


class _HeldCompiles:
    """Background compiles wait while held: every launch needing a new program queues."""

    def __enter__(self):
        torch.tpu.synchronize()
        C._hold_compiles(True)
        return self

    def __exit__(self, *exc):
        C._hold_compiles(False)


def test_dispatch_returns_before_the_compile_ends():
    inputs = [_fresh() for _ in range(4)]
    torch.tpu.synchronize()
    before = torch_tpu.metrics()
    with _HeldCompiles():
        results = [torch.sin(x) for _, x in inputs]
        # Every op returned while its own compile (and the earlier ones') had not started.
        assert C._queued_launches() == len(inputs)
    for (cpu, _), result in zip(inputs, results):
        torch.testing.assert_close(result.cpu(), torch.sin(cpu))
    assert C._queued_launches() == 0
    after = torch_tpu.metrics()
    assert after["compile_count"] - before["compile_count"] <= len(inputs)
    # Metrics are per process: earlier tests in this worker may have used the fallback.
    assert after["fallback_ops"] == before["fallback_ops"]


def test_chain_of_dependent_new_ops_equals_cpu():
    cpu, x = _fresh()
    with _HeldCompiles():
        a = x.sin()
        b = a * 3 + x
        c = b.exp().sum(dim=1)
        d = (c > 0).to(torch.int32) + 1
        assert C._queued_launches() >= 4
    torch.testing.assert_close(c.cpu(), ((cpu.sin() * 3 + cpu).exp()).sum(dim=1))
    torch.testing.assert_close(d.cpu(), (((cpu.sin() * 3 + cpu).exp()).sum(dim=1) > 0)
                               .to(torch.int32) + 1)


def test_in_place_chain_equals_cpu():
    cpu, x = _fresh()
    expected = cpu.clone()
    with _HeldCompiles():
        y = x.clone()
        y.mul_(2)
        y.add_(x)
        y[:, 1:] += y[:, :-1]
        y.sin_()
    expected.mul_(2)
    expected.add_(cpu)
    expected[:, 1:] += expected[:, :-1].clone()
    expected.sin_()
    torch.testing.assert_close(y.cpu(), expected)
    torch.testing.assert_close(x.cpu(), cpu)  # the operand was not written


def test_queued_ops_from_two_threads_equal_cpu():
    inputs = [_fresh(seed=s) for s in range(2)]
    results = [None, None]

    def work(k):
        _, x = inputs[k]
        y = x * (k + 2)
        y.add_(x.cos())
        results[k] = y.tanh()

    with _HeldCompiles():
        threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for k, (cpu, _) in enumerate(inputs):
        torch.testing.assert_close(results[k].cpu(), (cpu * (k + 2) + cpu.cos()).tanh())


def test_host_read_waits_for_the_queued_producer():
    cpu, x = _fresh()
    with _HeldCompiles():
        y = x.atan()
    # Released: the read waits for the compile and the launch, then sees the value.
    torch.testing.assert_close(y.cpu(), torch.atan(cpu))
    assert C._queued_launches() == 0


def test_tensors_freed_while_their_launches_wait():
    cpu, x = _fresh()
    baseline = torch.tpu.memory_allocated()
    with _HeldCompiles():
        y = x.cos()
        z = y * 2
        del x, y  # the queued launches still read and write these storages
        w = z.sum()
        del z
    torch.testing.assert_close(w.cpu(), (cpu.cos() * 2).sum())
    del w
    # Storages freed while queued go once their launches have run.
    assert torch.tpu.memory_allocated() <= baseline - cpu.numel() * cpu.element_size()


def test_compile_error_of_a_queued_program_surfaces_at_sync_naming_the_op():
    _, x = _fresh()
    torch.tpu.synchronize()
    C._inject_compile_failure("injected compiler error")
    y = torch.acosh(x)  # its compile fails in the background: no error here
    z = y + 1  # reads the failed result
    with pytest.raises(RuntimeError, match=r"aten::acosh\(.*injected compiler error"):
        torch.tpu.synchronize()
    with pytest.raises(RuntimeError, match="injected compiler error"):
        z.cpu()
    # The device stays usable.
    assert torch.equal((torch.ones(3, device="tpu") * 3).cpu(), torch.full((3,), 3.0))
    torch.tpu.synchronize()


SYNCHRONOUS = """
import torch, torch_tpu
x = torch.randn(3, 1013).to("tpu")
torch.tpu.synchronize()
torch_tpu._C._hold_compiles(True)  # no effect: nothing compiles in the background
y = torch.erf(x)
print("queued", torch_tpu._C._queued_launches())
torch_tpu._C._hold_compiles(False)
print("equal", torch.allclose(y.cpu(), torch.erf(x.cpu())))
"""


@pytest.mark.parametrize("setting", [{"TORCH_TPU_LAUNCH_BLOCKING": "1"},
                                     {"TORCH_TPU_COMPILE_THREADS": "0"}])
def test_debug_mode_and_zero_threads_compile_on_the_calling_thread(setting):
    completed = run_python(SYNCHRONOUS, **setting)
    assert completed.returncode == 0, completed.stderr
    assert "queued 0" in completed.stdout
    assert "equal True" in completed.stdout

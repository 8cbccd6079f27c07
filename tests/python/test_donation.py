"""In-place updates donate the storage's old buffer to the program that replaces it.

On the XLA CPU plugin a buffer is donated once the program that produced it has finished (the
plugin would block the host otherwise), so the tests synchronize before the updates they count."""

import pytest
import torch

import torch_tpu

# Donation per op: in DeferAndFuse mode a graph donates at its cut.
pytestmark = pytest.mark.strict_mode


def donated():
    return torch_tpu.metrics()["donated_buffers"]


def test_in_place_update_donates_the_old_buffer():
    x = torch.randn(1000)
    t = x.to("tpu")
    torch.tpu.synchronize()
    before = donated()
    t.mul_(2)
    torch.tpu.synchronize()
    t.add_(1)
    assert donated() == before + 2
    assert torch.equal(t.cpu(), x * 2 + 1)


def test_write_into_a_view_donates_and_keeps_other_elements():
    x = torch.randn(10, 10)
    t = x.to("tpu")
    torch.tpu.synchronize()
    before = donated()
    t[:, 3].zero_()
    torch.tpu.synchronize()
    t.diagonal().fill_(7)
    x[:, 3] = 0
    x.diagonal().fill_(7)
    assert donated() == before + 2
    assert torch.equal(t.cpu(), x)


def test_optimizer_step_donates_parameters_and_state():
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 16)
    reference = torch.nn.Linear(16, 16)
    reference.load_state_dict(model.state_dict())
    model.to("tpu")
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, reference)]
    data = torch.randn(4, 16)
    before = donated()
    for net, optimizer, inputs in zip((model, reference), optimizers, (data.to("tpu"), data)):
        for _ in range(2):
            optimizer.zero_grad()
            net(inputs).square().mean().backward()
            optimizer.step()
    assert donated() > before
    torch.testing.assert_close(model.weight.cpu(), reference.weight, rtol=1e-5, atol=1e-6)


def test_a_queued_chain_of_in_place_updates_stays_asynchronous():
    a = torch.randn(1024, 1024)
    t = a.to("tpu")
    (t @ t).mul_(1.0001)  # compile both programs first: a compile would let the device catch up
    torch.tpu.synchronize()
    t = t @ t  # keeps the device busy far longer than queueing the updates below takes
    for _ in range(20):
        t.mul_(1.0001)
    queued_without_waiting = not torch_tpu._C._is_ready(t)
    torch.tpu.synchronize()
    assert queued_without_waiting, "in-place updates waited for the device"
    torch.testing.assert_close(t.cpu(), (a @ a) * 1.0001**20, rtol=1e-4, atol=1e-3)


def test_a_buffer_still_read_elsewhere_is_not_corrupted():
    # `y` reads x's storage in a program queued before the in-place update of x.
    x = torch.randn(100_000)
    t = x.to("tpu")
    y = t * 3
    t.add_(1)
    z = t * 1
    assert torch.equal(y.cpu(), x * 3)
    assert torch.equal(z.cpu(), x + 1)


def test_donated_in_place_update_does_not_raise_peak_memory():
    x = torch.zeros(1 << 20, device="tpu")
    torch.tpu.synchronize()
    torch.tpu.reset_peak_memory_stats()
    base = torch.tpu.memory_allocated()
    for _ in range(3):
        x.add_(1)
        torch.tpu.synchronize()
    assert torch.tpu.max_memory_allocated() == base
    assert torch.equal(x.cpu(), torch.full((1 << 20,), 3.0))


def test_without_donation_the_old_buffer_is_kept_while_still_referenced():
    # A second storage shares the buffer (a whole-storage copy may hand the buffer over): the
    # program must not donate it, and both tensors keep their values.
    x = torch.arange(16.0, device="tpu")
    y = torch.empty(16, device="tpu")
    y.copy_(x)
    x.mul_(2)
    assert torch.equal(x.cpu(), torch.arange(16.0) * 2)
    assert torch.equal(y.cpu(), torch.arange(16.0))

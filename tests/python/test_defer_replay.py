"""Defer-and-fuse replay: a graph whose ops follow a step that ran before is recognised op by op
and runs that step's program without a lookup (metrics()["fused_replays"]); an op that differs
in any way the program depends on ends the replay (metrics()["fused_replay_divergences"], by
kind) and the graph is recorded exactly from there, with the values PyTorch on CPU gives."""

import pytest
import torch
from torch import nn

import torch_tpu

pytestmark = pytest.mark.strict_mode


@pytest.fixture
def fuse():
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    with torch_tpu.eager_mode("defer_and_fuse"):
        yield
    torch.tpu.synchronize()


def replays():
    return torch_tpu.metrics().get("fused_replays", 0)


def divergences():
    return dict(torch_tpu.metrics().get("fused_replay_divergences", {}))


def test_training_loop_replays_each_step_after_the_first_and_matches_cpu(fuse):
    torch.manual_seed(0)
    cpu_model = nn.Sequential(nn.LayerNorm(16), nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    model = nn.Sequential(nn.LayerNorm(16), nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    model.load_state_dict(cpu_model.state_dict())
    model.to("tpu")
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (cpu_model, model)]
    xs = [torch.randn(8, 16) for _ in range(6)]

    def step(m, optimizer, x):
        optimizer.zero_grad(set_to_none=True)
        loss = m(x).square().mean()
        loss.backward()
        optimizer.step()
        return loss

    for x in xs:
        cpu_loss = step(cpu_model, optimizers[0], x)
        loss = step(model, optimizers[1], x.to("tpu")).item()  # a host read: a cut per step
        assert loss == pytest.approx(cpu_loss.item(), rel=1e-4, abs=1e-6)
    metrics = torch_tpu.metrics()
    # The first steps record (momentum buffers appear at the second); later ones follow them.
    assert metrics["fused_replays"] >= len(xs) - 3, metrics
    for cpu_param, param in zip(cpu_model.parameters(), model.parameters()):
        torch.testing.assert_close(param.cpu(), cpu_param, rtol=1e-4, atol=1e-5)


def base_step(x, y, w):
    c = x * 2.0
    d = c + y
    e = torch.relu(d) @ w
    return e.sum(dim=0) * 0.5


def run_steps(step, inputs, count):
    """Runs `step` `count` times on the tpu copies of `inputs`, reading the result each time."""
    device_inputs = [t.to("tpu") for t in inputs]
    return [step(*device_inputs).cpu() for _ in range(count)]


def cpu_inputs():
    torch.manual_seed(1)
    return [torch.randn(6, 5), torch.randn(6, 5), torch.randn(5, 3)]


def test_a_repeated_step_replays_and_a_runtime_scalar_change_still_replays(fuse):
    inputs = cpu_inputs()
    results = run_steps(base_step, inputs, 4)
    for result in results:
        torch.testing.assert_close(result, base_step(*inputs))
    assert replays() >= 2
    assert divergences() == {}

    # Python scalars are runtime arguments of the program: a new value follows the same step.
    def scaled(x, y, w, factor=3.0):
        c = x * factor
        d = c + y
        e = torch.relu(d) @ w
        return e.sum(dim=0) * 0.5
    before = replays()
    device_inputs = [t.to("tpu") for t in inputs]
    for factor in (2.0, 3.0, -1.5):
        result = scaled(*device_inputs, factor=factor).cpu()
        torch.testing.assert_close(result, scaled(*inputs, factor=factor))
    assert replays() >= before + 2
    assert divergences() == {}


def diverging(kind):
    """A step that does what base_step does except, half way, in one way of `kind`."""
    def step(x, y, w):
        if kind == "cut":
            c = x * 2.0
            torch.tpu.synchronize()  # cuts the graph before the step's end
            d = c + y
        elif kind == "storages":
            c = x * 2.0
            d = x + y  # the same op on the same shapes, reading another storage
        else:
            c = x * 2.0
            if kind == "op":
                d = c - y
            elif kind == "shape":
                d = c[:4] + y[:4]
            elif kind == "dtype":
                d = c.double() + y.double()
            elif kind == "static":
                d = torch.add(c, y, alpha=1)  # alpha is runtime; sum's dims below are static
        e = torch.relu(d.float()) @ w
        if kind == "static":
            return e.sum(dim=1, keepdim=True).sum(dim=0) * 0.5
        return e.sum(dim=0) * 0.5
    return step


@pytest.mark.parametrize("kind, counted", [
    ("op", "op"), ("shape", "op"), ("dtype", "op"), ("static", "op"),
    ("storages", "storages"), ("cut", "cut")])
def test_a_step_that_diverges_half_way_gives_cpu_values_and_replays_again(fuse, kind, counted):
    inputs = cpu_inputs()
    run_steps(base_step, inputs, 3)
    assert replays() >= 1
    torch_tpu.reset_metrics()
    step = diverging(kind)
    result = run_steps(step, inputs, 1)[0]
    torch.testing.assert_close(result, step(*inputs))
    assert divergences().get(counted, 0) >= 1, divergences()
    # The diverged graph is a step of its own now, and the first one is still known.
    torch_tpu.reset_metrics()
    run_steps(step, inputs, 2)
    run_steps(base_step, inputs, 2)
    assert replays() >= 3, torch_tpu.metrics()
    torch.testing.assert_close(run_steps(step, inputs, 1)[0], step(*inputs))
    torch.testing.assert_close(run_steps(base_step, inputs, 1)[0], base_step(*inputs))


def test_a_view_geometry_that_differs_is_a_divergence(fuse):
    base = torch.randn(8, 5)
    y, w = torch.randn(6, 5), torch.randn(5, 3)

    def step(x, y, w, start):
        c = x * 2.0
        d = c[start:start + 6] + y  # the view's storage offset is part of the program
        return (torch.relu(d) @ w).sum(dim=0)
    device = [t.to("tpu") for t in (base, y, w)]
    for _ in range(3):
        step(*device, 0).cpu()
    assert replays() >= 1
    torch_tpu.reset_metrics()
    result = step(*device, 2).cpu()
    torch.testing.assert_close(result, step(base, y, w, 2))
    assert divergences().get("op", 0) >= 1


def test_an_intermediate_kept_alive_is_a_divergence_at_the_cut_and_reads_right(fuse):
    inputs = cpu_inputs()
    device = [t.to("tpu") for t in inputs]
    for _ in range(3):
        base_step(*device).cpu()
    torch_tpu.reset_metrics()
    kept = {}

    def keeping(x, y, w):
        c = x * 2.0
        kept["d"] = d = c + y
        e = torch.relu(d) @ w
        return e.sum(dim=0) * 0.5
    result = keeping(*device)
    torch.tpu.synchronize()
    assert divergences().get("outputs", 0) == 1, divergences()
    torch.testing.assert_close(result.cpu(), base_step(*inputs))
    torch.testing.assert_close(kept["d"].cpu(), inputs[0] * 2.0 + inputs[1])


def test_random_ops_in_a_replayed_step_match_strict_mode():
    def step(x):
        return torch.nn.functional.dropout(x * 2.0, p=0.5).sum(dim=0)
    x = torch.randn(16, 8).to("tpu")

    def run(mode):
        torch.tpu.synchronize()
        torch.manual_seed(5)
        with torch_tpu.eager_mode(mode):
            results = [step(x).cpu() for _ in range(5)]
        return results
    strict = run("strict")
    torch_tpu.reset_metrics()
    fused = run("defer_and_fuse")
    assert torch_tpu.metrics().get("fused_replays", 0) >= 3
    for a, b in zip(strict, fused):
        torch.testing.assert_close(a, b)
    assert not all(torch.equal(strict[0], r) for r in strict[1:])  # each step drew new values


def growing_decode(device, lengths, extra_op_at=()):
    """A toy decoder step per length of a growing cache (torch.cat of a new row), attention over
    all of it and the last id read at a moving offset, each step read on the host as generation
    reads its token; at the lengths in `extra_op_at` the step adds an op half way."""
    generator = torch.Generator().manual_seed(3)
    q = torch.randn(2, 1, 8, generator=generator).to(device)
    keys = torch.randn(2, lengths[0] - 1, 8, generator=generator).to(device)
    ids = torch.arange(lengths[0] - 1).view(1, -1).to(device)
    outputs = []
    for length in lengths:
        row = torch.randn(2, 1, 8, generator=generator).to(device)
        keys = torch.cat([keys, row], 1)
        scores = q @ keys.transpose(1, 2) * 0.5
        if length in extra_op_at:
            scores = scores - 1.0
        attended = torch.softmax(scores, -1) @ keys
        ids = torch.cat([ids, ids[:, -1:] + 1], 1)
        outputs.append((attended.cpu(), ids[:, -2:].cpu()))
        assert keys.shape[1] == length
    return outputs


def test_a_growing_sequence_replays_across_lengths_of_a_bucket_and_equals_cpu(fuse):
    # Bucketed ops (csrc/exec/growing_shapes.h) are matched by their bucket's signature, so the
    # step of one length is followed at the next lengths of its bucket.
    lengths = list(range(6, 46))
    expected = growing_decode("cpu", lengths)
    got = growing_decode("tpu", lengths)
    for length, (value, cpu_value) in zip(lengths, zip(got, expected)):
        torch.testing.assert_close(value[0], cpu_value[0], msg=f"length {length}")
        assert torch.equal(value[1], cpu_value[1]), length
    metrics = torch_tpu.metrics()
    assert metrics["fused_bucketed_ops"] > 0
    # Two graphs per length (two host reads). Recorded while the lines are found and at the
    # crossings into buckets 32 and 64 (a few graphs each); every other graph follows the one of
    # the length before.
    assert metrics["fused_graphs"] == 2 * len(lengths)
    assert metrics["fused_replays"] >= 2 * len(lengths) - 24, metrics
    assert sum(divergences().values()) <= 12, divergences()


def test_a_growing_step_that_diverges_at_another_length_gives_cpu_values(fuse):
    lengths = list(range(6, 30))
    extra = {20, 21, 26}
    expected = growing_decode("cpu", lengths, extra)
    torch_tpu.reset_metrics()
    got = growing_decode("tpu", lengths, extra)
    for length, (value, cpu_value) in zip(lengths, zip(got, expected)):
        torch.testing.assert_close(value[0], cpu_value[0], msg=f"length {length}")
        assert torch.equal(value[1], cpu_value[1]), length
    # At 20 the extra op ends the replay of the step without it; at 21 and 26 the step with it
    # (kept at 20) is followed; the lengths after each follow the step without it again.
    assert divergences().get("op", 0) >= 1, divergences()
    replayed_before = replays()
    growing_decode("tpu", list(range(22, 30)), {24})
    assert replays() >= replayed_before + 12, torch_tpu.metrics()  # of 16 graphs

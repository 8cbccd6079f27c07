"""torch.compile on graphs that take CPU tensors: an input the graph moves to tpu (`t.to("tpu")`,
`copy_` into a tpu tensor) is moved before the graph's program runs, once per call as eagerly,
and the graph runs as one program; inputs used on the host (and written there) keep eager's
order, so results always equal eager's."""

from types import SimpleNamespace

import pytest
import torch
import torch._dynamo

import torch_tpu
from compile_helpers import fresh_dynamo  # noqa: F401
from conftest import sample

BACKENDS = {"default": {}, "tpu": {"backend": "tpu"}}


@pytest.fixture(params=["strict", "defer_and_fuse"])
def eager_mode(request):
    with torch_tpu.eager_mode(request.param):
        yield request.param


def _linear():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 3).to("tpu")


def _values():
    """What the cases use: a tpu module, a CPU tensor, a tpu tensor (made in the test: nothing
    touches the device while tests are collected)."""
    return SimpleNamespace(linear=_linear(), t=sample((2, 4), torch.float32),
                           b=sample((2, 4), torch.float32, seed=1).to("tpu"))


# name -> (values -> (fn, its inputs)): every CPU input is only moved to tpu inside fn.
MOVED = {
    "linear_of_moved": lambda v: (lambda t: v.linear(t.to("tpu")).relu(), (v.t,)),
    "scaled_sum": lambda v: (lambda t: (t.to("tpu") * 2).sum(), (v.t,)),
    "copy_into_new_tpu_tensor": lambda v: (
        lambda t: torch.zeros(2, 4, device="tpu").copy_(t), (v.t,)),
    "copy_broadcast_and_cast": lambda v: (
        lambda t: torch.zeros(3, 2, 4, dtype=torch.float64, device="tpu").copy_(t), (v.t,)),
    "plus_tpu_input": lambda v: (lambda a, b: a.to("tpu") + b, (v.t, v.b)),
    "cast_while_moving": lambda v: (lambda t: t.to("tpu", torch.float16) * 3, (v.t,)),
    "moved_twice": lambda v: (lambda t: t.to("tpu") + t.to("tpu", torch.float64), (v.t,)),
    # Inputs whose layout the move changes: transposed, and at a storage offset.
    "transposed": lambda v: (lambda t: t.to("tpu") @ v.b.t(),
                             (sample((4, 2), torch.float32).t(),)),
    "at_an_offset": lambda v: (lambda t: t.to("tpu").exp(), (sample((3, 4), torch.float32)[1:],)),
}


def _counted(fn):
    """fn's result, and what ran while it ran."""
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    result = fn()
    torch.tpu.synchronize()
    return result, torch_tpu.metrics()


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("case", sorted(MOVED))
def test_a_cpu_input_moved_to_tpu_runs_as_one_program_with_eagers_results(case, backend,
                                                                           eager_mode):
    fn, inputs = MOVED[case](_values())
    compiled = torch.compile(fn, **BACKENDS[backend])
    compiled(*inputs)  # compiles
    result, counted = _counted(lambda: compiled(*inputs))
    expected = fn(*inputs)
    assert (result.device, result.dtype, result.shape) == \
        (expected.device, expected.dtype, expected.shape)
    torch.testing.assert_close(result.cpu(), expected.cpu())
    assert "compiled_graphs_eager" not in counted, counted["compiled_graphs_eager"]
    assert counted["fallback_ops"] == {}
    assert counted["execute_count"] == 1  # the graph's program
    # One transfer per call of each CPU input, in its own dtype.
    assert counted["transfer_to_device_bytes"] == sum(
        x.numel() * x.element_size() for x in inputs if x.device.type == "cpu")


def test_a_training_step_on_cpu_batches_matches_eager(eager_mode):
    batches = [sample((2, 4), torch.float32, seed=seed) for seed in range(3)]
    runs = {}
    for compiled in (False, True):
        torch._dynamo.reset()
        linear = _linear()
        optimizer = torch.optim.SGD(linear.parameters(), lr=0.1)

        def step(batch):
            loss = linear(batch.to("tpu")).relu().square().mean()
            loss.backward()
            return loss

        run = torch.compile(step, backend="tpu") if compiled else step
        torch_tpu.reset_metrics()
        losses = []
        for batch in batches:
            losses.append(run(batch).item())
            optimizer.step()
            optimizer.zero_grad()
        runs[compiled] = (losses, [p.detach().cpu() for p in linear.parameters()])
    torch.tpu.synchronize()
    assert "compiled_graphs_eager" not in torch_tpu.metrics()
    torch.testing.assert_close(runs[True][0], runs[False][0])
    for got, want in zip(runs[True][1], runs[False][1]):
        torch.testing.assert_close(got, want)


def _moved_then_written(t):
    moved = t.to("tpu") * 2
    t.add_(1)  # the copy already holds the old values
    return moved


def _scalar_read_then_written(s, b):
    scaled = b * s
    s.add_(1)  # the product read the old value
    return scaled


def _written_then_moved(t):
    t.mul_(3)
    return t.to("tpu") + 1


# name -> (fn, CPU inputs, tpu inputs, whether the graph runs as a program): the same CPU
# tensor used on the host and moved to (or read by) tpu.
MIXED = {
    "scaled_by_its_own_sum": (lambda t: t.to("tpu") * t.sum(), [(2, 4)], [], True),
    "used_by_host_ops_only": (lambda t, b: b * t.sum(), [(2, 4)], [(2, 4)], True),
    "moved_then_written_on_the_host": (_moved_then_written, [(2, 4)], [], True),
    "scalar_read_then_written_on_the_host": (_scalar_read_then_written, [()], [(3,)], True),
    # A host result the graph returns, a host value moved to tpu: these run eagerly (counted).
    "host_result_returned": (lambda t: (t.to("tpu") * 2, t * 3), [(2, 4)], [], False),
    "written_on_the_host_then_moved": (_written_then_moved, [(2, 4)], [], False),
}


@pytest.mark.parametrize("case", sorted(MIXED))
def test_a_cpu_input_used_on_the_host_and_on_tpu_gives_eagers_results(case, eager_mode):
    fn, host_shapes, tpu_shapes, as_program = MIXED[case]
    host = [sample(shape, torch.float32, seed=i) for i, shape in enumerate(host_shapes)]
    on_tpu = [sample(shape, torch.float32, seed=9 + i).to("tpu")
              for i, shape in enumerate(tpu_shapes)]
    eager_host = [x.clone() for x in host]
    compiled = torch.compile(fn, backend="tpu")
    result, counted = _counted(lambda: compiled(*host, *on_tpu))
    expected = fn(*eager_host, *on_tpu)
    results = result if isinstance(result, tuple) else (result,)
    expecteds = expected if isinstance(expected, tuple) else (expected,)
    assert len(results) == len(expecteds)
    for got, want in zip(results, expecteds):
        assert (got.device, got.dtype, got.shape) == (want.device, want.dtype, want.shape)
        torch.testing.assert_close(got.cpu(), want.cpu())
    for got, want in zip(host, eager_host):  # written on the host as eagerly
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    if as_program:
        assert "compiled_graphs_eager" not in counted, counted["compiled_graphs_eager"]
        assert counted["fallback_ops"] == {}

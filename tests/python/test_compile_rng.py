"""Random ops under torch.compile(backend="tpu") draw from the tpu generator exactly as eager.

Same seed -> the same values as the same ops eagerly, the generator's state advances as eagerly
(so eager draws after a compiled call match too), a compiled program gives fresh bits on every
call without recompiling, explicit generators are honoured, and activation checkpointing's
recomputed random ops (PyTorch's graph-safe RNG) use the forward's bits.
"""

import pytest
import torch
import torch.nn.functional as F
import torch_tpu
from conftest import run_python

DEVICE = "tpu"


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _tensors(value):
    return [value] if isinstance(value, torch.Tensor) else list(value)


def _eager_then_compiled(fn, *args, seed=0):
    """(eager results, eager state, next eager draw) and the same after the compiled call."""
    runs = []
    for call in (fn, torch.compile(fn, backend="tpu")):
        torch.manual_seed(seed)
        results = [r.cpu() for r in _tensors(call(*args))]
        state = torch.tpu.get_rng_state()
        after = torch.randn(16, device=DEVICE).cpu()
        runs.append((results, state, after))
    return runs


def _graphs_run_eagerly() -> dict:
    return dict(torch_tpu.metrics().get("compiled_graphs_eager") or {})


def _x(shape=(32, 48)):
    return torch.randn(shape, generator=torch.Generator().manual_seed(3)).to(DEVICE)


RANDOM_PROGRAMS = {
    "dropout": lambda x: F.dropout(x, 0.4, training=True) * 2,
    "dropout_twice": lambda x: F.dropout(F.dropout(x, 0.3), 0.6) - 1,
    "rand": lambda x: x + torch.rand(x.shape, device=DEVICE),
    "rand_float16": lambda x: torch.rand(7, 5, device=DEVICE, dtype=torch.float16),
    "randn": lambda x: x * torch.randn(48, device=DEVICE),
    "rand_like": lambda x: x - torch.rand_like(x),
    "randn_like": lambda x: torch.randn_like(x).exp(),
    "randint": lambda x: torch.randint(0, 10, (64,), device=DEVICE) * 3,
    "randint_high": lambda x: torch.randint(7, (3, 4), device=DEVICE, dtype=torch.int32),
    "randint_like": lambda x: torch.randint_like(x, 2, 9) + x,
    "bernoulli_tensor": lambda x: torch.bernoulli(torch.sigmoid(x)),
    "bernoulli_p": lambda x: x.bernoulli(0.3) + 1,
    "normal_": lambda x: torch.empty_like(x).normal_(1.5, 2.0) + x,
    "uniform_": lambda x: torch.empty_like(x).uniform_(-1, 2) * x,
    "exponential_": lambda x: torch.empty_like(x).exponential_(0.5),
    "multinomial": lambda x: torch.multinomial(torch.softmax(x[0], 0), 5),
    "several": lambda x: (F.dropout(x, 0.2) * torch.rand_like(x), torch.randn(5, device=DEVICE),
                          x.new_empty(9).uniform_()),
}


@pytest.mark.parametrize("name", sorted(RANDOM_PROGRAMS))
def test_compiled_random_ops_match_eager_and_advance_the_generator_alike(name):
    fn = RANDOM_PROGRAMS[name]
    x = _x()
    torch_tpu.reset_metrics()
    (eager, eager_state, eager_after), (compiled, compiled_state, compiled_after) = \
        _eager_then_compiled(fn, x)
    for want, got in zip(eager, compiled, strict=True):
        # The same draws; XLA may fuse the arithmetic around them differently (last bits).
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert torch.equal(compiled_state, eager_state)
    assert torch.equal(compiled_after, eager_after)
    metrics = torch_tpu.metrics()
    assert not metrics.get("fallback_ops")
    assert _graphs_run_eagerly() == {}  # one program, not op by op


def test_different_seeds_draw_different_values():
    compiled = torch.compile(lambda x: F.dropout(x, 0.5) + torch.rand_like(x), backend="tpu")
    x = _x()
    torch.manual_seed(1)
    first = compiled(x).cpu()
    torch.manual_seed(2)
    second = compiled(x).cpu()
    torch.manual_seed(1)
    again = compiled(x).cpu()
    assert not torch.equal(first, second)
    assert torch.equal(first, again)


def test_repeated_calls_draw_fresh_values_from_one_program_like_eager():
    def step(x):
        return F.dropout(x, 0.5) + torch.randn(x.shape, device=DEVICE)

    compiled = torch.compile(step, backend="tpu")
    x = _x()
    compiled(x)  # compiles
    torch.manual_seed(5)
    eager = [step(x).cpu() for _ in range(4)]
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    torch.manual_seed(5)
    results = [compiled(x).cpu() for _ in range(4)]
    torch.tpu.synchronize()
    assert torch_tpu.metrics()["compile_count"] == 0  # the RNG state is no part of the program
    assert torch_tpu.metrics()["execute_count"] == 4
    for want, got in zip(eager, results):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert not torch.equal(results[0], results[1])


def test_dropout_backward_uses_the_forward_mask():
    def loss(x, w):
        return (F.dropout(x @ w, 0.5) ** 2).sum()

    torch_tpu.reset_metrics()
    x = _x((8, 16))
    w = torch.randn(16, 12, generator=torch.Generator().manual_seed(4)).to(DEVICE)
    grads = []
    for fn in (loss, torch.compile(loss, backend="tpu")):
        w_ = w.clone().requires_grad_()
        torch.manual_seed(11)
        value = fn(x, w_)
        value.backward()
        grads.append((value.detach().cpu(), w_.grad.cpu(), torch.tpu.get_rng_state()))
    (eager_value, eager_grad, eager_state), (value, grad, state) = grads
    torch.testing.assert_close(value, eager_value)
    torch.testing.assert_close(grad, eager_grad)
    assert torch.equal(state, eager_state)
    assert _graphs_run_eagerly() == {}


def test_checkpointed_dropout_recomputes_the_forward_mask():
    # Activation checkpointing recomputes dropout in the backward: PyTorch's graph-safe RNG gives
    # the forward and the backward graph generators with the same state, so the recomputed mask
    # is the forward's.
    def f(x, w):
        def block(y):
            return F.dropout(y, 0.5) * w

        return torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)

    torch_tpu.reset_metrics()
    x = _x((16, 32))
    w = torch.randn(32, generator=torch.Generator().manual_seed(6)).to(DEVICE)
    compiled = torch.compile(f, backend="tpu")
    masks = []
    for _ in range(2):
        x_ = x.clone().requires_grad_()
        out = compiled(x_, w)
        out.backward(torch.ones_like(out))
        kept = (out != 0).cpu()
        expected = kept * 2.0 * w.cpu()  # d(dropout(x) * w)/dx = mask / (1 - p) * w
        torch.testing.assert_close(x_.grad.cpu(), expected)
        assert 0.3 < kept.float().mean() < 0.7
        masks.append(kept)
    assert not torch.equal(masks[0], masks[1])  # fresh bits every call
    assert _graphs_run_eagerly() == {}
    assert not torch_tpu.metrics().get("fallback_ops")


def test_checkpointed_dropout_with_several_forwards_before_their_backwards():
    # AOTAutograd saves the forward generators' states for backwards that run out of order.
    w = torch.randn(32, generator=torch.Generator().manual_seed(7)).to(DEVICE)

    def f(x):
        return torch.utils.checkpoint.checkpoint(lambda y: F.dropout(y, 0.5) * w, x,
                                                 use_reentrant=False)

    compiled = torch.compile(f, backend="tpu")
    inputs = [_x((16, 32)).requires_grad_() for _ in range(3)]
    outputs = [compiled(x) for x in inputs]
    for i in (2, 0, 1):
        outputs[i].backward(torch.ones_like(outputs[i]))
    for x, out in zip(inputs, outputs):
        torch.testing.assert_close(x.grad.cpu(), (out != 0).cpu() * 2.0 * w.cpu())


def test_explicit_generator_is_used_and_the_default_generator_left_alone():
    generator = torch.Generator(DEVICE)

    def f(x):
        return x + torch.rand(x.shape, device=DEVICE, generator=generator), \
            torch.empty_like(x).normal_(generator=generator)

    x = _x()
    runs = []
    for fn in (f, torch.compile(f, backend="tpu")):
        torch.manual_seed(0)
        generator.manual_seed(21)
        results = [r.cpu() for r in fn(x)]
        runs.append((results, generator.get_state(), torch.tpu.get_rng_state()))
    (eager, eager_generator, eager_default), (compiled, compiled_generator, compiled_default) = runs
    for want, got in zip(eager, compiled):
        assert torch.equal(got, want)
    assert torch.equal(compiled_generator, eager_generator)
    assert torch.equal(compiled_default, eager_default)
    torch.manual_seed(0)
    assert torch.equal(compiled_default, torch.tpu.get_rng_state())  # not advanced


def test_a_generator_constant_of_the_graph_is_drawn_from():
    # An FX graph may hold a generator object (torch.export, hand-written graphs): its draws
    # come from that generator on every call, never from the default one.
    from torch_tpu._dynamo import tpu_backend

    generator = torch.Generator(DEVICE)

    def f(x):
        return (torch.ops.aten.uniform.default(x, 0.0, 1.0, generator=generator) + x,)

    torch_tpu.reset_metrics()
    x = _x((4, 6))
    gm = torch.fx.symbolic_trace(f)
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    FakeTensorProp(gm, FakeTensorMode(allow_non_fake_inputs=True)).propagate(x)
    compiled = tpu_backend(gm, [x])
    generator.manual_seed(8)
    want = f(x)[0].cpu()
    generator.manual_seed(8)
    torch.manual_seed(0)
    got = compiled(x)
    got = (got[0] if isinstance(got, (list, tuple)) else got).cpu()
    state = torch.tpu.get_rng_state()
    assert torch.equal(got, want)
    assert _graphs_run_eagerly() == {}
    torch.manual_seed(0)
    assert torch.equal(state, torch.tpu.get_rng_state())  # the default generator not drawn from


def test_rng_state_functions_work_under_fake_tensor_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode

    generator = torch.Generator(DEVICE).manual_seed(13)
    real_state = torch.tpu.get_rng_state()
    with FakeTensorMode():
        state = torch.tpu.get_rng_state()
        generator_state = generator.get_state()
        clone = generator.clone_state()
    for value in (state, generator_state):
        assert value.shape == (16,) and value.dtype == torch.uint8 and value.device.type == "cpu"
    assert torch.equal(state, real_state)
    assert torch.equal(generator_state, generator.get_state())
    assert isinstance(clone, torch.Generator) and clone.device.type == DEVICE
    assert torch.equal(clone.get_state(), generator.get_state())
    clone.manual_seed(1)  # a copy, not the same state
    assert generator.initial_seed() == 13


def test_rng_state_functions_work_under_functional_tensor_mode():
    from torch._subclasses.functional_tensor import FunctionalTensorMode

    real_state = torch.tpu.get_rng_state()
    with FunctionalTensorMode():
        state = torch.tpu.get_rng_state()
        clone = torch.Generator(DEVICE).clone_state()
    assert torch.equal(state, real_state)
    assert isinstance(clone, torch.Generator)


def test_graphsafe_state_is_shared_not_copied():
    default = torch.tpu.default_generators[0]
    torch.manual_seed(3)
    shared = default.graphsafe_get_state()
    torch.rand(4, device=DEVICE)
    assert torch.equal(shared.get_state(), default.get_state())

    other = torch.Generator(DEVICE).manual_seed(99)
    saved = default.graphsafe_get_state()
    before = default.get_state()
    default.graphsafe_set_state(other)
    drawn = torch.rand(4, device=DEVICE).cpu()  # from `other`'s state
    default.graphsafe_set_state(saved)
    assert torch.equal(default.get_state(), before)
    want = torch.rand(4, device=DEVICE, generator=torch.Generator(DEVICE).manual_seed(99)).cpu()
    assert torch.equal(drawn, want)
    assert not torch.equal(other.get_state(),  # `other` advanced
                           torch.Generator(DEVICE).manual_seed(99).get_state())


def test_graphsafe_run_with_rng_state_runs_eagerly_on_tpu():
    # What a graph-safe RNG graph does when it runs op by op: the op draws from `rng_state`.
    from torch._prims.rng_prims import graphsafe_run_with_rng_state

    x = _x((6, 10))
    torch.manual_seed(0)
    before = torch.tpu.get_rng_state()
    generator = torch.Generator(DEVICE).manual_seed(17)
    out, mask = graphsafe_run_with_rng_state(torch.ops.aten.native_dropout.default, x, 0.5, True,
                                             rng_state=generator)
    assert torch.equal(torch.tpu.get_rng_state(), before)
    torch.tpu.manual_seed(17)
    want_out, want_mask = torch.ops.aten.native_dropout.default(x, 0.5, True)
    assert torch.equal(out.cpu(), want_out.cpu()) and torch.equal(mask.cpu(), want_mask.cpu())
    assert torch.equal(generator.get_state(), torch.tpu.get_rng_state())


def test_compiled_random_ops_match_eager_in_defer_and_fuse_mode():
    code = """
import torch, torch_tpu
import torch.nn.functional as F
def f(x):
    return F.dropout(x, 0.5) * torch.rand_like(x) + torch.randn(x.shape, device="tpu")
x = torch.randn(16, 16).to("tpu")
runs = []
for fn in (f, torch.compile(f, backend="tpu")):
    torch.manual_seed(4)
    a = x + torch.rand_like(x)          # pending eager work before the compiled call
    out = [fn(a).cpu() for _ in range(3)]
    runs.append((out, torch.tpu.get_rng_state(), torch.rand(8, device="tpu").cpu()))
(e, es, ea), (c, cs, ca) = runs
assert all(torch.equal(p, q) for p, q in zip(e, c))
assert torch.equal(es, cs) and torch.equal(ea, ca)
assert not torch_tpu.metrics().get("fallback_ops")
assert not torch_tpu.metrics().get("compiled_graphs_eager")
print("ok")
"""
    result = run_python(code, TORCH_TPU_DEFER_AND_FUSE="1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")

"""torch._foreach_* ops (torch.optim's default foreach steps, clip_grad_norm_): one program per call
computes what PyTorch's per-tensor loop computes on CPU; calls one program cannot stand for
(aliasing writes, several devices) run that loop."""

import pytest
import torch

import torch_tpu
from conftest import assert_raises_exactly, compiles

SHAPES = [(3, 4), (5,), (2, 3, 2), ()]


def tensors(seed, dtype=torch.float32, low=0.1, high=0.9):
    """One tensor per SHAPES entry, values in [low, high) (inside every unary op's domain)."""
    result = []
    for i, shape in enumerate(SHAPES):
        generator = torch.Generator().manual_seed(seed * 10 + i)
        result.append((torch.rand(shape, generator=generator) * (high - low) + low).to(dtype))
    return result


def on(device, values):
    """Copies (in-place calls must not change the caller's CPU tensors)."""
    return [v.to(device, copy=True) if isinstance(v, torch.Tensor) else v for v in values]


def executions(fn) -> int:
    torch.tpu.synchronize()
    before = torch_tpu.metrics()["execute_count"]
    fn()
    torch.tpu.synchronize()
    return torch_tpu.metrics()["execute_count"] - before


def assert_lists_close(tpu_list, cpu_list):
    assert len(tpu_list) == len(cpu_list)
    for got, expected in zip(tpu_list, cpu_list):
        assert got.device.type == "tpu"
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert got.stride() == expected.stride()
        torch.testing.assert_close(got.cpu(), expected)


def check(op, *arguments, **keywords):
    """The functional op and its in-place variant (when it has one) give CPU's results, the
    in-place one in one program over the whole list."""
    def placed(device):
        return [on(device, a) if isinstance(a, list) else
                a.to(device) if isinstance(a, torch.Tensor) and a.dim() > 0 else a
                for a in arguments]

    if hasattr(torch, f"_foreach_{op}"):
        functional = getattr(torch, f"_foreach_{op}")
        assert_lists_close(functional(*placed("tpu"), **keywords),
                           functional(*placed("cpu"), **keywords))
    if not hasattr(torch, f"_foreach_{op}_") or not isinstance(arguments[0], list):
        return
    in_place = getattr(torch, f"_foreach_{op}_")
    cpu_args, tpu_args = placed("cpu"), placed("tpu")
    in_place(*cpu_args, **keywords)
    if torch_tpu.get_eager_mode() == "strict":
        assert executions(lambda: in_place(*tpu_args, **keywords)) == 1
    else:
        in_place(*tpu_args, **keywords)
    assert_lists_close(tpu_args[0], cpu_args[0])


UNARY = ["abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1",
         "floor", "frac", "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round",
         "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc", "zero"]


@pytest.mark.parametrize("op", UNARY)
def test_unary(op):
    check(op, tensors(1, low=-0.9) if op not in ("log", "log10", "log2", "rsqrt", "sqrt", "lgamma")
          else tensors(1))


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "clamp_min", "clamp_max", "maximum",
                                "minimum", "pow"])
def test_binary_overloads(op):
    check(op, tensors(1), tensors(2))
    check(op, tensors(1), 0.5)
    check(op, tensors(1), [0.25, -1.5, 2.0, 3])
    if op in ("add", "sub"):
        check(op, tensors(1), tensors(2), alpha=-2.5)
    if op in ("add", "mul", "div"):
        check(op, tensors(1), torch.tensor(1.75))  # one 0-d CPU tensor for every element
        scale = torch.tensor(1.75)
        expected = getattr(torch, f"_foreach_{op}")(tensors(1), scale)
        assert_lists_close(getattr(torch, f"_foreach_{op}")(on("tpu", tensors(1)),
                                                            scale.to("tpu")), expected)


def test_pointwise_lerp_pow_and_norm_overloads():
    for op in ("addcmul", "addcdiv"):
        check(op, tensors(1), tensors(2), tensors(3))
        check(op, tensors(1), tensors(2), tensors(3), 0.3)
        check(op, tensors(1), tensors(2), tensors(3), [0.5, -2.0, 1, 4.0])
    check("lerp", tensors(1), tensors(2), tensors(3))
    check("lerp", tensors(1), tensors(2), 0.3)
    check("lerp", tensors(1), tensors(2), [0.1, 0.9, 0.5, 0.7])
    check("pow", 1.5, tensors(2))
    for ord in (2, 1, 3.5, float("inf"), float("-inf"), 0):
        check("norm", tensors(1, low=-1.0), ord)
    check("norm", tensors(1, dtype=torch.bfloat16), 2, dtype=torch.float32)


def test_elements_keep_their_own_dtypes_and_layouts():
    ints = [torch.arange(6).reshape(2, 3), torch.arange(4) - 2]
    for op, other in (("add", 1.5), ("div", 2)):  # float results, per element
        functional = getattr(torch, f"_foreach_{op}")
        assert_lists_close(functional(on("tpu", ints), other), functional(ints, other))
    mixed = [torch.randn(3, 4).t(), torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)]
    check("sqrt", [m.abs() for m in mixed])  # results keep each input's layout
    check("mul", mixed, 2.0)


def test_in_place_cast_rules_are_the_element_ops():
    ints = [torch.arange(3).to("tpu"), torch.arange(2).to("tpu")]
    assert_raises_exactly(RuntimeError, "aten::_foreach_mul.Scalar: result type Float can't be cast "
                          "to the desired output type Long", lambda: torch._foreach_mul_(ints, 0.5))
    assert torch.equal(ints[0].cpu(), torch.arange(3))


@pytest.mark.strict_mode
def test_new_scalars_and_learning_rates_never_recompile():
    params = on("tpu", tensors(1))
    grads, denominators = on("tpu", tensors(2)), on("tpu", tensors(3))
    torch._foreach_addcdiv_(params, grads, denominators, [0.1, 0.2, 0.3, 0.4])
    assert compiles(lambda: torch._foreach_addcdiv_(params, grads, denominators,
                                                   [-0.713, 0.0917, 1.55, 7.125])) == 0
    assert compiles(lambda: torch._foreach_lerp_(params, grads, 0.123)) <= 1
    assert compiles(lambda: torch._foreach_lerp_(params, grads, 0.877)) == 0


def test_list_errors_are_pytorchs():
    xs, ys = on("tpu", tensors(1)), on("tpu", tensors(2))
    assert_raises_exactly(RuntimeError, "Tensor lists must have the same number of tensors, got 4 "
                          "and 2", lambda: torch._foreach_add_(xs, ys[:2]))
    assert_raises_exactly(RuntimeError, "Tensor list must have same number of elements as scalar "
                          "list.", lambda: torch._foreach_mul_(xs, [1.0, 2.0]))
    assert_raises_exactly(RuntimeError, "Tensor lists must have the same number of tensors, got 4 "
                          "and 3", lambda: torch._foreach_addcmul(xs, ys, ys[:3]))
    for got, expected in zip(xs, tensors(1)):
        assert torch.equal(got.cpu(), expected)  # untouched


def run_on_both(make):
    """make(device) -> list of tensors it wrote or returned; tpu equals CPU."""
    expected = make("cpu")
    got = make("tpu")
    for g, e in zip(got, expected):
        torch.testing.assert_close(g.cpu(), e)


def test_writes_that_alias_other_elements_follow_the_per_tensor_loop():
    base = torch.randn(6)

    def swapped_halves(device):
        x = base.to(device, copy=True)
        torch._foreach_add_([x[:3], x[3:]], [x[3:], x[:3]])  # element 1 reads element 0's write
        return [x]

    def same_tensor_twice(device):
        x = base.to(device, copy=True)
        torch._foreach_mul_([x, x], 2.0)  # the loop doubles it twice
        return [x]

    def reads_an_element_written_earlier(device):
        x, y = base[:3].to(device, copy=True), base[3:].to(device, copy=True)
        torch._foreach_addcmul_([x, y], [y, x], [x, y], 0.5)
        return [x, y]

    def overlapping_views_of_one_tensor(device):
        x = base.to(device, copy=True)
        torch._foreach_sub_([x[:4], x[2:]], [x[1:5], x[:4]])  # partial overlaps
        return [x]

    for make in (swapped_halves, same_tensor_twice, reads_an_element_written_earlier):
        run_on_both(make)
    with pytest.raises(RuntimeError, match="unsupported operation"):
        overlapping_views_of_one_tensor("cpu")
    with pytest.raises(RuntimeError, match="unsupported operation"):
        overlapping_views_of_one_tensor("tpu")
    expanded = torch.zeros(1).to("tpu").expand(3)
    with pytest.raises(RuntimeError, match="unsupported operation"):
        torch._foreach_add_([expanded], 1.0)


def test_elements_on_several_devices():
    values = tensors(1)
    placed = [v.to(f"tpu:{i % 2}") for i, v in enumerate(values)]
    results = torch._foreach_mul(placed, 3.0)
    for result, value, i in zip(results, values, range(len(values))):
        assert result.device == torch.device(f"tpu:{i % 2}")
        torch.testing.assert_close(result.cpu(), value * 3.0)
    torch._foreach_add_(placed, placed)
    for got, value in zip(placed, values):
        torch.testing.assert_close(got.cpu(), value * 2)


def test_autograd_through_foreach_ops():
    def grads(device):
        weights = [t.to(device).requires_grad_() for t in tensors(1)]
        scaled = torch._foreach_mul(weights, on(device, tensors(2)))
        torch.stack([torch._foreach_exp(scaled)[i].sum() for i in range(len(scaled))]).sum()\
            .backward()
        return [w.grad for w in weights]

    run_on_both(grads)


OPTIMIZERS = {
    "adamw": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1, foreach=True),
    "adam_amsgrad": lambda p: torch.optim.Adam(p, lr=0.01, amsgrad=True, foreach=True),
    "sgd_nesterov": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True,
                                              weight_decay=0.01, foreach=True),
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.5, foreach=True),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1, foreach=True),
}


def train(make_optimizer, device, steps=3):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8),
                                torch.nn.Tanh(), torch.nn.Linear(8, 2)).to(device)
    optimizer = make_optimizer(model.parameters())
    x = torch.randn(5, 4).to(device)
    for _ in range(steps):
        optimizer.zero_grad()
        model(x).pow(2).sum().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, foreach=True)
        optimizer.step()
    return model, optimizer


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_foreach_optimizer_steps_match_cpu(name):
    expected, _ = train(OPTIMIZERS[name], "cpu")
    got, _ = train(OPTIMIZERS[name], "tpu")
    for g, e in zip(got.parameters(), expected.parameters()):
        torch.testing.assert_close(g.detach().cpu(), e.detach(), rtol=1e-5, atol=1e-6)
    assert torch_tpu.metrics()["fallback_ops"] == {}


@pytest.mark.strict_mode
def test_an_adamw_step_runs_a_few_programs_not_a_few_per_parameter():
    model, optimizer = train(OPTIMIZERS["adamw"], "tpu", steps=1)
    parameters = len(list(model.parameters()))
    model(torch.randn(5, 4).to("tpu")).sum().backward()
    # lerp, mul, addcmul, sqrt, div, add, addcdiv and the weight decay's mul: one program each
    # (it was about 7 per parameter); the step counters and bias corrections stay on the host.
    assert executions(optimizer.step) <= 8 < 7 * parameters


@pytest.mark.strict_mode
def test_contiguous_elements_run_flat_one_program_for_any_shapes_of_those_sizes():
    first = [torch.rand(4, 6), torch.rand(3, 3)]
    second = [torch.rand(2, 12), torch.rand(9)]  # the same element counts, other shapes
    others = [[torch.rand_like(t) for t in ts] for ts in (first, second)]
    tpu_first, tpu_second = on("tpu", first), on("tpu", second)
    got = torch._foreach_addcmul(tpu_first, on("tpu", others[0]), on("tpu", others[0]), value=0.5)
    assert_lists_close(got, torch._foreach_addcmul(first, others[0], others[0], value=0.5))
    got = []
    assert compiles(lambda: got.extend(torch._foreach_addcmul(
        tpu_second, on("tpu", others[1]), on("tpu", others[1]), value=0.5))) == 0
    assert [t.shape for t in got] == [t.shape for t in second]
    assert_lists_close(got, torch._foreach_addcmul(second, others[1], others[1], value=0.5))
    # In place, through the same flat views.
    expected = [t.clone() for t in second]
    torch._foreach_mul_(expected, 3.0)
    torch._foreach_mul_(tpu_second, 3.0)
    assert_lists_close(tpu_second, expected)

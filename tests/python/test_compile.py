"""torch.compile(backend="tpu"): whole FX graphs (forward and backward) as one XLA program each,
compared with PyTorch on CPU and with eager tpu."""

import math
import warnings

import pytest
import torch
import torch._dynamo
from torch import nn
from torch.nn import functional as F

import torch_tpu
from conftest import sample
from cpu_only_ops import define_cpu_only_op

compile_fallback_example = define_cpu_only_op("compile_fallback_example")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def counters():
    torch.tpu.synchronize()
    values = torch_tpu.metrics()
    return values["compile_count"], values["execute_count"]


def test_elementwise_matmul_reduction_is_one_program(tpu):
    def f(x, w):
        return ((x @ w).tanh() + x.sum(0)).mean(1) * 2 - x.amax()

    x, w = sample((8, 8), torch.float32), sample((8, 8), torch.float32, seed=1)
    compiled = torch.compile(f, backend="tpu")
    torch.testing.assert_close(compiled(x.to(tpu), w.to(tpu)).cpu(), f(x, w))
    torch_tpu.reset_metrics()
    result = compiled(x.to(tpu), w.to(tpu))
    torch_tpu.reset_metrics()
    result = compiled(x.to(tpu), w.to(tpu))
    assert counters() == (0, 1)  # same shapes: nothing compiled, one execution
    torch.testing.assert_close(result.cpu(), f(x, w))


def test_views_and_in_place_updates_inside_the_graph(tpu):
    def f(x, y):
        x.t()[0].add_(1)             # writes column 0 of x through a view
        x[:, 1:].mul_(y[:, :1])      # in place through a narrowed view, broadcasting
        return x.t().reshape(-1)[::3] * 2, y.diagonal().sum()

    x, y = sample((4, 5), torch.float32), sample((4, 4), torch.float32, seed=2)
    x_cpu, x_tpu = x.clone(), x.to(tpu)
    compiled = torch.compile(f, backend="tpu")
    expected = f(x_cpu, y)
    result = compiled(x_tpu, y.to(tpu))
    for got, want in zip(result, expected):
        torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(x_tpu.cpu(), x_cpu)  # the mutated input was written back


def test_inputs_that_are_views_read_through_their_strides(tpu):
    def f(a, b):
        return a * b + a.sum()

    base = sample((6, 8), torch.float32)
    base_tpu = base.to(tpu)
    compiled = torch.compile(f, backend="tpu")
    result = compiled(base_tpu[1:5, ::2], base_tpu.t()[2:6, :4])
    torch.testing.assert_close(result.cpu(), f(base[1:5, ::2], base.t()[2:6, :4]))


def make_mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 32), nn.ReLU(),
                         nn.Linear(32, 4))


def train_step(model, x, y):
    model.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    return loss


def _views_of_outputs_and_inputs(x):
    y = x * 1
    return y, y[:, 4:5], x[:, 1:3], y.t()


def test_outputs_that_are_views_alias_their_base_as_eagerly(tpu):
    x = torch.arange(10.0).view(2, 5)
    expected = _views_of_outputs_and_inputs(x)
    x_tpu = x.to(tpu)
    results = torch.compile(_views_of_outputs_and_inputs, backend="tpu")(x_tpu)
    for got, want in zip(results, expected):
        assert got.stride() == want.stride() and got.storage_offset() == want.storage_offset()
        torch.testing.assert_close(got.cpu(), want)
    y, column, window, transposed = results
    assert column._base is y and transposed._base is y
    assert window.untyped_storage().data_ptr() == x_tpu.untyped_storage().data_ptr()


def _write_through_a_view_after_a_graph_break(x):
    y = x * 1
    v = y[:, 4:5]
    torch._dynamo.graph_break()
    v.sub_(1)
    return y


def test_a_write_through_a_view_of_an_output_after_a_graph_break_reaches_its_base(tpu):
    # Found by tools/fuzz.py: the view was returned in a buffer of its own, so the write was lost.
    x = torch.arange(10.0).view(2, 5)
    expected = _write_through_a_view_after_a_graph_break(x.clone())
    result = torch.compile(_write_through_a_view_after_a_graph_break, backend="tpu")(x.to(tpu))
    torch.testing.assert_close(result.cpu(), expected)


def test_mlp_training_step_matches_eager_losses_and_grads(tpu):
    eager = make_mlp().to(tpu)
    compiled_model = make_mlp().to(tpu)
    step = torch.compile(train_step, backend="tpu")
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    compiled_opt = torch.optim.SGD(compiled_model.parameters(), lr=0.05, momentum=0.9)
    generator = torch.Generator().manual_seed(3)
    for _ in range(4):
        x = torch.randn(16, 8, generator=generator)
        y = torch.randint(0, 4, (16,), generator=generator)
        eager_loss = train_step(eager, x.to(tpu), y.to(tpu))
        compiled_loss = step(compiled_model, x.to(tpu), y.to(tpu))
        torch.testing.assert_close(compiled_loss.cpu(), eager_loss.cpu())
        for a, b in zip(compiled_model.parameters(), eager.parameters()):
            torch.testing.assert_close(a.grad.cpu(), b.grad.cpu())
        eager_opt.step()
        compiled_opt.step()


def test_compiled_training_step_runs_one_program_per_graph_and_stops_compiling(tpu):
    model = make_mlp().to(tpu)
    step = torch.compile(train_step, backend="tpu")
    x, y = torch.randn(16, 8).to(tpu), torch.randint(0, 4, (16,)).to(tpu)
    step(model, x, y)
    torch_tpu.reset_metrics()
    step(model, x, y)
    # The forward and backward graphs, one execution each, and autograd's seed gradient
    # (loss.backward() fills ones eagerly).
    assert counters() == (0, 3)


def test_a_compiled_training_step_does_not_import_inductors_lowerings():
    # The partition runs without its CSE pass (XLA's own eliminates common subexpressions),
    # which imports Inductor's pattern matcher and lowerings: 0.6-0.8 s of a process's first
    # compiled step.
    from conftest import run_python

    completed = run_python(
        "import sys, torch, torch_tpu\n"
        "model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(),\n"
        "                            torch.nn.Linear(8, 1)).to('tpu')\n"
        "x = torch.randn(4, 8).to('tpu')\n"
        "@torch.compile(backend='tpu')\n"
        "def step():\n"
        "    loss = model(x).pow(2).mean()\n"
        "    loss.backward()\n"
        "    return loss\n"
        "cpu = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 1))\n"
        "cpu.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})\n"
        "expected = cpu(x.cpu()).pow(2).mean()\n"
        "expected.backward()\n"
        "loss = step()\n"
        "assert torch.allclose(loss.cpu(), expected), (loss, expected)\n"
        "assert torch.allclose(model[0].weight.grad.cpu(), cpu[0].weight.grad, atol=1e-6)\n"
        "print(sorted(m for m in ('torch._inductor.pattern_matcher', 'torch._inductor.lowering')\n"
        "             if m in sys.modules))\n")
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.strip().splitlines()[-1] == "[]"


def test_changing_a_python_scalar_does_not_recompile(tpu):
    def f(x, lr):
        return x - lr * x.sin()

    x = sample((5, 3), torch.float32)
    compiled = torch.compile(f, backend="tpu")
    compiled(x.to(tpu), 0.1)
    compiled(x.to(tpu), 0.2)  # Dynamo turns the float into a graph input here
    torch_tpu.reset_metrics()
    result = compiled(x.to(tpu), 0.3)
    assert counters()[0] == 0
    torch.testing.assert_close(result.cpu(), f(x, 0.3))


def test_a_new_shape_recompiles(tpu):
    def f(x):
        return (x * x).sum(-1)

    compiled = torch.compile(f, backend="tpu", dynamic=False)
    a, b = sample((4, 3), torch.float32), sample((2, 7), torch.float32)
    compiled(a.to(tpu))
    torch_tpu.reset_metrics()
    result = compiled(b.to(tpu))
    assert counters()[0] == 1
    torch.testing.assert_close(result.cpu(), f(b))
    torch_tpu.reset_metrics()
    compiled(a.to(tpu))
    assert counters()[0] == 0


def test_batch_norm_running_stats_are_written_back_with_donation(tpu):
    torch.manual_seed(0)
    cpu_model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8))
    tpu_model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8))
    tpu_model.load_state_dict(cpu_model.state_dict())
    tpu_model.to(tpu)
    compiled = torch.compile(tpu_model, backend="tpu")
    generator = torch.Generator().manual_seed(1)
    for _ in range(3):
        x = torch.randn(10, 6, generator=generator)
        torch_tpu.reset_metrics()
        got = compiled(x.to(tpu))
        expected = cpu_model(x)
        torch.testing.assert_close(got.cpu(), expected)
    assert torch_tpu.metrics()["donated_buffers"] > 0
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(tpu_model[1], name).cpu(),
                                   getattr(cpu_model[1], name))


def test_a_graph_without_lowerings_runs_eagerly_with_one_warning(tpu):
    def f(x):
        return compile_fallback_example(x @ x.t(), torch.eye(3, device=x.device)) + 1

    x = sample((3, 3), torch.float32)
    compiled = torch.compile(f, backend="tpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = compiled(x.to(tpu))
    messages = [str(w.message) for w in caught if "backend=\"tpu\"" in str(w.message)]
    assert messages == ['torch.compile(backend="tpu"): a graph runs eagerly on tpu because it '
                        "holds tpu_test::compile_fallback_example has no tpu lowering"]
    torch.testing.assert_close(result.cpu(), f(x), rtol=1e-4, atol=1e-4)


def test_mode_and_inductor_options_are_accepted_and_ignored(tpu):
    def f(x):
        return x.relu() + 1

    x = sample((4,), torch.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = torch.compile(f, backend="tpu", mode="max-autotune")(x.to(tpu))
    torch.testing.assert_close(result.cpu(), f(x))
    assert any("mode= and inductor options are accepted and ignored" in str(w.message)
               for w in caught)


def test_dynamo_knows_the_tpu_device_interface():
    from torch._dynamo.device_interface import get_interface_for_device

    interface = get_interface_for_device("tpu")
    assert interface.device_count() == torch.tpu.device_count()
    assert interface.current_device() == torch.tpu.current_device()
    interface.synchronize()


@pytest.mark.strict_mode  # counts the eager reference's programs too
def test_compiled_optimizer_steps_match_eager(tpu):
    for make_optimizer in (lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
                           lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.01,
                                                       foreach=True)):
        torch._dynamo.reset()
        eager, compiled_model = make_mlp().to(tpu), make_mlp().to(tpu)
        eager_opt = make_optimizer(eager.parameters())
        compiled_opt = make_optimizer(compiled_model.parameters())
        compiled_step = torch.compile(compiled_opt.step, backend="tpu")
        generator = torch.Generator().manual_seed(5)
        for _ in range(3):
            x = torch.randn(16, 8, generator=generator)
            y = torch.randint(0, 4, (16,), generator=generator)
            train_step(eager, x.to(tpu), y.to(tpu))
            train_step(compiled_model, x.to(tpu), y.to(tpu))
            eager_opt.step()
            compiled_step()
        for a, b in zip(compiled_model.parameters(), eager.parameters()):
            torch.testing.assert_close(a.cpu(), b.cpu())
        # The whole update is one program; AdamW's CPU step counts are counted on the host
        # (no device-to-host reads).
        train_step(compiled_model, x.to(tpu), y.to(tpu))
        torch_tpu.reset_metrics()
        compiled_step()
        # Read before synchronizing: synchronize itself reads the 4-byte device-check word.
        transferred = torch_tpu.metrics()["transfer_to_host_bytes"]
        assert counters() == (0, 1)
        assert transferred == 0
        steps = [s["step"] for s in compiled_opt.state.values() if "step" in s]
        assert all(float(step) == 4 for step in steps)


def compiled_training_matches_eager(tpu, build, batches, loss_fn, make_optimizer,
                                    max_executions=6):
    """Trains the same model eagerly and compiled (forward, backward and optimizer in one
    compiled function); returns both loss lists and the compiled run's (compiles, executions)
    per step."""

    def run(compiled):
        torch._dynamo.reset()
        model = build().to(tpu)
        optimizer = make_optimizer(model.parameters())

        def step(x, y):
            loss = loss_fn(model, x, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            return loss

        step = torch.compile(step, backend="tpu") if compiled else step
        losses, counts = [], []
        for x, y in batches:
            torch_tpu.reset_metrics()
            losses.append(step(x.to(tpu), y.to(tpu)).item())
            counts.append(counters())
        return losses, counts

    eager_losses, _ = run(False)
    compiled_losses, counts = run(True)
    torch.testing.assert_close(compiled_losses, eager_losses, rtol=1e-5, atol=1e-5)
    # After the first steps (SGD's momentum buffers appear in step 2, a new optimizer graph):
    # no compiles, and a handful of executions per step (forward, backward, the seed gradient,
    # the optimizer graph) instead of hundreds of eager ops.
    assert [c for c, _ in counts[2:]] == [0] * (len(counts) - 2)
    assert all(e <= max_executions for _, e in counts[1:]), counts


def examples_module(name):
    import importlib
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
    return importlib.import_module(name)


def test_mingpt_compiled_training_matches_eager(tpu):
    mingpt = examples_module("mingpt")
    compiled_training_matches_eager(
        tpu, lambda: mingpt.build(0), mingpt.make_batches(3, 8, 32, 0),
        lambda model, x, y: model(x, y)[1],
        lambda p: torch.optim.AdamW(p, lr=3e-3, weight_decay=0.01))


def test_resnet_compiled_training_matches_eager(tpu):
    resnet = examples_module("resnet")
    compiled_training_matches_eager(
        tpu, lambda: resnet.build(0, width=0.25, blocks=1), resnet.make_batches(3, 4, 0),
        lambda model, x, y: F.cross_entropy(model(x), y),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9))


def test_dynamic_shapes_share_one_program_per_bucket_in_training(tpu):
    def f(x, w):
        return (x @ w).relu().sum(0)

    compiled = torch.compile(f, backend="tpu")  # the second shape makes Dynamo go dynamic
    w = sample((4, 3), torch.float32).requires_grad_()
    w_tpu = w.detach().to(tpu).requires_grad_()
    torch_tpu.reset_metrics()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for rows in (2, 5, 7):
            x = sample((rows, 4), torch.float32, seed=rows)
            result = compiled(x.to(tpu), w_tpu)
            result.sum().backward()
            expected = f(x, w)
            expected.sum().backward()
            torch.testing.assert_close(result.cpu(), expected)
            torch.testing.assert_close(w_tpu.grad.cpu(), w.grad)
    assert [str(w.message) for w in caught if 'backend="tpu"' in str(w.message)] == []
    # 5 and 7 rows share the bucket of 8: one forward and one backward program.
    assert torch_tpu.metrics()["dynamic_shape_programs"] == {
        name: 1 for name in torch_tpu.metrics()["dynamic_shape_programs"]}
    assert len(torch_tpu.metrics()["dynamic_shape_programs"]) == 2
    torch_tpu.reset_metrics()
    compiled(sample((6, 4), torch.float32).to(tpu), w_tpu)
    assert counters()[0] == 0  # that bucket's program exists already


@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen2"])
def test_huggingface_models_compiled_training_matches_eager(tpu, family):
    transformers = pytest.importorskip("transformers")
    small = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    configs = {
        "gpt2": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0,
            embd_pdrop=0.0, attn_pdrop=0.0)),
        "llama": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(**small)),
        "qwen2": lambda: transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**small)),
    }

    def build():
        torch.manual_seed(0)
        return configs[family]()

    generator = torch.Generator().manual_seed(1)
    batches = [(ids, ids) for ids in (torch.randint(0, 64, (2, 16), generator=generator)
                                      for _ in range(3))]
    compiled_training_matches_eager(
        tpu, build, batches, lambda model, ids, labels: model(input_ids=ids, labels=labels).loss,
        lambda p: torch.optim.AdamW(p, lr=1e-3), max_executions=12)


def test_compiled_graphs_run_in_debug_mode():
    from conftest import run_python

    result = run_python(
        "import torch, torch_tpu\n"
        "f = lambda x: (x @ x.t()).softmax(-1).sum(0)\n"
        "x = torch.randn(4, 4)\n"
        "got = torch.compile(f, backend='tpu')(x.to('tpu'))\n"
        "assert torch_tpu._C._is_ready(got)  # debug mode waited for the program\n"
        "torch.testing.assert_close(got.cpu(), f(x))\n"
        "print('ok')\n",
        TORCH_TPU_LAUNCH_BLOCKING="1")
    assert result.stdout.strip().endswith("ok"), result.stderr[-2000:]

"""torch.compile(model) with no backend argument: graphs on tpu tensors compile with the "tpu"
backend (same programs, same results as backend="tpu"), other graphs with Inductor as without
torch_tpu; an explicit backend="inductor" on tpu tensors is a clear error."""

import warnings

import pytest
import torch
import torch._dynamo
from torch import nn

import torch_tpu
from compile_helpers import assert_native, assert_runs, fresh_dynamo  # noqa: F401
from conftest import sample

INDUCTOR_ON_TPU = ('torch.compile: the inductor backend cannot compile tpu tensors; use '
                   'torch.compile(model) (torch_tpu routes the default backend to "tpu") or '
                   'torch.compile(model, backend="tpu")')


@pytest.fixture(params=["strict", "defer_and_fuse"])
def eager_mode(request):
    with torch_tpu.eager_mode(request.param):
        yield request.param


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4))


def test_the_default_backend_is_tpu_or_inductor():
    assert torch.compiler.get_default_backend() == "tpu_or_inductor"
    assert "tpu_or_inductor" in torch._dynamo.list_backends()


def test_plain_compile_runs_the_tpu_programs(eager_mode):
    """Same results as backend="tpu" (bit for bit: the same programs) and as CPU."""
    cpu = model()
    x = sample((4, 8), torch.float32)
    plain = torch.compile(model().to("tpu"))(x.to("tpu"))
    explicit = torch.compile(model().to("tpu"), backend="tpu")(x.to("tpu"))
    torch.testing.assert_close(plain.cpu(), explicit.cpu(), rtol=0, atol=0)
    torch.testing.assert_close(plain.cpu(), cpu(x), rtol=1e-5, atol=1e-5)
    assert_native()


def test_plain_compile_programs_run_once_per_call():
    compiled = torch.compile(lambda a, b: (a @ b).relu().sum(0))
    a, b = sample((8, 8), torch.float32), sample((8, 8), torch.float32, seed=1)
    compiled(a.to("tpu"), b.to("tpu"))
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    result = compiled(a.to("tpu"), b.to("tpu"))
    torch.tpu.synchronize()
    metrics = torch_tpu.metrics()
    assert (metrics["compile_count"], metrics["execute_count"]) == (0, 1)
    torch.testing.assert_close(result.cpu(), (a @ b).relu().sum(0))


def test_plain_compile_training_step_matches_backend_tpu(eager_mode):
    x, target = sample((4, 8), torch.float32), sample((4, 4), torch.float32, seed=1)
    runs = {}
    for backend in (None, "tpu"):
        torch._dynamo.reset()
        net = model().to("tpu")
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        compiled = torch.compile(net) if backend is None else torch.compile(net, backend=backend)
        losses = []
        for _ in range(3):
            loss = nn.functional.mse_loss(compiled(x.to("tpu")), target.to("tpu"))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        runs[backend] = (losses, [p.detach().cpu() for p in net.parameters()])
    assert runs[None][0] == runs["tpu"][0]
    for got, want in zip(runs[None][1], runs["tpu"][1]):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert_native()


def test_a_graph_that_only_creates_tpu_tensors_goes_to_tpu():
    def f():
        return torch.arange(6, device="tpu").reshape(2, 3).float().exp().sum(1)

    torch.testing.assert_close(torch.compile(f, fullgraph=True)().cpu(),
                               torch.arange(6).reshape(2, 3).float().exp().sum(1))
    assert_native()


def test_mode_and_options_are_accepted_with_one_note():
    x = sample((4,), torch.float32)
    torch_tpu._dynamo._warned.clear()  # the note is once per process; an earlier file may warn
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        by_mode = torch.compile(lambda t: t.relu() + 1, mode="max-autotune")(x.to("tpu"))
        by_options = torch.compile(lambda t: t.relu() * 2,
                                   options={"max_autotune": True})(x.to("tpu"))
    torch.testing.assert_close(by_mode.cpu(), x.relu() + 1)
    torch.testing.assert_close(by_options.cpu(), x.relu() * 2)
    assert any("mode= and inductor options are accepted and ignored" in str(w.message)
               for w in caught)


def test_explicit_inductor_on_tpu_tensors_is_an_error():
    with pytest.raises(Exception) as raised:
        torch.compile(model().to("tpu"), backend="inductor")(torch.randn(2, 8).to("tpu"))
    assert INDUCTOR_ON_TPU in str(raised.value)


def test_opting_out_restores_inductor_as_the_default():
    torch.compiler.set_default_backend("inductor")
    try:
        with pytest.raises(Exception) as raised:
            torch.compile(model().to("tpu"))(torch.randn(2, 8).to("tpu"))
        assert INDUCTOR_ON_TPU in str(raised.value)
    finally:
        torch.compiler.set_default_backend("tpu_or_inductor")


@pytest.fixture
def inductor_calls(monkeypatch):
    """Inductor's entry point, recorded: (the graph's input devices, its config patches); the
    graph then runs as captured."""
    import torch._inductor.compile_fx as compile_fx

    calls = []

    def record(gm, example_inputs, config_patches=None, **kwargs):
        calls.append(({str(t.device) for t in example_inputs if isinstance(t, torch.Tensor)},
                      dict(config_patches or {})))
        return gm.forward

    monkeypatch.setattr(compile_fx, "compile_fx", record)
    return calls


def test_cpu_graphs_go_to_inductor_with_mode_and_options(inductor_calls):
    x = sample((4, 4), torch.float32)
    torch.compile(lambda t: t.sin() + 1)(x)
    torch.compile(lambda t: t.cos() + 1, mode="max-autotune")(x)
    torch.compile(lambda t: t.tan() + 1, options={"epilogue_fusion": False})(x)
    assert [devices for devices, _ in inductor_calls] == [{"cpu"}] * 3
    assert "max_autotune" not in inductor_calls[0][1]
    assert inductor_calls[1][1]["max_autotune"] is True
    assert inductor_calls[2][1] == {"epilogue_fusion": False}
    # A tpu graph never reaches Inductor.
    torch.compile(lambda t: t.sin() + 1)(x.to("tpu"))
    assert len(inductor_calls) == 3


def test_unknown_inductor_options_stay_inductor_errors_on_cpu():
    with pytest.raises(Exception, match="Unexpected optimization option not_an_option"):
        torch.compile(lambda t: t + 1, options={"not_an_option": 1})(torch.randn(2))


def test_cpu_graphs_still_compile_with_real_inductor():
    torch.manual_seed(0)
    net = nn.Linear(4, 3)
    x = torch.randn(2, 4)
    torch.testing.assert_close(torch.compile(net)(x), net(x))


def test_a_default_chosen_before_torch_tpu_loads_is_kept():
    assert_runs(
        "import torch, torch._dynamo\n"
        "torch.compiler.set_default_backend('eager')\n"
        "import torch_tpu\n"
        "assert torch.compiler.get_default_backend() == 'eager'\n"
        "assert 'tpu_or_inductor' in torch._dynamo.list_backends()\n")


def test_plain_compile_without_importing_dynamo_first():
    """The routing is in place however Dynamo gets loaded: by the first torch.compile."""
    assert_runs(
        "import sys, torch, torch_tpu\n"
        "assert 'torch._dynamo' not in sys.modules\n"
        "x = torch.arange(4.0)\n"
        "got = torch.compile(lambda t: t * 2 + 1)(x.to('tpu'))\n"
        "torch.testing.assert_close(got.cpu(), x * 2 + 1)\n",
        TORCH_TPU_DEFER_AND_FUSE="1")

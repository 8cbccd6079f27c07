"""Defer-and-fuse eager mode: ops are recorded into a pending graph and run as one program at a
materialization point, with the values strict mode (and PyTorch on CPU) gives."""

import sys
from pathlib import Path

import pytest
import torch

import torch_tpu
from conftest import run_python
from cpu_only_ops import define_cpu_only_op

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import mingpt  # noqa: E402
import resnet  # noqa: E402

fuse_fallback_example = define_cpu_only_op("fuse_fallback_example")

# Each test picks its modes, starting from strict mode, the default.
pytestmark = pytest.mark.strict_mode


@pytest.fixture
def fuse():
    torch.tpu.synchronize()
    with torch_tpu.eager_mode("defer_and_fuse"):
        yield
    torch.tpu.synchronize()


def chain(x, y):
    z = x * 2 + y
    z = torch.relu(z) - 0.5 * y
    z = z.sigmoid() * z.tanh() + x.exp().clamp(max=3.0)
    return z / (1 + y.abs())


def test_mode_setting_and_context_manager():
    assert torch_tpu.get_eager_mode() == "strict"
    with torch_tpu.eager_mode("defer_and_fuse"):
        assert torch_tpu.get_eager_mode() == "defer_and_fuse"
        with torch_tpu.eager_mode("strict"):
            assert torch_tpu.get_eager_mode() == "strict"
        assert torch_tpu.get_eager_mode() == "defer_and_fuse"
    assert torch_tpu.get_eager_mode() == "strict"
    with pytest.raises(ValueError, match="unknown eager mode"):
        torch_tpu.set_eager_mode("lazy")


def test_environment_variable_selects_the_mode():
    result = run_python("import torch, torch_tpu; print(torch_tpu.get_eager_mode())",
                        TORCH_TPU_DEFER_AND_FUSE="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "defer_and_fuse"


def test_elementwise_chain_matches_strict_and_cpu_with_fewer_programs():
    a, b = torch.randn(64, 33), torch.randn(64, 33)
    x, y = a.to("tpu"), b.to("tpu")
    chain(x, y).cpu()  # compile strict mode's programs
    torch_tpu.reset_metrics()
    strict = chain(x, y).cpu()
    strict_programs = torch_tpu.metrics()["execute_count"]
    with torch_tpu.eager_mode("defer_and_fuse"):
        chain(x, y).cpu()  # compile the fused program
        torch_tpu.reset_metrics()
        fused = chain(x, y).cpu()
        metrics = torch_tpu.metrics()
    torch.testing.assert_close(fused, strict)
    torch.testing.assert_close(fused, chain(a, b))
    assert metrics["execute_count"] == 1 < strict_programs
    assert metrics["fused_graphs"] == 1 and metrics["fused_ops"] >= 10
    assert metrics["compile_count"] == 0
    assert metrics["fuse_cuts"] == {"to_cpu": 1}


def test_python_scalars_are_runtime_arguments(fuse):
    x = torch.randn(100, device="tpu")
    x.cpu()  # x itself comes from a fused graph: the loop's graphs start from its buffer
    (x * 0.5 + 1.0).cpu()
    torch_tpu.reset_metrics()
    for step in range(5):
        result = (x * (0.1 * step) + float(step)).cpu()
        torch.testing.assert_close(result, x.cpu() * (0.1 * step) + step)
    assert torch_tpu.metrics()["compile_count"] == 0


def test_views_and_in_place_ops_on_views(fuse):
    a = torch.randn(5, 6)
    x = a.to("tpu")
    cpu, dev = a.clone(), x.clone()
    for t in (cpu, dev):
        t[1:].mul_(2)
        t.t().add_(1)
        t[:, 0].zero_()
        t.diagonal().fill_(7)
        t.view(-1)[3:9].sub_(0.25)
        t[:4:2, 1::2] += t[1::2, ::2]
    torch.testing.assert_close(dev.cpu(), cpu)


def test_ops_on_a_storage_written_earlier_in_the_graph(fuse):
    a = torch.randn(4, 4)
    x = a.to("tpu")
    y, cy = x.clone(), a.clone()
    outs = []
    for t in (y, cy):
        t.add_(1)
        z = t * 2  # reads the written value
        t.mul_(3)
        w = t[1] + z[2]  # reads both the storage written twice and a result
        t.copy_(w.expand(4, 4))
        outs.append((z, w, t))
    for dev, cpu in zip(outs[0], outs[1]):
        torch.testing.assert_close(dev.cpu(), cpu)


def test_dead_intermediates_are_not_program_outputs():
    code = """
import torch, torch_tpu
x = torch.randn(1000, device="tpu")
torch_tpu.set_eager_mode("defer_and_fuse")
y = ((x * 2 + 1).exp() - 3).relu()   # three intermediates die right away
kept = x + 1                          # alive at the cut
y.cpu()
"""
    result = run_python(code, TORCH_TPU_FUSE_DEBUG="1")
    assert result.returncode == 0, result.stderr
    cuts = [line for line in result.stderr.splitlines() if "torch_tpu fuse: cut" in line]
    assert cuts and "(to_cpu): 6 ops" in cuts[0] and "2 outputs" in cuts[0], cuts


def test_host_reads_cut_the_graph(fuse, capsys):
    x = torch.arange(6.0, device="tpu")
    torch_tpu.reset_metrics()
    y = x * 2
    assert y.sum().item() == 30.0
    assert (y + 1).tolist() == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]
    print(y - 1)
    assert "tensor([-1.,  1.,  3.,  5.,  7.,  9.], device='tpu:0')" in capsys.readouterr().out
    assert (y[y > 4]).cpu().tolist() == [6.0, 8.0, 10.0]  # data-dependent shape
    cuts = torch_tpu.metrics()["fuse_cuts"]
    assert cuts.get("item", 0) >= 2 and cuts.get("to_cpu", 0) >= 2, cuts


def test_fallback_ops_get_real_inputs(fuse):
    a = torch.rand(10) + 0.1
    x = a.to("tpu")
    torch_tpu.reset_metrics()
    result = fuse_fallback_example(x * 3, x)
    assert torch_tpu.metrics()["fallback_ops"] == {"tpu_test::fuse_fallback_example": 1}
    torch.testing.assert_close((result + 1).cpu(), fuse_fallback_example(a * 3, a) + 1)
    assert torch_tpu.metrics()["fuse_cuts"].get("fallback", 0) >= 1


def random_draws(device):
    torch.manual_seed(123)
    x = torch.ones(50, 8, device=device)
    return [torch.rand(5, device=device), torch.randn(3, 4, device=device),
            torch.nn.functional.dropout(x, 0.3), torch.randint(0, 9, (20,), device=device),
            torch.randn_like(x).mul_(2)]


def test_random_numbers_equal_strict_modes():
    strict = [t.cpu() for t in random_draws("tpu")]
    with torch_tpu.eager_mode("defer_and_fuse"):
        fused = random_draws("tpu")
        fused = [t.cpu() for t in fused]
    for a, b in zip(strict, fused):
        assert torch.equal(a, b)


def test_leaving_fuse_mode_and_synchronize_run_the_graph():
    x = torch.ones(3, device="tpu")
    torch_tpu.reset_metrics()
    with torch_tpu.eager_mode("defer_and_fuse"):
        y = x + 1
        assert torch_tpu.metrics()["execute_count"] == 0
    assert torch_tpu.metrics()["fuse_cuts"] == {"mode_switch": 1}
    assert torch_tpu._C._is_ready(y) or True
    torch.testing.assert_close(y.cpu(), torch.full((3,), 2.0))
    with torch_tpu.eager_mode("defer_and_fuse"):
        z = y * 3
        torch.tpu.synchronize()
        assert torch_tpu.metrics()["fuse_cuts"].get("synchronize") == 1
        torch.testing.assert_close(z.cpu(), torch.full((3,), 6.0))


def test_graph_size_limit():
    code = """
import torch, torch_tpu
x = torch.zeros(10, device="tpu")
torch_tpu.set_eager_mode("defer_and_fuse")
for _ in range(10):
    x = x + 1
print(x.cpu().tolist(), torch_tpu.metrics()["fuse_cuts"])
"""
    result = run_python(code, TORCH_TPU_FUSE_MAX_OPS="4")
    assert result.returncode == 0, result.stderr
    assert "[10.0, 10.0" in result.stdout and "'max_ops': 2" in result.stdout, result.stdout


def test_errors_name_the_ops_of_the_graph(fuse):
    x = torch.ones(100, device="tpu")
    torch.tpu.synchronize()
    torch_tpu._C._fail_storage(x, "injected device fault")
    y = (x * 2).sum()  # noqa: F841  (alive at the cut, so the graph reads x)
    with pytest.raises(RuntimeError, match=r"fused graph of 2 ops \(aten::mul.Tensor, aten::sum"):
        torch.tpu.synchronize()
    index = torch.tensor([1, 12], device="tpu")
    source = torch.arange(5.0, device="tpu")
    picked = source[index] + 1
    with pytest.raises(IndexError, match="aten::index.Tensor"):
        picked.cpu()
    torch.tpu.synchronize()


def test_shape_errors_raise_at_the_call(fuse):
    x = torch.ones(3, 4, device="tpu")
    with pytest.raises(RuntimeError):
        x + torch.ones(5, device="tpu")
    torch.testing.assert_close((x + 1).cpu(), torch.full((3, 4), 2.0))


class _StepMetrics(list):
    """Given to an example's train_model as `timings`: records (programs run, compiles) so far at
    the end of each step instead of the time."""

    def append(self, _):
        metrics = torch_tpu.metrics()
        super().append((metrics["execute_count"], metrics["compile_count"]))


@pytest.mark.parametrize("example, options", [(mingpt, {}), (resnet, {"width": 0.25, "blocks": 1})],
                         ids=["mingpt", "resnet"])
def test_examples_train_like_strict_with_one_program_per_step(example, options):
    steps = 6
    strict_model, strict = example.train_model("tpu", steps=steps, seed=0, **options)
    ends = _StepMetrics()
    with torch_tpu.eager_mode("defer_and_fuse"):
        model, fused = example.train_model("tpu", steps=steps, seed=0, timings=ends, **options)
    torch.testing.assert_close(torch.tensor(fused), torch.tensor(strict), rtol=1e-4, atol=1e-5)
    # AdamW's normalized update turns float reassociation in a near-zero gradient into up to a
    # learning-rate-sized step (3e-3), so weights agree to well under one step.
    for (name, ours), theirs in zip(model.state_dict().items(), strict_model.state_dict().values()):
        torch.testing.assert_close(ours.cpu(), theirs.cpu(), rtol=1e-3, atol=1e-3, msg=name)
    # Every step after the first (which creates the optimizer state) is one program - forward,
    # backward, AdamW, BatchNorm statistics, up to the loss read - where strict mode runs hundreds;
    # the second step compiles the steady-state graph once and later steps compile nothing.
    per_step = [(b[0] - a[0], b[1] - a[1]) for a, b in zip(ends, ends[1:])]
    assert per_step == [(1, 1)] + [(1, 0)] * (steps - 2), per_step


def test_memory_statistics_count_recorded_results(fuse):
    before = torch.tpu.memory_allocated()
    x = torch.zeros(1024, device="tpu") + 1
    # The pending graph runs first, so the result holds its buffer as in strict mode.
    assert torch.tpu.memory_allocated() - before == 4096
    assert torch.accelerator.memory_allocated() - before == 4096
    assert torch_tpu.metrics()["fuse_cuts"].get("memory_stats", 0) >= 1
    assert torch.equal(x.cpu(), torch.ones(1024))

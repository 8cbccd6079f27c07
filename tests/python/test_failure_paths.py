"""What failures do to tensors (docs/semantics.md), in every mode: a failed compile, execution or
transfer names the op or graph, counts in metrics()["injected_failures"], leaves every tensor the
failed work would have written raising the original error on use (never zeros, never the old
value), and the process keeps working: the same work runs again (compiling again) and matches
CPU. Also: the plan caches' memory bound frees loaded executables."""

import re

import pytest
import torch
import torch._dynamo

import torch_tpu
from torch_tpu.testing import inject_failure
from conftest import run_python

EAGER_MODES = ("strict", "debug", "defer_and_fuse")
MODES = EAGER_MODES + ("compiled",)


def _work(x, target):
    y = torch.sinh(x)
    target.mul_(y)
    return y


@pytest.fixture(autouse=True)
def _clean_state():
    mode = torch_tpu.get_eager_mode()
    torch._dynamo.reset()
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    yield
    for site in ("compile", "execute", "transfer"):
        inject_failure(site, 0)
    torch_tpu.set_eager_mode(mode)
    torch._dynamo.reset()
    try:
        torch.tpu.synchronize()
    except RuntimeError:
        pass  # a failure a test left unreported does not leak into the next test


def _inputs(n, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(n, generator=generator)
    target = torch.rand(n, generator=generator) + 0.5
    return x, target


def _runner(mode):
    """Runs _work in `mode` on tpu tensors."""
    if mode == "compiled":
        return torch.compile(_work, backend="tpu", dynamic=False)
    torch_tpu.set_eager_mode(mode)
    return _work


def _injected(site):
    return re.escape(f"injected {site} failure (torch_tpu.testing)")


def _assert_raises_injected(tensor, site):
    with pytest.raises(RuntimeError, match="^copying a tpu tensor to the CPU failed: .*" +
                       _injected(site)):
        tensor.cpu()


def _assert_works_again(run, n, seed):
    """The same work, again: right values (so nothing failed stayed cached)."""
    x, target = _inputs(n, seed)
    target_tpu = target.to("tpu")
    y = run(x.to("tpu"), target_tpu)
    expected_target = target.clone()
    expected = _work(x, expected_target)
    torch.testing.assert_close(y.cpu(), expected)
    torch.testing.assert_close(target_tpu.cpu(), expected_target)
    torch.tpu.synchronize()


def _fused_or_op(mode):
    """How an error names the failed work of `_work` in `mode`."""
    if mode == "defer_and_fuse":
        return re.escape("a fused graph of 2 ops (aten::sinh, aten::mul.Tensor)")
    if mode == "compiled":
        return r"compiled graph \d+\(Float\[\d+\], Float\[\d+\]\)"
    return r"aten::sinh\(Float\[\d+\]\)"


@pytest.mark.parametrize("mode", MODES)
def test_failed_execution_fails_every_tensor_it_writes(mode):
    n = 4096 + MODES.index(mode)
    run = _runner(mode)
    _assert_works_again(run, n, seed=1)  # compiled and cached: only the execution fails below
    x, target = _inputs(n, seed=2)
    x, target = x.to("tpu"), target.to("tpu")
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    if mode == "debug":
        # Debug mode waits for each op: the failed one raises at the call, naming itself.
        with inject_failure("execute"), pytest.raises(
                RuntimeError,
                match="^" + _fused_or_op(mode) + ": device execution failed: .*" +
                _injected("execute")):
            run(x, target)
        assert torch_tpu.metrics()["injected_failures"] == {"execute": 1}
        # The in-place op never ran (its operand raised first): its target keeps its values.
        target.mul_(x)
        with inject_failure("execute"), pytest.raises(RuntimeError, match=_injected("execute")):
            target.mul_(x)
        _assert_raises_injected(target, "execute")
    else:
        # Asynchronous: the call returns; the failure is raised at the next synchronization
        # (a fused graph runs there).
        with inject_failure("execute"):
            y = run(x, target)
            with pytest.raises(RuntimeError, match="^tpu: an earlier asynchronous device operation "
                               "failed in " + _fused_or_op(mode) + ": device work failed: .*" +
                               _injected("execute") + "$"):
                torch.tpu.synchronize()
        assert torch_tpu.metrics()["injected_failures"] == {"execute": 1}
        torch.tpu.synchronize()  # raised once
        _assert_raises_injected(y, "execute")
        _assert_raises_injected(target, "execute")  # never its old values
        # Work reading a failed tensor fails with the original error.
        with pytest.raises(RuntimeError, match=_injected("execute")):
            (y + 1).cpu()
    try:
        torch.tpu.synchronize()
    except RuntimeError:
        pass  # (y + 1)'s own report
    _assert_works_again(run, n, seed=3)


# Sizes no other test compiles, so that these programs miss every cache tier and really compile.
COMPILE_SIZES = {mode: 6151 + 12 * index for index, mode in enumerate(MODES)}


@pytest.mark.parametrize("mode", MODES)
def test_failed_compile_fails_the_work_and_is_not_cached(mode):
    n = COMPILE_SIZES[mode]
    run = _runner(mode)
    x, target = _inputs(n, seed=4)
    x, target = x.to("tpu"), target.to("tpu")
    if mode in ("strict", "debug"):
        # Only sinh compiles below: mul_ of two storages of this size is compiled first.
        scratch = torch.ones(n, device="tpu")
        scratch.mul_(torch.ones(n, device="tpu"))
    before = target.cpu()
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    with inject_failure("compile"):
        if mode == "debug":
            # Compiled on the calling thread: the call raises, having written nothing.
            with pytest.raises(RuntimeError, match="^" + _fused_or_op(mode).split(r"\(")[0] +
                               ".*: " + _injected("compile")):
                run(x, target)
            torch.testing.assert_close(target.cpu(), before)
        else:
            # Compiled in the background (a compiled graph's program too): the call returns, its
            # outputs and the storages it writes fail, and the next sync raises.
            y = run(x, target)
            with pytest.raises(RuntimeError, match="^tpu: an earlier asynchronous device "
                               "operation failed in " + _fused_or_op(mode) + ": " +
                               _injected("compile")):
                torch.tpu.synchronize()
            _assert_raises_injected(y, "compile")
            _assert_raises_injected(target, "compile")
    assert torch_tpu.metrics()["injected_failures"] == {"compile": 1}
    try:
        torch.tpu.synchronize()
    except RuntimeError:
        pass
    # The failed program was not cached: the next call compiles it again and works.
    torch_tpu.reset_metrics()
    _assert_works_again(run, n, seed=5)
    assert torch_tpu.metrics()["cache_misses"] >= 1


@pytest.mark.parametrize("mode", MODES)
def test_failed_transfers_raise_at_the_copy_and_write_nothing(mode):
    n = 2048 + MODES.index(mode)
    run = _runner(mode)
    x, target = _inputs(n, seed=6)
    upload_failed = "^copying a CPU tensor to tpu failed: " + _injected("transfer") + "$"
    with inject_failure("transfer"), pytest.raises(RuntimeError, match=upload_failed):
        x.to("tpu")
    x_tpu, target_tpu = x.to("tpu"), target.to("tpu")
    with inject_failure("transfer"), pytest.raises(RuntimeError, match=upload_failed):
        target_tpu.copy_(torch.zeros(n))
    y = run(x_tpu, target_tpu)
    with inject_failure("transfer"):
        _assert_raises_injected(y, "transfer")
    assert torch_tpu.metrics()["injected_failures"] == {"transfer": 3}
    # The failed download left the tensor as it was.
    expected_target = target.clone()
    torch.testing.assert_close(y.cpu(), _work(x, expected_target))
    torch.testing.assert_close(target_tpu.cpu(), expected_target)


@pytest.mark.strict_mode  # background compiles
def test_launches_sharing_a_failed_compile_all_fail_and_the_next_one_compiles_again():
    n = 6211
    x = torch.rand(n)
    x_tpu = x.to("tpu")
    torch.tpu.synchronize()
    torch_tpu._C._hold_compiles(True)
    try:
        with inject_failure("compile"):
            first = torch.cosh(x_tpu)  # compiles in the background, held
            second = torch.cosh(x_tpu)  # the same plan, waiting for the same compile
            torch_tpu._C._hold_compiles(False)
            with pytest.raises(RuntimeError, match=re.escape(f"aten::cosh(Float[{n}])") + ": " +
                               _injected("compile")):
                torch.tpu.synchronize()
    finally:
        torch_tpu._C._hold_compiles(False)
    _assert_raises_injected(first, "compile")
    _assert_raises_injected(second, "compile")
    torch.testing.assert_close(torch.cosh(x_tpu).cpu(), torch.cosh(x))


LIVE_EXECUTABLES = """
import torch, torch_tpu, torch._dynamo
mode = {mode!r}
for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
             "accumulated_recompile_limit"):
    if hasattr(torch._dynamo.config, name):
        setattr(torch._dynamo.config, name, 1000)
def work(x):
    return x.sinh() * 2
run = torch.compile(work, backend="tpu", dynamic=False) if mode == "compiled" else work
if mode != "compiled":
    torch_tpu.set_eager_mode(mode)
# Sizes on no line (exec/growing_shapes.h): one program per size.
xs = [torch.rand(300 + k * k) for k in range(12)]
before = torch_tpu._C._live_executables()
for x in xs:
    torch.testing.assert_close(run(x.to("tpu")).cpu(), work(x))
torch.tpu.synchronize()
print("programs", len(xs), "live", torch_tpu._C._live_executables() - before)
# The first program's plan and executable are gone: it is built and loaded again.
torch.testing.assert_close(run(xs[0].to("tpu")).cpu(), work(xs[0]))
print("again ok")
"""


@pytest.mark.parametrize("mode", MODES)
def test_the_memory_bound_frees_loaded_executables(mode):
    def live(**env):
        completed = run_python(LIVE_EXECUTABLES.format(mode=mode), TORCH_TPU_PRELOAD="0",
                               TORCH_TPU_GROWING_SHAPES="0", **env)
        assert completed.returncode == 0, completed.stderr
        assert "again ok" in completed.stdout, completed.stdout
        programs, count = re.search(r"programs (\d+) live (-?\d+)", completed.stdout).groups()
        return int(programs), int(count)

    programs, unbounded = live()
    assert unbounded >= programs  # every program stays loaded (its plan holds it)
    _, bounded = live(TORCH_TPU_CACHE_MEMORY_MAX_ENTRIES="2")
    # At most the memory tier's two and the plan cache's two stay loaded.
    assert bounded <= 4, bounded


@pytest.mark.parametrize("mode", EAGER_MODES)
def test_a_failed_checking_program_does_not_fail_later_ones(mode):
    # Index-taking programs update the device error word; one that failed leaves a failed word,
    # which later checking programs must not inherit.
    torch_tpu.set_eager_mode(mode)
    source = torch.arange(10.0)
    index = torch.tensor([3, 1, 4])
    source_tpu, index_tpu = source.to("tpu"), index.to("tpu")
    bad_index = torch.tensor([0, 1, 2], device="tpu")
    torch.tpu.synchronize()
    torch_tpu._C._fail_storage(bad_index, "injected device fault")
    with pytest.raises(RuntimeError, match="injected device fault"):
        source_tpu[bad_index].cpu()  # debug mode raises at the indexing (its index check)
    try:
        torch.tpu.synchronize()
    except RuntimeError:
        pass  # the failed gather's report, where it was not raised at the call
    torch.testing.assert_close(source_tpu[index_tpu].cpu(), source[index])
    torch.tpu.synchronize()

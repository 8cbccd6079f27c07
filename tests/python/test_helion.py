"""Helion kernels with the Pallas backend run unmodified on tpu tensors: Helion's launcher finds
torch_tpu._internal (JaxCallable, call_custom_kernel), so each kernel is traced by JAX and runs in
our programs (Pallas' HLO interpreter on the XLA CPU plugin), compared with PyTorch CPU."""

import helion
import helion.language as hl
import pytest
import torch

import torch_tpu


# Written as Helion's examples/add.py and examples/softmax.py write them (tile loops over torch
# ops), with the Pallas backend and no autotuning.
@helion.kernel(backend="pallas", autotune_effort="none")
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x, y = torch.broadcast_tensors(x, y)
    out = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, y.dtype), device=x.device)
    for tile in hl.tile(out.size()):
        out[tile] = x[tile] + y[tile]
    return out


@helion.kernel(backend="pallas", autotune_effort="none")
def softmax(x: torch.Tensor) -> torch.Tensor:
    n, _m = x.size()
    out = torch.empty_like(x)
    for tile_n in hl.tile(n):
        out[tile_n, :] = torch.nn.functional.softmax(x[tile_n, :], dim=1)
    return out


@helion.kernel(backend="pallas", autotune_effort="none")
def add_(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size()):
        x[tile] = x[tile] + y[tile]
    return x


def _inputs(*shapes):
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(shape, generator=generator) for shape in shapes]


def test_add_runs_through_torch_tpu():
    x, y = _inputs((64, 128), (64, 128))
    torch_tpu.reset_metrics()
    result = add(x.to("tpu"), y.to("tpu"))
    assert result.device.type == "tpu"
    torch.testing.assert_close(result.cpu(), x + y)
    # The kernel ran as one of our programs (no CPU fallback, no JAX runtime).
    metrics = torch_tpu.metrics()
    assert metrics["execute_count"] >= 1 and metrics.get("fallback_ops", {}) == {}


def test_softmax():
    (x,) = _inputs((32, 128))
    result = softmax(x.to("tpu"))
    torch.testing.assert_close(result.cpu(), torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6)


def test_in_place_kernel_writes_its_input():
    # Helion passes the written input as an input/output alias: the result is copied into it.
    x, y = _inputs((64, 128), (64, 128))
    tx = x.to("tpu")
    result = add_(tx, y.to("tpu"))
    assert result is tx
    torch.testing.assert_close(tx.cpu(), x + y)


@pytest.mark.parametrize("mode", ["defer_and_fuse"])
def test_kernels_in_fused_mode(mode):
    x, y = _inputs((64, 128), (64, 128))
    with torch_tpu.eager_mode(mode):
        result = softmax(add(x.to("tpu"), y.to("tpu")) * 2).cpu()
    torch.testing.assert_close(result, torch.softmax((x + y) * 2, dim=1), rtol=1e-5, atol=1e-6)


def test_kernels_under_torch_compile():
    """Dynamo captures a Helion kernel as Helion's higher-order op (no graph break); our backend
    cannot lower that op into a program yet, so the graph runs eagerly, with a warning, and the
    kernels still run through torch_tpu."""
    x, y = _inputs((64, 128), (64, 128))

    def model(a, b):
        return softmax(add(a, b).relu())

    torch._dynamo.reset()
    torch_tpu._dynamo._warned.clear()
    compiled = torch.compile(model, backend="tpu", fullgraph=True)
    with pytest.warns(UserWarning, match="a graph runs eagerly on tpu because it holds "
                      "helion_kernel_wrapper_functional"):
        result = compiled(x.to("tpu"), y.to("tpu"))
    torch.testing.assert_close(result.cpu(), torch.softmax((x + y).relu(), dim=1), rtol=1e-5,
                               atol=1e-6)

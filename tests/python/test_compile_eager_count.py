"""torch.compile(backend="tpu"): graphs that run eagerly are counted with their reason
(metrics()["compiled_graphs_eager"]); dtype casts, device-preserving copies and a single
multi-output op run as programs, with CPU's results."""

import pytest
import torch

import torch_tpu
from conftest import assert_same


def _run(fn, *cpu_inputs):
    """fn compiled on tpu inputs, fn eagerly on CPU, and what counted while the compiled call
    ran (it is called twice: the second call must not compile)."""
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="tpu")
    tpu_inputs = [x.to("tpu") for x in cpu_inputs]
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    first = compiled(*tpu_inputs)
    second = compiled(*tpu_inputs)
    torch.tpu.synchronize()
    counted = torch_tpu.metrics()
    expected = fn(*cpu_inputs)
    for result in (first, second):
        results = result if isinstance(result, tuple) else (result,)
        expecteds = expected if isinstance(expected, tuple) else (expected,)
        assert len(results) == len(expecteds)
        for got, want in zip(results, expecteds):
            if want.device.type == "cpu" and got.device.type == "cpu":
                torch.testing.assert_close(got, want)
            else:
                assert_same(got, want)
                assert got.stride() == want.stride()
    return counted


def _runs_as_one_program(counted: dict) -> None:
    assert "compiled_graphs_eager" not in counted, counted["compiled_graphs_eager"]
    assert counted["fallback_ops"] == {}
    # One execution per call: the graph's program (an eager run executes once per op).
    assert counted["execute_count"] == 2, counted["execute_count"]


AS_PROGRAMS = {
    "dtype_casts": (lambda x: (x * 3).to(torch.float16).to(torch.int32) + 1,
                    [torch.randn(4, 5) * 10]),
    "float_and_bool": (lambda x: (x > 0).float() * x.double().sum(), [torch.randn(6)]),
    "to_same_device_copy": (lambda x: x.to(x.device, copy=True) * 2, [torch.randn(3, 3)]),
    "to_channels_last": (lambda x: (x + 1).to(memory_format=torch.channels_last),
                         [torch.randn(2, 3, 4, 5)]),
    "copy_into_new": (lambda x: torch.empty_like(x).copy_(x * 2) + 1, [torch.randn(4, 4)]),
    "copy_broadcast_and_cast": (
        lambda x: torch.zeros(3, 4, dtype=torch.float64, device=x.device).copy_(x[0].sin()) - 1,
        [torch.randn(2, 4)]),
    "copy_into_a_slice": (lambda x: (lambda y: (y[1:].copy_(x[:-1] * 5), y)[1])(x.clone()),
                          [torch.randn(5, 2)]),
    "copy_int_into_float": (
        lambda x: torch.zeros(3, 5, device=x.device).copy_((x * 4).to(torch.int64)) / 3,
        [torch.randn(3, 5)]),
    "constant_to_device": (lambda x: x + torch.tensor([1.0, 2.0, 3.0]).to(x.device),
                           [torch.randn(2, 3)]),
    "host_arange_to_device": (lambda x: x * torch.arange(3.0).to(x.device, torch.float64),
                              [torch.randn(3)]),
    "max_dim": (lambda x: torch.max(x, 1), [torch.randn(4, 6)]),
    "sort": (lambda x: torch.sort(x, -1, descending=True), [torch.randn(3, 7)]),
    "var_mean": (lambda x: torch.var_mean(x, 0), [torch.randn(5, 3)]),
}


@pytest.mark.parametrize("case", sorted(AS_PROGRAMS))
def test_runs_as_one_program_with_cpus_results(case):
    fn, inputs = AS_PROGRAMS[case]
    _runs_as_one_program(_run(fn, *inputs))


def test_a_copy_to_the_host_runs_eagerly_and_is_counted():
    counted = _run(lambda x: (x * 2).cpu() + 1, torch.randn(4))
    assert counted["compiled_graphs_eager"] == {
        "it holds aten::_to_copy to cpu (a copy off the device inside the graph)": 1}


def test_every_graph_that_runs_eagerly_is_counted():
    # Two graphs (a graph break between them), each holding a copy to the host.
    def fn(x):
        y = (x + 1).cpu()
        print("", end="")  # graph break
        return (y.to("tpu") * 2).cpu()

    counted = _run(fn, torch.randn(3))
    assert sum(counted["compiled_graphs_eager"].values()) == 2, counted["compiled_graphs_eager"]
    torch_tpu.reset_metrics()
    assert "compiled_graphs_eager" not in torch_tpu.metrics()


def test_host_randomness_moved_to_the_device_runs_eagerly_and_is_counted():
    # A host value that changes every call cannot become a constant of the program.
    torch._dynamo.reset()
    torch_tpu.reset_metrics()
    compiled = torch.compile(lambda x: x + torch.randn(3).to(x.device), backend="tpu")
    x = torch.zeros(3, device="tpu")
    assert not torch.equal(compiled(x).cpu(), compiled(x).cpu())
    assert torch_tpu.metrics()["compiled_graphs_eager"] == {
        "it holds a host tensor normal_functional used by tpu ops": 1}

"""A compiled function traced with fake tensors (a FakeTensorMode around the call, as export and
outer tracers do) propagates them like its eager code: fake results, nothing run on the device,
and the real calls after it still run the compiled program. A program never reads a tensor
without a device buffer (it would read zeros)."""

import pytest
import torch
import torch._dynamo
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import torch_tpu
from compile_helpers import assert_native, fresh_dynamo  # noqa: F401
from conftest import sample
from torch_tpu._dynamo.graph_call import _compile_graph


def function(x, y):
    return (x * 2).sin() @ y + 1


def test_a_compiled_call_under_fake_tensor_mode_returns_fake_results():
    x, y = sample((4, 3), torch.float32), sample((3, 5), torch.float32, seed=1)
    compiled = torch.compile(function, backend="tpu")
    torch.testing.assert_close(compiled(x.to("tpu"), y.to("tpu")).cpu(), function(x, y))
    torch.tpu.synchronize()
    torch_tpu.reset_metrics()
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake_x, fake_y = mode.from_tensor(x.to("tpu")), mode.from_tensor(y.to("tpu"))
        result = compiled(fake_x, fake_y)
        expected = function(fake_x, fake_y)
    assert isinstance(result, FakeTensor)
    assert (result.shape, result.dtype, result.device) == (expected.shape, expected.dtype,
                                                           expected.device)
    torch.tpu.synchronize()
    assert torch_tpu.metrics()["execute_count"] == 0
    # The graph keeps its program for real tensors.
    torch.testing.assert_close(compiled(x.to("tpu"), y.to("tpu")).cpu(), function(x, y))
    assert_native()


def test_a_program_refuses_an_input_without_a_device_buffer():
    x, y = sample((4, 3), torch.float32).to("tpu"), sample((3, 5), torch.float32).to("tpu")
    graph = make_fx(lambda a, b: (function(a, b),))(x, y)  # AOTAutograd's graphs return tuples
    program = _compile_graph(graph, [x, y])._tpu_program
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake_x = mode.from_tensor(x)
    with pytest.raises(RuntimeError) as error:
        program.run([fake_x, y], [])
    message = str(error.value).splitlines()[0]
    assert message.endswith(
        ": an input of shape [4, 3] has no device buffer (a fake or meta tensor); a compiled"
        " program runs on real tpu tensors"), message
    assert message.startswith("compiled graph "), message

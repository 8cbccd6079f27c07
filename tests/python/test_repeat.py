"""Tensor.repeat is one lowered op (a broadcast and a reshape): CPU's values, layouts and errors
in every eager mode, and graphs holding it (InstanceNorm's, for one) compile into a program
instead of running eagerly."""

import pytest
import torch
from torch import nn

import torch_tpu
from compile_helpers import assert_native, fresh_dynamo  # noqa: F401
from conftest import sample


@pytest.fixture(params=["strict", "defer_and_fuse"])
def eager_mode(request):
    with torch_tpu.eager_mode(request.param):
        yield request.param


@pytest.mark.parametrize("shape, repeats", [
    ((2, 3), (2, 1, 3)), ((), (3, 2)), ((), ()), ((4,), (0, 2)), ((2, 0), (3, 2)),
    ((1, 2, 3), (1, 1, 1)), ((2, 3), (2, 2))])
def test_repeat_equals_cpu(eager_mode, shape, repeats):
    x = sample(shape, torch.float32)
    expected = x.repeat(repeats)
    result = x.to("tpu").repeat(repeats)
    assert (result.shape, result.stride()) == (expected.shape, expected.stride())
    assert torch.equal(result.cpu(), expected)
    assert torch_tpu.metrics()["fallback_ops"].get("aten::repeat") is None


def test_repeat_of_views_and_bools_and_its_gradient(eager_mode):
    permuted = sample((2, 3, 4), torch.float32).permute(2, 0, 1)
    assert torch.equal(permuted.to("tpu").repeat(2, 1, 1, 2).cpu(), permuted.repeat(2, 1, 1, 2))
    flags = torch.tensor([[True, False]])
    assert torch.equal(flags.to("tpu").repeat(2, 2).cpu(), flags.repeat(2, 2))
    x = sample((3, 2), torch.float32).requires_grad_()
    on_tpu = x.detach().to("tpu").requires_grad_()
    x.repeat(2, 3).square().sum().backward()
    on_tpu.repeat(2, 3).square().sum().backward()
    torch.testing.assert_close(on_tpu.grad.cpu(), x.grad)


@pytest.mark.parametrize("repeats, message", [
    ((2,), "aten::repeat: Number of dimensions of repeat dims can not be smaller than number of"
           " dimensions of tensor"),
    ((-1, 2), "aten::repeat: Trying to create tensor with negative dimension -2: [-2, 6]")])
def test_bad_repeats_raise_cpus_errors(repeats, message):
    with pytest.raises(RuntimeError) as cpu_error:
        torch.ones(2, 3).repeat(*repeats)
    with pytest.raises(RuntimeError) as error:
        torch.ones(2, 3, device="tpu").repeat(*repeats)
    assert str(error.value).splitlines()[0] == message
    assert message.endswith(str(cpu_error.value).splitlines()[0])


@pytest.mark.parametrize("norm", [nn.InstanceNorm1d, nn.InstanceNorm2d])
def test_compiled_instance_norm_is_one_program(norm):
    torch.manual_seed(0)
    model = nn.Sequential(norm(4, affine=True, track_running_stats=False), nn.ReLU())
    shape = (2, 4, 8) if norm is nn.InstanceNorm1d else (2, 4, 6, 6)
    x = sample(shape, torch.float32)
    expected = model(x)
    compiled = torch.compile(model.to("tpu"), backend="tpu")
    torch.testing.assert_close(compiled(x.to("tpu")).cpu(), expected, rtol=1e-5, atol=1e-5)
    assert_native()

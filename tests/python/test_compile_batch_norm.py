"""BatchNorm under torch.compile(backend="tpu"): evaluation and training mode, 1d/2d/3d, with and
without affine parameters and running statistics, compared with PyTorch on CPU and with eager
tpu; each graph runs as one program (no graph runs eagerly, no op on the CPU fallback)."""

import copy

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from compile_helpers import assert_native, fresh_dynamo  # noqa: F401  (autouse)
from conftest import sample


SHAPES = {nn.BatchNorm1d: (6, 3, 5), nn.BatchNorm2d: (4, 3, 5, 6), nn.BatchNorm3d: (2, 3, 4, 3, 5)}
CONFIGS = [dict(affine=affine, track_running_stats=stats)
           for stats in (True, False) for affine in (True, False)]
every_config = pytest.mark.parametrize(
    "kind,config", [(kind, config) for kind in SHAPES for config in CONFIGS],
    ids=lambda v: v.__name__ if isinstance(v, type) else
    "-".join(k for k, on in v.items() if on) or "plain")


def make_module(kind, config):
    torch.manual_seed(0)
    module = kind(3, **config)
    if config["affine"]:
        with torch.no_grad():
            module.weight.copy_(sample((3,), torch.float32, seed=4))
            module.bias.copy_(sample((3,), torch.float32, seed=5))
    if config["track_running_stats"]:
        module.running_mean.copy_(sample((3,), torch.float32, seed=6))
        module.running_var.copy_(sample((3,), torch.float32, seed=7).abs() + 0.5)
    return module


def assert_module_state(tpu_module, cpu_module):
    for (name, got), (_, want) in zip(tpu_module.state_dict().items(),
                                      cpu_module.state_dict().items()):
        assert got.device.type == "tpu", name
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6, msg=name)


@every_config
def test_eval_mode_matches_cpu(kind, config):
    cpu = make_module(kind, config).eval()
    tpu = copy.deepcopy(cpu).to("tpu")
    compiled = torch.compile(tpu, backend="tpu")
    for seed in (1, 2):  # the second call reuses the program
        x = sample(SHAPES[kind], torch.float32, seed=seed)
        torch.testing.assert_close(compiled(x.to("tpu")).cpu(), cpu(x), rtol=1e-5, atol=1e-5)
    assert_module_state(tpu, cpu)
    assert_native()


@every_config
def test_training_mode_grads_and_running_stats_match_cpu(kind, config):
    cpu = make_module(kind, config).train()
    tpu = copy.deepcopy(cpu).to("tpu")
    compiled = torch.compile(tpu, backend="tpu")
    for seed in (1, 2, 3):  # running statistics accumulate over the steps
        x = sample(SHAPES[kind], torch.float32, seed=seed)
        x_cpu, x_tpu = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
        weight = sample(SHAPES[kind], torch.float32, seed=10 + seed)
        expected = cpu(x_cpu)
        (expected * weight).sum().backward()
        result = compiled(x_tpu)
        (result * weight.to("tpu")).sum().backward()
        torch.testing.assert_close(result.cpu(), expected.detach(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(x_tpu.grad.cpu(), x_cpu.grad, rtol=1e-4, atol=1e-4)
    if config["affine"]:
        for name in ("weight", "bias"):
            torch.testing.assert_close(getattr(tpu, name).grad.cpu(),
                                       getattr(cpu, name).grad, rtol=1e-4, atol=1e-4, msg=name)
    assert_module_state(tpu, cpu)
    assert_native()


@pytest.fixture
def deterministic():
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(False)


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_compiled_running_stats_equal_eager_tpu(train, deterministic):
    """The compiled graph normalizes and updates the statistics with the eager kernel's own
    lowering: bit for bit what eager tpu gives (both optimized builds: with tiered compilation
    on, a graph's first, quick build rounds differently, so the test asks for determinism)."""
    eager = make_module(nn.BatchNorm2d, CONFIGS[0]).train(train).to("tpu")
    compiled_module = copy.deepcopy(eager)
    compiled = torch.compile(compiled_module, backend="tpu")
    for seed in (1, 2):
        x = sample(SHAPES[nn.BatchNorm2d], torch.float32, seed=seed).to("tpu")
        torch.testing.assert_close(compiled(x).cpu(), eager(x).cpu(), rtol=0, atol=0)
    assert_module_state(compiled_module, eager.cpu())
    assert_native()


def test_eval_mode_input_gradients_match_cpu():
    """Frozen BatchNorm (evaluation mode) in a graph that needs gradients: the backward uses the
    running statistics."""
    cpu = make_module(nn.BatchNorm2d, CONFIGS[0]).eval()
    tpu = copy.deepcopy(cpu).to("tpu")
    x = sample(SHAPES[nn.BatchNorm2d], torch.float32, seed=1)
    x_cpu, x_tpu = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    cpu(x_cpu).square().sum().backward()
    torch.compile(tpu, backend="tpu")(x_tpu).square().sum().backward()
    torch.testing.assert_close(x_tpu.grad.cpu(), x_cpu.grad, rtol=1e-4, atol=1e-4)
    for name in ("weight", "bias"):
        torch.testing.assert_close(getattr(tpu, name).grad.cpu(), getattr(cpu, name).grad,
                                   rtol=1e-4, atol=1e-4, msg=name)
    assert_native()


def test_eval_mode_without_grad_and_bfloat16_matches_cpu():
    cpu = make_module(nn.BatchNorm2d, CONFIGS[0]).eval()
    tpu = copy.deepcopy(cpu).to("tpu")
    compiled = torch.compile(tpu, backend="tpu")
    x = sample(SHAPES[nn.BatchNorm2d], torch.float32, seed=1)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x.to("tpu")).cpu(), cpu(x), rtol=1e-5, atol=1e-5)
        x = x.to(torch.bfloat16)
        result = F.batch_norm(x.to("tpu"), tpu.running_mean, tpu.running_var,
                              tpu.weight.to(torch.bfloat16), tpu.bias.to(torch.bfloat16))
        compiled_result = torch.compile(F.batch_norm, backend="tpu")(
            x.to("tpu"), tpu.running_mean, tpu.running_var, tpu.weight.to(torch.bfloat16),
            tpu.bias.to(torch.bfloat16))
    assert compiled_result.dtype == torch.bfloat16
    torch.testing.assert_close(compiled_result.cpu(), result.cpu())
    assert_native()


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock: conv-bn-relu-conv-bn, plus a downsampling shortcut."""

    def __init__(self, inplanes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                        nn.BatchNorm2d(planes))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.downsample(x))


def resnet_block():
    torch.manual_seed(0)
    block = BasicBlock(4, 8, 2)
    # Non-trivial running statistics, as after training.
    for module in block.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    return block


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_resnet_block_inference_matches_cpu(grad):
    cpu = resnet_block().eval()
    tpu = copy.deepcopy(cpu).to("tpu")
    compiled = torch.compile(tpu, backend="tpu")
    x = sample((2, 4, 8, 8), torch.float32, seed=1)
    with torch.set_grad_enabled(grad):
        expected = cpu(x)
        torch.testing.assert_close(compiled(x.to("tpu")).cpu(), expected.detach(),
                                   rtol=1e-4, atol=1e-4)
    assert_module_state(tpu, cpu)
    assert_native()


def test_resnet_block_training_then_inference_matches_cpu():
    cpu = resnet_block()
    tpu = copy.deepcopy(cpu).to("tpu")
    compiled = torch.compile(tpu, backend="tpu")
    for seed in (1, 2):
        x = sample((2, 4, 8, 8), torch.float32, seed=seed)
        cpu(x).sum().backward()
        compiled(x.to("tpu")).sum().backward()
    for (name, got), (_, want) in zip(tpu.named_parameters(), cpu.named_parameters()):
        torch.testing.assert_close(got.grad.cpu(), want.grad, rtol=1e-4, atol=1e-4, msg=name)
    assert_module_state(tpu, cpu)
    cpu.eval()
    tpu.eval()
    x = sample((2, 4, 8, 8), torch.float32, seed=3)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x.to("tpu")).cpu(), cpu(x), rtol=1e-4, atol=1e-4)
    assert_native()

"""timm image models (random init) train one step on tpu as on CPU, with no op on the CPU
fallback: forward, backward and an AdamW step, in strict and DeferAndFuse eager mode, under
torch.compile (PyTorch's default backend, which torch_tpu routes to "tpu", and backend="tpu"),
and in channels-last memory format for the convolutional ones (timm's train.py --channels-last).

timm and torchvision are test dependencies (pyproject's `vision` extra, which `make setup` installs
into .venv/vision-extra, a folder only this file puts on sys.path: see tools/install_deps.py); the
file is skipped only when timm is not installed."""

import copy
import importlib.util
import os
import sys

import pytest
import torch
import torch._dynamo

import torch_tpu
from torchvision_compat import make_torchvision_importable


VISION_EXTRA = os.path.join(sys.prefix, "vision-extra")
if os.path.isdir(VISION_EXTRA) and VISION_EXTRA not in sys.path:
    sys.path.append(VISION_EXTRA)
if importlib.util.find_spec("timm") is None:
    pytest.skip("timm is not installed (make setup installs it into .venv/vision-extra)",
                allow_module_level=True)
make_torchvision_importable()  # a CUDA torchvision from PyPI beside the CPU torch
import timm  # noqa: E402

# 64x64 images keep every model small; ViT takes the size as an argument (its patch grid).
SIZE = 64
MODELS = {
    "resnet18": {},
    "vit_tiny_patch16_224": {"img_size": SIZE},
    "convnext_atto": {},
    "efficientnet_b0": {},
}
CONVOLUTIONAL = ["resnet18", "convnext_atto", "efficientnet_b0"]
LR = 1e-3


def build(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return timm.create_model(name, pretrained=False, num_classes=10, **MODELS[name])


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(2, 3, SIZE, SIZE, generator=generator), torch.tensor([1, 7])


def forward_backward(model: torch.nn.Module, device: str, mode: str, channels_last: bool):
    """One training forward and backward on `device`: the logits and every parameter's gradient
    (on CPU)."""
    images, labels = batch()
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        images = images.contiguous(memory_format=torch.channels_last)
    run = {"compile": torch.compile(model), "compile_tpu": torch.compile(model, backend="tpu")}.get(
        mode, model)
    logits = run(images.to(device))
    torch.nn.functional.cross_entropy(logits, labels.to(device)).backward()
    return logits.detach().cpu(), {n: p.grad.detach().cpu() for n, p in model.named_parameters()}


_cpu_references = {}


def cpu_reference(name: str):
    """The CPU model's initial state, logits and gradients: computed once per model, shared by
    every mode."""
    if name not in _cpu_references:
        model = build(name).train()
        state = copy.deepcopy(model.state_dict())
        logits, grads = forward_backward(model, "cpu", "strict", channels_last=False)
        _cpu_references[name] = state, logits, grads
    return _cpu_references[name]


def adamw_on_cpu(name: str, state: dict, grads: dict) -> dict:
    """Parameters after CPU's AdamW step from `state` with gradients `grads`."""
    model = build(name)
    model.load_state_dict(state)
    parameters = dict(model.named_parameters())
    for parameter_name, parameter in parameters.items():
        parameter.grad = grads[parameter_name].clone()
    torch.optim.AdamW(parameters.values(), lr=LR, weight_decay=0.05).step()
    return {n: p.detach() for n, p in parameters.items()}


# Every model in every mode; backend="tpu" compiles the same graphs as the plain torch.compile
# (torch_tpu routes it), so once (resnet18) shows the explicit name works; channels-last on the
# convolutional models but EfficientNet, the slowest to compile per op shape (CPU time of the suite).
CASES = [(name, mode, False) for name in MODELS for mode in ("strict", "defer_and_fuse", "compile")]
CASES += [("resnet18", "compile_tpu", False)]
CASES += [(name, "strict", True) for name in CONVOLUTIONAL if name != "efficientnet_b0"]


@pytest.mark.parametrize(
    "name, mode, channels_last", CASES,
    ids=[f"{n}-{m}{'-channels_last' if c else ''}" for n, m, c in CASES])
def test_training_step_matches_cpu_without_fallback(name, mode, channels_last):
    state, cpu_logits, cpu_grads = cpu_reference(name)
    torch._dynamo.reset()
    torch_tpu.reset_metrics()
    model = build(name).train()
    model.load_state_dict(state)
    model.to("tpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.05)
    eager = "defer_and_fuse" if mode == "defer_and_fuse" else "strict"
    with torch_tpu.eager_mode(eager):
        logits, grads = forward_backward(model, "tpu", mode, channels_last)
        optimizer.step()
        stepped = {n: p.detach().cpu() for n, p in model.named_parameters()}
    # PyTorch's gradient layout contract: a gradient has its parameter's strides in every
    # dimension of size > 1 (channels-last convolution weights included).
    for parameter_name, parameter in model.named_parameters():
        assert all(g == p for g, p, size in zip(parameter.grad.stride(), parameter.stride(),
                                                parameter.shape) if size > 1), parameter_name
    metrics = torch_tpu.metrics()
    assert metrics["fallback_ops"] == {}
    assert metrics.get("compiled_graphs_eager", {}) == {}

    # float32 on both devices, summed in different orders. Train-mode BatchNorm over a few
    # pixels amplifies that rounding (EfficientNet's gradients reach ~40), and some gradients
    # are zero in exact arithmetic (a BatchNorm bias that feeds a convolution and a train-mode
    # BatchNorm), leaving rounding noise on both devices: gradients are compared with a
    # tolerance scaled to the model's largest gradient.
    torch.testing.assert_close(logits, cpu_logits, rtol=1e-4, atol=1e-4 * cpu_logits.abs().max())
    assert grads.keys() == cpu_grads.keys()
    scale = max(grad.abs().max() for grad in cpu_grads.values())
    for parameter_name, grad in cpu_grads.items():
        torch.testing.assert_close(grads[parameter_name], grad, rtol=1e-3, atol=3e-4 * scale,
                                   msg=lambda m: f"{parameter_name}: {m}")
    # AdamW's first step moves a weight by about lr * sign(gradient), so a gradient that is
    # rounding noise moves it by +-lr on either device at random: the step is checked against
    # CPU's AdamW from the same weights with the gradients the tpu computed.
    expected = adamw_on_cpu(name, state, grads)
    for parameter_name, parameter in expected.items():
        torch.testing.assert_close(stepped[parameter_name], parameter, rtol=1e-5, atol=1e-6,
                                   msg=lambda m: f"{parameter_name}: {m}")

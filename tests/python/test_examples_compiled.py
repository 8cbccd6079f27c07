"""The example models under plain torch.compile(model) (no backend argument) train on tpu with
the losses of the eager tpu run, every graph as one program and no op on the CPU fallback."""

import sys
from pathlib import Path

import pytest
import torch
import torch._dynamo

import torch_tpu
from compile_helpers import assert_native, fresh_dynamo  # noqa: F401  (autouse)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import dlrm  # noqa: E402
import llama  # noqa: E402
import mingpt  # noqa: E402
import qwen  # noqa: E402
import resnet  # noqa: E402
import unet  # noqa: E402

STEPS = 3
TINY = {
    "mingpt": (mingpt, mingpt, dict(batch=4, block=16, layers=2, heads=2, dim=32)),
    "resnet": (resnet, resnet, dict(batch=4, width=0.125, blocks=1)),
    "dlrm": (dlrm, dlrm, dict(batch=8, optimizer="sgd")),
    "unet": (unet, unet, dict(batch=2, size=8, width=4, groups=2)),
    "llama": (llama, llama, dict(batch=4, block=16)),
    "qwen": (qwen, llama, dict(batch=4, block=16)),  # qwen builds through llama.build
}


def compiling(monkeypatch, builder):
    """The example builds its model and the test wraps it in plain torch.compile, as a user's
    script would: `model = torch.compile(build(...))`; `.to(device)` and `.parameters()` then go
    to the wrapped module."""
    build = builder.build
    monkeypatch.setattr(builder, "build", lambda *args, **kwargs: torch.compile(
        build(*args, **kwargs)))


@pytest.mark.parametrize("name", TINY)
def test_plain_compile_trains_like_eager(name, monkeypatch):
    module, builder, config = TINY[name]
    eager = module.train("tpu", STEPS, 0, **config)
    compiling(monkeypatch, builder)
    torch_tpu.reset_metrics()
    model, compiled = module.train_model("tpu", STEPS, 0, **config)
    assert isinstance(model, torch._dynamo.eval_frame.OptimizedModule)
    assert_native()
    module.check_parity(eager, compiled)
    assert compiled[0] == pytest.approx(eager[0], rel=1e-5)


def test_compiled_resnet_evaluates_like_eager(monkeypatch):
    """After compiled training, the compiled model in evaluation mode (BatchNorm from the running
    statistics training updated) gives eager's logits."""
    config = dict(TINY["resnet"][2], batch=8)  # evaluate()'s batch: no shape change, no dynamic
    eager_model, _ = resnet.train_model("tpu", 2, 0, **config)
    compiling(monkeypatch, resnet)
    torch_tpu.reset_metrics()
    model, _ = resnet.train_model("tpu", 2, 0, **config)
    for (name, got), (_, want) in zip(model.named_buffers(), eager_model.named_buffers()):
        torch.testing.assert_close(got.cpu(), want.cpu(), rtol=1e-5, atol=1e-6, msg=name)
    torch.testing.assert_close(resnet.evaluate(model), resnet.evaluate(eager_model),
                               rtol=1e-4, atol=1e-4)
    assert_native()

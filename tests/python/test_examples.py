"""The example models train on tpu exactly like on CPU, with no op on the CPU fallback."""

import math
import sys
from pathlib import Path

import pytest
import torch

import torch_tpu

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import dlrm  # noqa: E402
import llama  # noqa: E402
import mingpt  # noqa: E402
import qwen  # noqa: E402
import resnet  # noqa: E402
import unet  # noqa: E402

STEPS = 4
TINY = {
    "mingpt": (mingpt, dict(batch=4, block=16, layers=2, heads=2, dim=32)),
    "mingpt_untied": (mingpt, dict(batch=4, block=16, layers=1, heads=2, dim=32, tied=False)),
    "resnet": (resnet, dict(batch=4, width=0.125, blocks=1)),
    "unet": (unet, dict(batch=2, size=8, width=4, groups=2)),
    "dlrm_sgd": (dlrm, dict(batch=8, optimizer="sgd")),
    "dlrm_adagrad": (dlrm, dict(batch=8, optimizer="adagrad")),
    "llama": (llama, dict(batch=4, block=16)),
    "qwen": (qwen, dict(batch=4, block=16)),
}


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
@pytest.mark.parametrize("name", TINY)
def test_training_matches_cpu_without_fallback(name, mode):
    module, config = TINY[name]
    cpu = module.train("cpu", STEPS, 0, **config)
    torch_tpu.reset_metrics()
    with torch_tpu.eager_mode(mode):
        tpu = module.train("tpu", STEPS, 0, **config)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    if mode == "defer_and_fuse":
        assert torch_tpu.metrics()["fused_graphs"] > 0
    assert all(math.isfinite(loss) for loss in tpu)
    module.check_parity(cpu, tpu)
    # the first loss comes from identical weights and data: only float32 summation order differs
    assert tpu[0] == pytest.approx(cpu[0], rel=1e-5)


def test_batchnorm_running_statistics_match_cpu():
    """Training updates BatchNorm's running mean/var in place; eval mode then uses them."""
    config = TINY["resnet"][1]
    cpu_model, _ = resnet.train_model("cpu", 2, 0, **config)
    tpu_model, _ = resnet.train_model("tpu", 2, 0, **config)
    for (name, cpu_buffer), (_, tpu_buffer) in zip(cpu_model.named_buffers(), tpu_model.named_buffers()):
        torch.testing.assert_close(tpu_buffer.cpu(), cpu_buffer, rtol=1e-4, atol=1e-5, msg=name)
    torch.testing.assert_close(resnet.evaluate(tpu_model), resnet.evaluate(cpu_model), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("foreach", [False, True])
def test_adamw_foreach_and_single_tensor_agree(foreach):
    config = TINY["mingpt"][1]
    cpu = mingpt.train("cpu", 2, 1, foreach=foreach, **config)
    tpu = mingpt.train("tpu", 2, 1, foreach=foreach, **config)
    mingpt.check_parity(cpu, tpu)


def test_tied_head_stays_tied_on_tpu():
    model = mingpt.build(0, block=16, dim=32).to("tpu")
    names = [name for name, _ in model.named_parameters()]
    assert not any(name.startswith("head") for name in names)
    assert len(names) == len(list(mingpt.build(0, block=16, dim=32).parameters()))


@pytest.mark.parametrize("module", [llama, qwen], ids=["llama", "qwen"])
def test_greedy_generation_with_kv_cache_matches_cpu(module):
    """Prefill and one-token decoding steps through the preallocated KV cache (index_copy_
    writes, masked attention) choose the same tokens on both devices, with no fallback."""
    config = TINY[module.__name__][1]
    prompt = llama.encode("a llama ")[None]
    cpu_model, _ = module.train_model("cpu", STEPS, 0, **config)
    expected = module.generate(cpu_model, prompt, 8)
    tpu_model, _ = module.train_model("tpu", STEPS, 0, **config)
    torch_tpu.reset_metrics()
    tokens = module.generate(tpu_model, prompt, 8)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    assert torch.equal(tokens, expected)
    # Decoding with the cache continues exactly as the full causal forward over the whole text.
    with torch.no_grad():
        full = tpu_model(torch.cat([prompt, tokens[:, :-1]], dim=1).to("tpu")).argmax(-1)[:, prompt.size(1) - 1:]
    assert torch.equal(full.cpu(), tokens)


@pytest.mark.strict_mode  # bit-for-bit gradients: fusion may contract a multiply-add
@pytest.mark.parametrize("activations", ["checkpoint", "offload"])
def test_activation_checkpointing_and_offloading_keep_gradients(activations):
    """Recomputing blocks in backward (torch.utils.checkpoint, non-reentrant) or keeping saved
    tensors in pinned host memory (save_on_cpu) changes where activations live, not the result:
    the losses and the last step's gradients equal those of the plain tpu run."""
    config = TINY["llama"][1]
    plain, plain_losses = llama.train_model("tpu", 2, 0, **config)
    torch_tpu.reset_metrics()
    model, losses = llama.train_model("tpu", 2, 0, activations=activations, **config)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    assert losses == plain_losses
    for (name, parameter), (_, expected) in zip(model.named_parameters(), plain.named_parameters()):
        assert parameter.grad.device.type == "tpu"
        torch.testing.assert_close(parameter.grad.cpu(), expected.grad.cpu(), rtol=0, atol=0, msg=name)


DEBUG_MODE_RUN = """
import sys
sys.path.insert(0, {examples!r})
import torch, torch_tpu, mingpt, resnet
assert torch_tpu._C._debug_mode()
for module, config in [(mingpt, dict(batch=2, block=8, layers=1, heads=2, dim=16)),
                       (resnet, dict(batch=2, width=0.125, blocks=1))]:
    cpu = module.train("cpu", 3, 0, **config)
    torch_tpu.reset_metrics()
    tpu = module.train("tpu", 3, 0, **config)
    assert torch_tpu.metrics()["fallback_ops"] == {{}}, torch_tpu.metrics()["fallback_ops"]
    module.check_parity(cpu, tpu)
    print(module.__name__, "ok")
"""


def test_training_in_debug_mode_matches_cpu():
    from conftest import run_python

    examples = str(Path(__file__).resolve().parents[2] / "examples")
    result = run_python(DEBUG_MODE_RUN.format(examples=examples), TORCH_TPU_LAUNCH_BLOCKING="1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["mingpt", "ok", "resnet", "ok"]


def test_pallas_rms_norm_matches_llamas_rmsnorm():
    import pallas_kernel

    assert pallas_kernel.check_against_llama() < 1e-4


@pytest.mark.parametrize("module", [llama, qwen], ids=["llama", "qwen"])
def test_llama_with_pallas_norm_and_tokamax_attention_trains_like_cpu(module):
    """The custom kernels (examples/pallas_kernel.py's RMSNorm, Tokamax's attention) replace
    RMSNorm and SDPA on tpu; losses follow CPU's PyTorch reference, with no fallback."""
    config = TINY[module.__name__][1]
    cpu = module.train("cpu", 2, 0, **config)
    torch_tpu.reset_metrics()
    tpu = module.train("tpu", 2, 0, norm="pallas", attention="tokamax", **config)
    assert torch_tpu.metrics()["fallback_ops"] == {}
    torch.testing.assert_close(torch.tensor(tpu), torch.tensor(cpu), rtol=1e-4, atol=1e-4)

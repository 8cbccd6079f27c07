"""Hugging Face accelerate and transformers.Trainer on tpu, each compared with the same run on CPU.

- ``Accelerator()`` puts the model, the optimizer's state and the dataloader's batches on tpu,
  ``Accelerator(cpu=True)`` keeps them on CPU, and both train to the same losses;
  ``mixed_precision="bf16"`` runs the forward under ``torch.autocast("tpu", torch.bfloat16)``.
- Two processes (``accelerate launch --multi_gpu --num_processes 2``, no line for tpu in the
  script: torch_tpu adapts accelerate as it loads) are tpu_dist ranks that train as one process
  on CPU does, with accelerate's own loop and with Trainer (dist_workers/hf_accelerate.py).
- ``Trainer`` fine-tunes a small GPT-2 (causal LM) and a small BERT classifier with the per-step
  losses and gradient norms of CPU training, ``bf16=True`` autocasts on tpu, and a run resumed
  from a checkpoint continues with the uninterrupted run's losses.
Nothing runs on the CPU fallback. Dropout is off: tpu and CPU draw different random numbers.
"""

import functools
import json
import os
import re
import subprocess
import sys

import pytest
import torch

import torch_tpu

accelerate = pytest.importorskip("accelerate", reason="accelerate is not installed "
                                 "(pyproject's test extra: pip install accelerate)")
transformers = pytest.importorskip("transformers", reason="transformers is not installed "
                                   "(pyproject's test extra)")
from accelerate import Accelerator  # noqa: E402
from accelerate.state import AcceleratorState, GradientState  # noqa: E402
from hf_trainer_helpers import BATCH, MODELS, STEPS, as_tensor, trainer_run  # noqa: E402

WORKERS = os.path.join(os.path.dirname(__file__), "dist_workers")


@pytest.fixture(autouse=True)
def fresh_accelerate_state(monkeypatch, tmp_path):
    # accelerate keeps its state in process-wide singletons; each run here starts its own. A
    # user's accelerate config file (HF_HOME) must not steer the launcher.
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    yield
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def no_fallback():
    return torch_tpu.metrics().get("fallback_ops", {})


# --- Accelerator ---------------------------------------------------------------------------------

def mlp_data():
    inputs = torch.randn(STEPS * BATCH, 8, generator=torch.Generator().manual_seed(0))
    return torch.utils.data.TensorDataset(inputs, inputs.sum(1, keepdim=True).sin())


def accelerate_run(**accelerator_options):
    """AdamW steps of a small MLP through Accelerator.prepare: the device, each step's loss and
    the devices its parameters, optimizer state and batches were on."""
    accelerator = Accelerator(**accelerator_options)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    loader = torch.utils.data.DataLoader(mlp_data(), batch_size=BATCH)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses, devices = [], set()
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
        losses.append(loss.item())
        devices |= {x.device, y.device}
    devices |= {p.device for p in model.parameters()}
    devices |= {s.device for state in optimizer.state.values() for s in state.values()
                if isinstance(s, torch.Tensor) and s.dim() > 0}
    return accelerator.device, torch.tensor(losses), devices


def test_accelerator_trains_on_tpu_as_cpu_true_trains_on_cpu():
    cpu_device, cpu_losses, cpu_devices = accelerate_run(cpu=True)
    assert cpu_device == torch.device("cpu") and cpu_devices == {torch.device("cpu")}
    AcceleratorState._reset_state(reset_partial_state=True)
    torch_tpu.reset_metrics()
    device, losses, devices = accelerate_run()
    assert device.type == "tpu", device  # "tpu": the current tpu device, as accelerate says "cuda"
    assert devices == {torch.device("tpu", torch.tpu.current_device())}, devices
    assert no_fallback() == {}
    torch.testing.assert_close(losses, cpu_losses, rtol=1e-5, atol=1e-6)


def autocast_seen(module, args, out):
    """What a submodule's forward ran under: (tpu autocast on, CPU autocast on, the autocast
    dtype of the output's device, the output's device type and dtype)."""
    return (torch.is_autocast_enabled("tpu"), torch.is_autocast_enabled("cpu"),
            torch.get_autocast_dtype(out.device.type), out.device.type, out.dtype)


def test_accelerator_bf16_autocasts_on_tpu():
    seen = []
    accelerator = Accelerator(mixed_precision="bf16")
    model = torch.nn.Sequential(torch.nn.Linear(8, 4))
    # A submodule: hooks of the prepared module itself run outside the forward accelerate wraps.
    model[0].register_forward_hook(lambda *call: seen.append(autocast_seen(*call)))
    model = accelerator.prepare(model)
    out = model(torch.randn(2, 8, device=accelerator.device))
    assert accelerator.device.type == "tpu"
    assert seen == [(True, False, torch.bfloat16, "tpu", torch.bfloat16)], seen
    # accelerate hands back float32 outputs (convert_outputs_to_fp32), as on CUDA.
    assert out.dtype == torch.float32 and out.device.type == "tpu"


def test_accelerate_is_adapted_on_import():
    # This file imported accelerate and nothing else: torch_tpu loaded its integration by itself.
    from accelerate.state import PartialState

    assert "torch_tpu.integrations.accelerate" in sys.modules
    assert getattr(PartialState._prepare_backend, "_torch_tpu", False)


def test_two_processes_train_over_tpu_dist(tmp_path):
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
               "--num_processes", "2", "--main_process_port", "0", "--mixed_precision", "no",
               "--dynamo_backend", "no", "--num_machines", "1",
               os.path.join(WORKERS, "hf_accelerate.py"), str(tmp_path / "trainer")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    expected = cpu_reference("gpt2")
    for rank in (0, 1):
        assert (f"rank {rank}: accelerate on tpu:{rank} over tpu_dist: losses" in result.stdout
                and "match single-process CPU training, no CPU fallback" in result.stdout), output
        match = re.search(rf"rank {rank}: trainer on tpu:{rank}, no CPU fallback: (.*)",
                          result.stdout)
        assert match, output
        rows = json.loads(match.group(1))
        assert [row[0] for row in rows] == sorted(expected), rows
        # The ranks' losses are averaged over them (Trainer gathers them): the whole batch's.
        torch.testing.assert_close(torch.tensor([row[1:] for row in rows], dtype=torch.float64),
                                   as_tensor(expected), rtol=1e-4, atol=1e-5)


# --- transformers.Trainer ------------------------------------------------------------------------

@functools.cache
def cpu_reference(family):
    """Single-process CPU Trainer's history (also the 2-process tpu runs' reference)."""
    import tempfile

    with tempfile.TemporaryDirectory() as output_dir:
        trainer, history = trainer_run(family, output_dir, cpu=True)
        assert trainer.args.device.type == "cpu"
        assert next(trainer.model.parameters()).device.type == "cpu"
    AcceleratorState._reset_state(reset_partial_state=True)
    return history


@pytest.mark.parametrize("family", MODELS)
def test_trainer_matches_cpu(family, tmp_path):
    expected = cpu_reference(family)
    torch_tpu.reset_metrics()
    trainer, history = trainer_run(family, tmp_path, cpu=False)
    device, param_device = trainer.args.device, next(trainer.model.parameters()).device
    assert device.type == "tpu" and param_device.type == "tpu", (device, param_device)
    assert no_fallback() == {}
    assert sorted(history) == sorted(expected) == list(range(1, STEPS + 1))
    # float32 on both; XLA orders reductions differently (~1e-6 relative), which AdamW's
    # division by sqrt(v) amplifies a little over the steps.
    torch.testing.assert_close(as_tensor(history), as_tensor(expected), rtol=1e-4, atol=1e-5)


def test_trainer_bf16_autocasts_on_tpu(tmp_path):
    seen = set()

    def hook(model):
        model.lm_head.register_forward_hook(lambda *call: seen.add(autocast_seen(*call)))

    _, expected = trainer_run("gpt2", tmp_path / "cpu", cpu=True, bf16=True, hook=hook)
    assert seen == {(False, True, torch.bfloat16, "cpu", torch.bfloat16)}, seen
    seen.clear()
    torch_tpu.reset_metrics()
    _, history = trainer_run("gpt2", tmp_path / "tpu", cpu=False, bf16=True, hook=hook)
    assert seen == {(True, False, torch.bfloat16, "tpu", torch.bfloat16)}, seen
    assert no_fallback() == {}
    # bfloat16 matmuls on both, rounded in different orders: bf16's 8 bits of mantissa.
    torch.testing.assert_close(as_tensor(history), as_tensor(expected), rtol=2e-2, atol=2e-2)


def test_trainer_resumes_from_checkpoint_with_the_same_losses(tmp_path):
    _, uninterrupted = trainer_run("gpt2", tmp_path / "run", cpu=False, save_steps=STEPS // 2)
    checkpoint = tmp_path / "run" / f"checkpoint-{STEPS // 2}"
    assert (checkpoint / "optimizer.pt").is_file(), sorted(os.listdir(tmp_path / "run"))
    torch_tpu.reset_metrics()
    trainer, resumed = trainer_run("gpt2", tmp_path / "resumed", cpu=False,
                                   save_steps=STEPS // 2, resume=str(checkpoint))
    assert next(trainer.model.parameters()).device.type == "tpu"
    assert no_fallback() == {}
    # The resumed run's history starts with the checkpoint's steps; it logged the later ones.
    assert sorted(resumed) == sorted(uninterrupted) == list(range(1, STEPS + 1)), resumed
    later = range(STEPS // 2 + 1, STEPS + 1)
    torch.testing.assert_close(as_tensor({step: resumed[step] for step in later}),
                               as_tensor({step: uninterrupted[step] for step in later}),
                               rtol=0, atol=0)

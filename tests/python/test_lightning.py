"""PyTorch Lightning on tpu: ``Trainer(accelerator="torch_tpu")``, each run compared with the
same run on ``accelerator="cpu"``.

- One device: fit (with validation and a ModelCheckpoint per epoch), then a new Trainer resumed
  from the first epoch's checkpoint (``ckpt_path=``) continues with the uninterrupted CPU run's
  per-step losses; batches and parameters were on tpu; ``trainer.validate`` gives CPU's loss.
- ``precision="bf16-mixed"``: the forward runs under ``torch.autocast("tpu", torch.bfloat16)``.
- Two devices: the auto-selected strategy is DDP over ``tpu_dist``, its ranks started by
  Lightning's own launcher (dist_workers/lightning_ddp.py), with the losses of single-process
  CPU training on the whole batch.
- The name: registered without a setup line, beside Lightning's own ``"tpu"`` (PyTorch/XLA).
Nothing runs on the CPU fallback.
"""

import os
import subprocess
import sys

import pytest
import torch

import torch_tpu
from torchvision_compat import make_torchvision_importable

make_torchvision_importable()  # Lightning imports torchvision (through torchmetrics) if installed
pl = pytest.importorskip("lightning.pytorch", reason="PyTorch Lightning is not installed "
                         "(pyproject's test extra: pip install lightning)")
from lightning_regressor import Regressor, loader, trainer  # noqa: E402

from torch_tpu.integrations import lightning as tpu_lightning  # noqa: E402

WORKERS = os.path.join(os.path.dirname(__file__), "dist_workers")
EPOCHS = 2


def fallback_ops():
    return torch_tpu.metrics().get("fallback_ops", {})


def fit(accelerator, tmp_path, epochs=EPOCHS, ckpt_path=None, **options):
    model = Regressor()
    run = trainer(accelerator, tmp_path, devices=1, max_epochs=epochs, **options)
    run.fit(model, loader(), loader(), ckpt_path=ckpt_path)
    return run, model


def test_fit_checkpoint_and_resume_match_cpu(tmp_path):
    cpu_run, cpu_model = fit("cpu", tmp_path / "cpu")
    cpu_validation = cpu_run.validate(cpu_model, loader(), verbose=False)
    torch_tpu.reset_metrics()

    first, first_model = fit("torch_tpu", tmp_path / "tpu", epochs=1, precision="32-true")
    assert type(first.strategy).__name__ == "SingleDeviceStrategy"
    assert first.strategy.root_device == torch.device("tpu", 0)
    assert first_model.seen == {(torch.device("tpu", 0), torch.device("tpu", 0), False,
                                 torch.float32)}, first_model.seen
    checkpoint = tmp_path / "tpu" / "epoch=0-step=8.ckpt"
    assert checkpoint.exists(), sorted(os.listdir(tmp_path / "tpu"))
    state = torch.load(checkpoint, weights_only=False)
    assert {t.device.type for t in state["state_dict"].values()} == {"tpu"}
    assert state["lr_schedulers"][0]["last_epoch"] == 8

    resumed, resumed_model = fit("torch_tpu", tmp_path / "tpu", ckpt_path=checkpoint)
    assert resumed.global_step == cpu_run.global_step == EPOCHS * 8
    torch.testing.assert_close(torch.tensor(first_model.losses + resumed_model.losses),
                               torch.tensor(cpu_model.losses), rtol=1e-5, atol=1e-6)
    validation = resumed.validate(resumed_model, loader(), verbose=False)
    torch.testing.assert_close(validation[0]["val_loss"], cpu_validation[0]["val_loss"],
                               rtol=1e-5, atol=1e-6)
    assert fallback_ops() == {}


def test_bf16_mixed_autocasts_on_tpu(tmp_path):
    cpu_run, cpu_model = fit("cpu", None, epochs=1, precision="bf16-mixed")
    torch_tpu.reset_metrics()
    run, model = fit("torch_tpu", None, epochs=1, precision="bf16-mixed")
    assert type(run.precision_plugin).__name__ == "MixedPrecision"
    assert run.precision_plugin.device == "tpu"
    assert model.seen == {(torch.device("tpu", 0), torch.device("tpu", 0), True,
                           torch.bfloat16)}, model.seen
    # CPU autocast rounds the same matmuls to bfloat16; the order of additions may differ.
    torch.testing.assert_close(torch.tensor(model.losses), torch.tensor(cpu_model.losses),
                               rtol=2e-2, atol=2e-2)
    assert fallback_ops() == {}


def test_two_devices_train_with_ddp_over_tpu_dist(tmp_path):
    command = [sys.executable, os.path.join(WORKERS, "lightning_ddp.py"), str(tmp_path)]
    env = {k: v for k, v in os.environ.items()
           if k not in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    for rank in (0, 1):
        assert (f"rank {rank}: DDPStrategy over tpu_dist on tpu:{rank}, losses match CPU, "
                "no fallback") in result.stdout, output
    assert (tmp_path / "last.ckpt").exists(), output


def test_registered_beside_lightnings_xla_tpu():
    from lightning.pytorch.accelerators import AcceleratorRegistry, XLAAccelerator

    assert AcceleratorRegistry["torch_tpu"]["accelerator"] is tpu_lightning.TPUAccelerator
    assert AcceleratorRegistry["tpu"]["accelerator"] is XLAAccelerator
    run = trainer(tpu_lightning.TPUAccelerator(), devices=[0], max_epochs=1)
    assert run.strategy.root_device == torch.device("tpu", 0)
    # The standalone pytorch-lightning distribution has its own classes and registry.
    standalone = pytest.importorskip("pytorch_lightning")
    registered = standalone.accelerators.AcceleratorRegistry["torch_tpu"]["accelerator"]
    assert registered is tpu_lightning.accelerator_class("pytorch_lightning")
    assert issubclass(registered, standalone.accelerators.Accelerator)


def test_accelerator_errors():
    accelerator = tpu_lightning.TPUAccelerator()
    with pytest.raises(Exception, match=r"^the torch_tpu accelerator runs on tpu devices, got "
                       r"cpu$"):
        accelerator.setup_device(torch.device("cpu"))
    with pytest.raises(ValueError) as error:
        tpu_lightning.TPUAccelerator.parse_devices([0, 0])
    assert str(error.value) == ("Trainer(devices=[0, 0]) on the torch_tpu accelerator: expected a "
                                "device count, -1, \"auto\", or distinct non-negative device "
                                "indices")
    assert tpu_lightning.TPUAccelerator.parse_devices("0,1") == [0, 1]
    assert tpu_lightning.TPUAccelerator.parse_devices(-1) == list(range(torch.tpu.device_count()))


def test_importable_without_lightning():
    # Importing torch_tpu does not import Lightning. In a process where Lightning cannot be
    # imported, the module imports and using it says why.
    script = (
        "import sys\n"
        "import torch_tpu\n"
        "names = ('lightning', 'pytorch_lightning', 'lightning_fabric')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in names))\n"
        "for name in ('lightning', 'pytorch_lightning'): sys.modules[name] = None\n"
        "import torch_tpu.integrations.lightning as m\n"
        "try:\n"
        "    m.TPUAccelerator\n"
        "except ImportError as error:\n"
        "    print(error)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "[]", "torch_tpu.integrations.lightning.TPUAccelerator needs PyTorch Lightning: "
        "pip install lightning"], result.stdout


def test_16_mixed_scales_gradients_on_tpu():
    # Lightning turns "16-mixed" into bf16 on CPU, so there is no CPU run to compare with.
    torch_tpu.reset_metrics()
    run, model = fit("torch_tpu", None, epochs=1, precision="16-mixed")
    assert run.precision_plugin.device == "tpu"
    assert run.precision_plugin.scaler._device == "tpu"
    assert model.seen == {(torch.device("tpu", 0), torch.device("tpu", 0), True,
                           torch.float16)}, model.seen
    assert torch.isfinite(torch.tensor(model.losses)).all()
    assert fallback_ops() == {}

"""Hugging Face accelerate, and ``transformers.Trainer`` on top of it, across ``tpu_dist`` ranks.

torch_tpu imports this module as soon as ``accelerate.state`` has loaded (torch_tpu/__init__.py,
through torch_tpu/_after_import.py), so training scripts need no line of their own; importing it
by hand does the same and is harmless.

A single process needs nothing of it: accelerate (>= 1.16) asks ``torch.accelerator`` for the
device, which is ``tpu`` once torch_tpu is loaded, so ``Accelerator()`` and ``Trainer`` place
models, optimizers, batches and ``autocast`` there. Several processes do: accelerate maps a closed
list of device types (cuda, xpu, npu, hpu, ...) to a ``DistributedType.MULTI_<DEVICE>`` and a
backend, and any other device gets ``DistributedType.NO``, so under torchrun or ``accelerate
launch --multi_gpu`` every rank would silently train its own model on all the data. This module
teaches accelerate's ``PartialState`` the tpu case and changes nothing else:

- ``_prepare_backend``: a rank launched with ``LOCAL_RANK`` set, not asked for the CPU, whose
  torch accelerator is ``tpu`` gets backend ``"tpu_dist"`` (or the backend the caller named) and
  ``DistributedType.MULTI_GPU``. That enum is closed, and MULTI_GPU is its generic
  torch.distributed type: DDP wrapping, dataloader sharding, ``gather``/``reduce`` through
  ``torch.distributed``, barriers and RNG broadcasts on the state's device. Its CUDA-only
  steps key on ``device.type == "cuda"`` or the backend ``"nccl"``, neither of which holds here;
  the other MULTI_* types add quirks of their device (MULTI_XPU loads checkpoints to the CPU and
  refuses Megatron). The rank's availability probe is skipped, so the PJRT client is created
  after the process group, as docs/distributed.md asks.
- ``set_device``: such a rank uses ``tpu:(local_rank % device_count)`` and makes it current (the
  original would look for ``torch.cuda``).

Every other case (CPU, one process, torch_xla, SageMaker, other accelerators) runs accelerate's
own code. When accelerate maps ``"tpu"`` itself, this module does nothing.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os

import torch
# From the defining modules: this runs while the `accelerate` package may still be importing.
from accelerate.state import PartialState
from accelerate.utils.constants import TORCH_DISTRIBUTED_BACKENDS
from accelerate.utils.dataclasses import DistributedType
from accelerate.utils.imports import is_torch_xla_available
from packaging import version

import torch_tpu  # noqa: F401  (registers the device and tpu_dist when torch did not autoload it)

__all__ = ["BACKEND", "MIN_ACCELERATE_VERSION"]

BACKEND = "tpu_dist"
# The first release that picks the device through torch.accelerator (get_torch_accelerator_backend)
# with the PartialState methods wrapped below; older releases choose devices differently.
MIN_ACCELERATE_VERSION = "1.16.0"


def _tpu_is_the_accelerator() -> bool:
    # check_available=False: probing availability starts the PJRT client, which on a TPU or GPU
    # plugin must wait for the process group (its store connects the processes' clients).
    device = torch.accelerator.current_accelerator(check_available=False)
    return device is not None and device.type == "tpu"


def _is_tpu_rank(cpu: bool, sagemaker_dp: bool) -> bool:
    return (not cpu and not sagemaker_dp and int(os.environ.get("LOCAL_RANK", -1)) != -1
            and not is_torch_xla_available() and _tpu_is_the_accelerator())


def _install() -> None:
    found = importlib.metadata.version("accelerate")
    if version.parse(found) < version.parse(MIN_ACCELERATE_VERSION):
        raise ImportError(
            f"torch_tpu.integrations.accelerate needs accelerate>={MIN_ACCELERATE_VERSION}, found "
            f"{found}: pip install -U accelerate")
    if "tpu" in TORCH_DISTRIBUTED_BACKENDS:
        return  # accelerate knows tpu itself
    if getattr(PartialState._prepare_backend, "_torch_tpu", False):
        return  # installed already (the module was reloaded)
    for name in ("_prepare_backend", "set_device"):
        if not callable(getattr(PartialState, name, None)):
            raise ImportError(
                f"torch_tpu.integrations.accelerate: accelerate {found} has no "
                f"PartialState.{name}; this integration was written against accelerate "
                f"{MIN_ACCELERATE_VERSION}")

    prepare_backend = PartialState._prepare_backend
    set_device = PartialState.set_device

    @functools.wraps(prepare_backend)
    def _prepare_backend(self, cpu: bool = False, sagemaker_dp=False, backend: str | None = None):
        if not _is_tpu_rank(cpu, sagemaker_dp):
            return prepare_backend(self, cpu, sagemaker_dp, backend)
        return backend or BACKEND, DistributedType.MULTI_GPU

    @functools.wraps(set_device)
    def _set_device(self) -> None:
        if (self.device is not None or self.distributed_type != DistributedType.MULTI_GPU
                or not _tpu_is_the_accelerator()):
            return set_device(self)
        index = self.local_process_index % torch.tpu.device_count()
        torch.tpu.set_device(index)
        self.device = torch.device("tpu", index)

    _prepare_backend._torch_tpu = True
    PartialState._prepare_backend = _prepare_backend
    PartialState.set_device = _set_device


_install()

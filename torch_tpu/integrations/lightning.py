"""PyTorch Lightning on tpu: the accelerator ``"torch_tpu"``.

Lightning's own ``accelerator="tpu"`` is PyTorch/XLA (``XLAAccelerator``), so this device goes by
another name: ``Trainer(accelerator="torch_tpu", devices=N)``. No setup line is needed: importing
torch_tpu (which ``import torch`` does) arranges for :func:`register_package` to run as soon as
``lightning.pytorch`` or ``pytorch_lightning`` has been imported, and never imports Lightning
itself (torch_tpu/_after_import.py). This module imports without Lightning installed; what
needs Lightning raises ImportError when used. See docs/ecosystem.md.

Lightning (2.6) has no entry point through which a third-party accelerator registers, and its
accelerator connector picks the strategy and the precision plugin from closed lists of names:
for any accelerator but cuda/mps it would choose ``SingleDeviceStrategy("cpu")`` for one device
and ``MixedPrecision(..., device="cuda")`` for ``"bf16-mixed"``. Registration therefore does
three things, per Lightning package:

- registers :class:`TPUAccelerator` under ``"torch_tpu"`` in its ``AcceleratorRegistry``, which is
  how Lightning's docs say a custom accelerator is named (the registry is what ``accelerator=``
  strings are looked up in);
- teaches the connector the tpu case, and only that case: with the ``torch_tpu`` accelerator, one
  device means ``SingleDeviceStrategy(tpu:i)`` (more devices, or several nodes, keep Lightning's
  choice: ``"ddp"``, whose process group backend for tpu devices is ``tpu_dist`` through
  ``torch.distributed``'s device map), and ``"16-mixed"``/``"bf16-mixed"`` mean
  ``MixedPrecision(..., device="tpu")``, i.e. ``torch.autocast("tpu", ...)`` (a ``GradScaler``
  on tpu for float16). Other precisions (``"32-true"``, ``"bf16-true"``, ...) need nothing.

- makes Lightning's ``DDPStrategy`` work on tpu devices: no ``device_ids`` for DDP (Lightning
  would build it on a ``torch.cuda.Stream``), and ``"mean"`` syncs of integer tensors as a SUM
  then a division (tpu_dist refuses ``ReduceOp.AVG`` on integers; Lightning does the same for
  Gloo).

Several processes: ``strategy="ddp"`` starts them with Lightning's subprocess launcher (or
torchrun starts them), one per device, rank ``r`` on ``tpu:r``. The launcher does not set
``LOCAL_WORLD_SIZE`` as torchrun does; the accelerator sets it for the processes it starts, so the
XLA CPU plugin gives every one of them a device per local rank (docs/distributed.md).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
from typing import Any

import torch

import torch_tpu  # noqa: F401  (registers the tpu device and tpu_dist when torch did not autoload)
from torch_tpu import _plugin, _signals

__all__ = ["ACCELERATOR_NAME", "PACKAGES", "register", "accelerator_class"]

ACCELERATOR_NAME = "torch_tpu"
# Lightning's trainer packages and the fabric package each builds on: the unified ``lightning``
# distribution and the standalone ``pytorch-lightning`` one have separate class hierarchies and
# registries.
PACKAGES = {"lightning.pytorch": "lightning.fabric", "pytorch_lightning": "lightning_fabric"}
MIN_LIGHTNING_VERSION = (2, 6)

_classes: dict[str, type] = {}  # trainer package -> its TPUAccelerator


def _parse_device_ids(devices: Any) -> list[int]:
    """``Trainer(devices=...)`` as device indices: a count (``2``, ``"2"``), every device of this
    process (``-1``, ``"-1"``, ``"auto"``), or indices (``[0, 1]``, ``"0,1"``)."""
    if isinstance(devices, str):
        text = devices.strip()
        if text in ("auto", "-1"):
            devices = -1
        elif "," in text:
            devices = [int(part) for part in text.split(",") if part.strip()]
        else:
            devices = int(text)
    if isinstance(devices, int):
        count = torch.tpu.device_count() if devices == -1 else devices
        if count < 1:
            raise ValueError(f"Trainer(devices={devices!r}) on the torch_tpu accelerator: no tpu "
                             f"device is available ({torch_tpu.plugin_error()})")
        return list(range(count))
    ids = list(devices)
    if not ids or any(not isinstance(i, int) or i < 0 for i in ids) or len(set(ids)) != len(ids):
        raise ValueError(f"Trainer(devices={devices!r}) on the torch_tpu accelerator: expected a "
                         "device count, -1, \"auto\", or distinct non-negative device indices")
    return ids


def _is_rank_of_several() -> bool:
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


def _available() -> bool:
    if _plugin.resolve().error:
        return False
    # A rank on a plugin whose client spans processes (TPU, GPU) must create the client after
    # tpu_dist's group forms (docs/distributed.md): the Trainer asks before that, so such a rank
    # answers from the plugin's presence and the runtime starts when the device is first used.
    if (_is_rank_of_several() and _plugin.resolve().name != "cpu"
            and not torch.tpu.is_initialized()):
        return True
    return torch.tpu.is_available()


def _build_accelerator(package: str) -> type:
    accelerators = importlib.import_module(f"{package}.accelerators")
    exceptions = importlib.import_module(f"{package}.utilities.exceptions")

    class TPUAccelerator(accelerators.Accelerator):
        """The tpu device (torch_tpu, through PJRT) as a Lightning accelerator."""

        def setup_device(self, device: torch.device) -> None:
            if device.type != "tpu":
                raise exceptions.MisconfigurationException(
                    f"the torch_tpu accelerator runs on tpu devices, got {device}")
            count = torch.tpu.device_count()
            if device.index is not None and device.index >= count:
                raise exceptions.MisconfigurationException(
                    f"the torch_tpu accelerator was given {device}, but this process has {count} "
                    f"tpu device(s) ({torch.tpu.get_device_name() if count else 'none'}); on the "
                    f"XLA CPU plugin set {_plugin.ENV_CPU_DEVICES} (or start the ranks with "
                    "torchrun) so that every rank has a device per local rank")
            torch.tpu.set_device(device)
            # The runtime has started (libtpu on a TPU VM ignores SIGPROF from then on): Lightning
            # restores every signal handler it saved after fit, so Python must know of it.
            _signals.adopt_ignored_signals()

        def teardown(self) -> None:
            pass  # the runtime keeps its devices for the rest of the process, as CUDA's does

        def get_device_stats(self, device: Any) -> dict[str, Any]:
            return torch.tpu.memory_stats(device)

        @staticmethod
        def parse_devices(devices: Any) -> list[int]:
            return _parse_device_ids(devices)

        @staticmethod
        def get_parallel_devices(devices: Any) -> list[torch.device]:
            ids = _parse_device_ids(devices)
            if len(ids) > 1 and "LOCAL_RANK" not in os.environ:
                # This process will start the other ranks (Lightning's launcher copies its
                # environment); torchrun would have set LOCAL_WORLD_SIZE for them.
                os.environ.setdefault("LOCAL_WORLD_SIZE", str(len(ids)))
            return [torch.device("tpu", i) for i in ids]

        @staticmethod
        def auto_device_count() -> int:
            return torch.tpu.device_count()

        @staticmethod
        def is_available() -> bool:
            return _available()

        @staticmethod
        def name() -> str:
            return ACCELERATOR_NAME

        @classmethod
        def register_accelerators(cls, accelerator_registry) -> None:
            accelerator_registry.register(
                cls.name(), cls, description="tpu through torch_tpu (PJRT), not PyTorch/XLA",
                override=True)

    TPUAccelerator.__module__ = __name__
    TPUAccelerator.__qualname__ = "TPUAccelerator"
    return TPUAccelerator


def _teach_lightning(package: str, accelerator: type) -> None:
    """Wraps the two choices of Lightning's accelerator connector that name devices (see the
    module docstring) and DDPStrategy's device_ids; every case without the torch_tpu accelerator
    or a tpu device runs Lightning's code."""
    connector_module = importlib.import_module(
        f"{package}.trainer.connectors.accelerator_connector")
    strategies = importlib.import_module(f"{package}.strategies")
    precision = importlib.import_module(f"{package}.plugins.precision")
    connector = connector_module._AcceleratorConnector
    for owner, name in ((connector, "_choose_strategy"), (connector, "_check_and_init_precision"),
                        (connector, "_validate_precision_choice"),
                        (strategies.DDPStrategy, "determine_ddp_device_ids"),
                        (strategies.DDPStrategy, "reduce")):
        if not callable(getattr(owner, name, None)):
            raise ImportError(f"torch_tpu.integrations.lightning: {package} has no "
                              f"{owner.__name__}.{name}; written against Lightning 2.6")
    if getattr(connector._choose_strategy, "_torch_tpu", False):
        return

    choose_strategy = connector._choose_strategy
    check_and_init_precision = connector._check_and_init_precision

    def on_tpu(self) -> bool:
        return isinstance(getattr(self, "accelerator", None), accelerator)

    @functools.wraps(choose_strategy)
    def _choose_strategy(self):
        if on_tpu(self) and self._num_nodes_flag == 1 and len(self._parallel_devices) == 1:
            return strategies.SingleDeviceStrategy(device=self._parallel_devices[0])
        return choose_strategy(self)

    @functools.wraps(check_and_init_precision)
    def _check_and_init_precision(self):
        if (on_tpu(self) and self._precision_plugin_flag is None
                and self._precision_flag in ("16-mixed", "bf16-mixed")
                and isinstance(self.strategy, (strategies.SingleDeviceStrategy,
                                               strategies.DDPStrategy))):
            self._validate_precision_choice()
            scaler = (torch.amp.GradScaler(device="tpu") if self._precision_flag == "16-mixed"
                      else None)
            return precision.MixedPrecision(self._precision_flag, "tpu", scaler)
        return check_and_init_precision(self)

    ddp = strategies.DDPStrategy
    determine_ddp_device_ids = ddp.determine_ddp_device_ids

    @functools.wraps(determine_ddp_device_ids)
    def _determine_ddp_device_ids(self):
        # Lightning builds DistributedDataParallel on a torch.cuda side stream whenever it passes
        # device_ids. Without them DDP takes the device from the module, which is on tpu:i, and
        # Lightning has already put the batches there.
        if self.root_device.type == "tpu":
            return None
        return determine_ddp_device_ids(self)

    reduce = ddp.reduce

    @functools.wraps(reduce)
    def _reduce(self, tensor, group=None, reduce_op="mean"):
        # tpu_dist refuses ReduceOp.AVG on integer tensors (an average is not an integer), which
        # Lightning asks for when it syncs a logged value's batch-size count. Lightning's answer
        # for Gloo, which has no AVG at all, is a SUM divided afterwards: the same here.
        if (self.root_device.type == "tpu" and isinstance(tensor, torch.Tensor)
                and not (tensor.is_floating_point() or tensor.is_complex())
                and isinstance(reduce_op, str) and reduce_op.lower() in ("mean", "avg")):
            total = reduce(self, tensor, group, reduce_op="sum")
            return total.copy_(total / torch.distributed.get_world_size(group))
        return reduce(self, tensor, group, reduce_op)

    _choose_strategy._torch_tpu = True
    connector._choose_strategy = _choose_strategy
    connector._check_and_init_precision = _check_and_init_precision
    ddp.determine_ddp_device_ids = _determine_ddp_device_ids
    ddp.reduce = _reduce


def _check_version(package: str) -> None:
    module = importlib.import_module(package)
    found = getattr(module, "__version__", "0")
    numbers = tuple(int(part) for part in found.split(".")[:2] if part.isdigit())
    if numbers < MIN_LIGHTNING_VERSION:
        raise ImportError(f"torch_tpu.integrations.lightning needs Lightning >= "
                          f"{'.'.join(map(str, MIN_LIGHTNING_VERSION))}, found {package} {found}: "
                          "pip install -U lightning")


def register_package(package: str) -> type:
    """Registers the torch_tpu accelerator with one Lightning trainer package (importing it);
    returns its accelerator class. Idempotent."""
    if package not in PACKAGES:
        raise ValueError(f"unknown Lightning package {package!r}; one of {', '.join(PACKAGES)}")
    if package in _classes:
        return _classes[package]
    _check_version(package)
    accelerator = _build_accelerator(package)
    registry = importlib.import_module(f"{package}.accelerators").AcceleratorRegistry
    accelerator.register_accelerators(registry)
    _teach_lightning(package, accelerator)
    _classes[package] = accelerator
    return accelerator


def _installed(package: str) -> bool:
    if package in sys.modules:
        return sys.modules[package] is not None  # None: the import was blocked
    try:
        return importlib.util.find_spec(package) is not None
    except ImportError:  # the parent package is missing
        return False


def register() -> None:
    """Registers ``accelerator="torch_tpu"`` with every installed Lightning trainer package
    (``lightning.pytorch``, ``pytorch_lightning``), importing them. torch_tpu registers with each
    by itself once it is imported; this is for code that wants registration up front."""
    found = [package for package in PACKAGES if _installed(package)]
    if not found:
        raise ImportError("torch_tpu.integrations.lightning needs PyTorch Lightning: "
                          "pip install lightning")
    for package in found:
        register_package(package)


def accelerator_class(package: str = "lightning.pytorch") -> type:
    """The ``TPUAccelerator`` class of a Lightning trainer package, for
    ``Trainer(accelerator=TPUAccelerator())`` (the name ``"torch_tpu"`` selects the same)."""
    if not _installed(package):
        raise ImportError(f"torch_tpu.integrations.lightning: {package} is not installed "
                          "(pip install lightning)")
    return register_package(package)


def __getattr__(name: str) -> Any:
    if name == "TPUAccelerator":
        package = next((p for p in PACKAGES if _installed(p)), None)
        if package is None:
            raise ImportError("torch_tpu.integrations.lightning.TPUAccelerator needs PyTorch "
                              "Lightning: pip install lightning")
        return accelerator_class(package)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

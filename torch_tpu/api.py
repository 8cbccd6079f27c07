"""``torch_tpu.api``: the entry point scripts written for earlier TorchTPU releases call.

There, ``tpu_device()`` started the runtime and returned the device to move work to; here
importing torch_tpu registers the device and ``torch.device("tpu")`` works directly, so this only
checks that the runtime can start and returns that device.
"""

from __future__ import annotations

import torch

import torch_tpu

__all__ = ["tpu_device"]


def tpu_device() -> torch.device:
    """The ``tpu`` device of this process (``torch.device("tpu")``: the current tpu device), with
    the runtime started. Raises RuntimeError with the plugin's error when it cannot start."""
    if torch.tpu.device_count() == 0:
        raise RuntimeError(f"torch_tpu.api.tpu_device(): the tpu runtime cannot start: "
                           f"{torch_tpu.plugin_error()}")
    return torch.device("tpu")

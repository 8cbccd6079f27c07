"""What the tpu device is, in the names JAX's Pallas TPU support uses."""

from __future__ import annotations

from torch_tpu import _C


def get_tpu_device_name() -> str | None:
    """The TPU device kind under the tpu device (``"TPU v5 lite"``...), or None when the device is
    not a TPU (the XLA CPU plugin): Helion then sizes kernels for its default TPU generation, as in
    its interpret mode."""
    info = _C._runtime_info()
    if str(info["platform_name"]).lower() != "tpu" or not info["device_kinds"]:
        return None
    return info["device_kinds"][0]

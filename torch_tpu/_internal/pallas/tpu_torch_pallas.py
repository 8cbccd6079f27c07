"""Calling a traced kernel by its key (Helion's direct-call fast path)."""

from __future__ import annotations

from typing import Any

import torch


def call_custom_kernel(kernel_name: str, mlir_fingerprint: str, *, inputs: list,
                       output_shapes: Any = None, donate_argnums: Any = None,
                       device_assignment: Any = None) -> list:
    """Runs the kernel traced under key ``mlir_fingerprint`` (a JaxCallable's
    ``kernel_key_to_mlir_fingerprint`` value) on ``inputs``; returns its flat results. Output
    shapes come from the trace; nothing is donated (aliased outputs are copied back by the
    caller); one device (``device_assignment`` must name at most one)."""
    if device_assignment is not None and len(device_assignment) > 1:
        raise NotImplementedError(f"{kernel_name}: kernels spanning several devices are not "
                                  f"supported on tpu yet (device_assignment={device_assignment})")
    return list(torch.ops.tpu_kernels.jax_call(mlir_fingerprint, list(inputs)))

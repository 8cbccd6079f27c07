"""Printing tpu tensors.

PyTorch's tensor formatter runs a dozen small ops (abs, isfinite, masked_select, min/max,
slicing for summaries) on the tensor it prints. On a tpu each distinct shape of each op is a
program to compile, so ``print(x)`` of a 100x100 tensor compiled ~70 programs (seconds on a
cold process). PyTorch formats xla/lazy tensors from a CPU copy for the same reason, but keeps
that list closed; this module applies the same rule to tpu tensors: one device-to-host copy,
then formatting on the CPU. The header (``device='tpu:0'``, ``grad_fn``, ``requires_grad``) is
still written from the tpu tensor itself.
"""

from __future__ import annotations

import functools

import torch
import torch._tensor_str


def install() -> None:
    format_contents = torch._tensor_str._tensor_str
    if getattr(format_contents, "_formats_tpu_on_cpu", False):
        return

    @functools.wraps(format_contents)
    def format_on_cpu(self, indent):
        if self.device.type == "tpu":
            self = self.detach().to("cpu")
        return format_contents(self, indent)

    format_on_cpu._formats_tpu_on_cpu = True
    torch._tensor_str._tensor_str = format_on_cpu

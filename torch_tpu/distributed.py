"""``tpu_dist``: the torch.distributed backend of the tpu device.

``dist.init_process_group("tpu_dist")`` (one process per device under torchrun) gives a group
whose collectives take tpu tensors (and CPU tensors, for object collectives and barriers). The
backend is C++ (``csrc/distributed``). On the XLA CPU plugin, whose PJRT C API has no
cross-process collectives, it stages tensors through host memory over PyTorch's Gloo, created
here over the same store, rank, size and timeout. See docs/distributed.md.
"""

from __future__ import annotations

import torch.distributed as dist

from torch_tpu import _C

BACKEND = "tpu_dist"


def _create_backend(options, backend_options):
    """The creator torch.distributed calls (extended API): one tpu_dist backend per group."""
    host = dist.ProcessGroupGloo(dist.PrefixStore("gloo/", options.store), options.group_rank,
                                 options.group_size, options.timeout)
    return _C._create_tpu_dist_backend(options.store, options.group_rank, options.group_size,
                                       options.timeout, host)


def register() -> None:
    """Make ``"tpu_dist"`` a torch.distributed backend for tpu (and CPU) tensors."""
    if BACKEND not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND, _create_backend, extended_api=True,
                                      devices=["cpu", "tpu"])

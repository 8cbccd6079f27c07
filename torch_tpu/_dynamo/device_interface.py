"""What Dynamo and Inductor ask of the "tpu" device: Dynamo's device interface, and Inductor's
code generators claimed so an explicit backend="inductor" fails clearly on tpu tensors."""

from __future__ import annotations

from typing import Any

import torch
from torch._dynamo.device_interface import DeviceInterface


class _TpuInterface(DeviceInterface):
    """What Dynamo asks of a device: index, count, streams, events, synchronization."""

    @staticmethod
    def _module():
        return torch.tpu

    class device:
        def __new__(cls, device):
            return torch.tpu.device(device)

    class Event:
        def __new__(cls, *args, **kwargs):
            return torch.tpu.Event(*args, **kwargs)

    class Stream:
        def __new__(cls, *args, **kwargs):
            return torch.tpu.Stream(*args, **kwargs)

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            torch.tpu.set_device(device)

        @staticmethod
        def current_device() -> int:
            return torch.tpu.current_device()

        @staticmethod
        def get_device_properties(device=None):
            return None

    current_device = staticmethod(lambda: torch.tpu.current_device())
    set_device = staticmethod(lambda device: torch.tpu.set_device(device))
    device_count = staticmethod(lambda: torch.tpu.device_count())
    is_available = staticmethod(lambda: torch.tpu.is_available())
    synchronize = staticmethod(lambda device=None: torch.tpu.synchronize(device))
    current_stream = staticmethod(lambda: torch.tpu.current_stream()
                                  if hasattr(torch.tpu, "current_stream") else None)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        previous = torch.tpu.current_device()
        if device != previous:
            torch.tpu.set_device(device)
        return previous

    exchange_device = maybe_exchange_device

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @staticmethod
    def is_triton_capable(device=None) -> bool:
        return False

    @staticmethod
    def memory_allocated(device=None) -> int:
        return torch.tpu.memory_allocated(device)


_INDUCTOR_ON_TPU = ('torch.compile: the inductor backend cannot compile tpu tensors; use '
                    'torch.compile(model) (torch_tpu routes the default backend to "tpu") or '
                    'torch.compile(model, backend="tpu")')


class _RefuseAnyUse(type):
    def __getattr__(cls, name: str):
        raise RuntimeError(_INDUCTOR_ON_TPU)


class _InductorOnTpu(metaclass=_RefuseAnyUse):
    """Inductor's code generators for "tpu" tensors: inductor cannot generate tpu code, so an
    explicit backend="inductor" (or a default reset to it) stops at the first use with an error
    that names the backends that can."""

    MESSAGE = _INDUCTOR_ON_TPU

    def __init__(self, *args: Any, **kwargs: Any):
        raise RuntimeError(self.MESSAGE)

    @classmethod
    def create(cls, *args: Any, **kwargs: Any):
        raise RuntimeError(cls.MESSAGE)


def register_inductor_hook() -> None:
    """Claims the "tpu" device in Inductor's code generators (when they load) before Inductor
    registers its own, so backend="inductor" fails with a clear error on tpu tensors."""
    from torch._inductor.codegen.common import register_backend_for_device

    register_backend_for_device("tpu", _InductorOnTpu, _InductorOnTpu)

"""torch_tpu: a PyTorch backend that runs the ``tpu`` device through the OpenXLA PJRT C API."""

from __future__ import annotations


def _autoload() -> None:
    """Entry point for PyTorch's ``torch.backends`` autoloading: importing registers the device.

    Defined before ``import torch`` because ``import torch_tpu`` imports torch, which autoloads
    this (then partially initialized) module and looks this function up.
    """


import torch  # noqa: E402,F401  (loads libtorch, which _C links against)

from torch_tpu import _C, _plugin  # noqa: E402

__all__ = ["runtime_info"]


def _configure() -> None:
    choice = _plugin.resolve()
    _C._configure_runtime(choice.path, choice.error, choice.create_options)


def runtime_info() -> dict:
    """Describe the PJRT runtime behind the ``tpu`` device (starting it if needed).

    Returns a dict with ``plugin_path``, ``platform_name``, ``platform_version``,
    ``pjrt_api_version``, ``device_count``, ``device_kinds`` and ``plugin_attributes``.
    """
    return _C._runtime_info()


_configure()

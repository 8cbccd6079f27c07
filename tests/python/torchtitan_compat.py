"""Lets torchtitan 0.3.0 import in a venv without triton (torch's CPU build does not depend on it).

`import torchtitan.models.llama3` reaches torchtitan.models.common's MoE token dispatcher, whose
module imports torchtitan/distributed/minimal_async_ep/kernels.py, and that file does
`import triton` to define CUDA kernels for expert parallelism. The dense Llama 3 model never
calls them. A stand-in for that one module is registered, whose kernels raise when called.
A placeholder `triton` module is not used: torch itself probes `import triton` to choose its
Inductor paths, and must keep seeing none. With triton installed nothing is registered.
"""

import importlib.util
import sys
import types

_KERNELS = "torchtitan.distributed.minimal_async_ep.kernels"


def _kernel_attribute(name):
    if name.startswith("__"):  # inspect and importlib probe __file__, __path__, ...
        raise AttributeError(name)

    def unavailable(*args, **kwargs):
        raise RuntimeError(f"{_KERNELS}.{name} is a triton kernel, and triton is not installed")

    return unavailable


def make_torchtitan_importable():
    if _KERNELS in sys.modules or importlib.util.find_spec("triton") is not None:
        return
    kernels = types.ModuleType(_KERNELS)
    kernels.__getattr__ = _kernel_attribute
    sys.modules[_KERNELS] = kernels

"""``torch.compile(model, backend="tpu")``: whole FX graphs lowered to one XLA program each.

Dynamo captures the graph, AOTAutograd splits it into functionalized forward and backward graphs
(decomposing only ops that have no tpu lowering), and each graph becomes one native
``_GraphProgram``: every node goes through the same lowering registry as eager execution, views
read through the same strided-view lowering, and in-place updates of graph inputs (BatchNorm
running statistics, optimizer state) are written back into the inputs' storages with donation.
The program is compiled once per input signature (shapes, dtypes, strides) and runs
asynchronously like eager ops.

A graph that holds something this path cannot lower runs eagerly (op by op on tpu) after one
warning that names what is missing; results never differ.
"""

from __future__ import annotations

from torch._dynamo.backends.registry import register_backend
from torch._dynamo.device_interface import register_interface_for_device

from torch_tpu._dynamo import default_backend, graphsafe_rng
from torch_tpu._dynamo.backend import tpu_backend
from torch_tpu._dynamo.device_interface import _TpuInterface, register_inductor_hook
# Re-exported: tests clear the once-per-process warnings; kernels' graph hooks raise _Unsupported.
from torch_tpu._dynamo.messages import _warned  # noqa: F401
from torch_tpu._dynamo.translation import _Unsupported  # noqa: F401

__all__ = ["tpu_backend", "register", "register_inductor_hook"]


def register() -> None:
    """Registers the "tpu" Dynamo backend and device interface (when torch._dynamo loads)."""
    register_backend(name="tpu", compiler_fn=tpu_backend)
    # torch.compile(model) with no backend argument: tpu graphs to "tpu", others to Inductor.
    default_backend.install()
    graphsafe_rng.register()
    # Optimizer steps on tpu parameters run fused outside compiled graphs (_optimizer_steps.py).
    from torch_tpu import _optimizer_steps

    _optimizer_steps.register_with_dynamo()
    # PyTorch's own table maps "tpu" to its JAX-based interface when first consulted; fill the
    # table first so this registration is the one that stays.
    from torch._dynamo import device_interface

    if not device_interface._device_initialized:
        device_interface.init_device_reg()
    register_interface_for_device("tpu", _TpuInterface)

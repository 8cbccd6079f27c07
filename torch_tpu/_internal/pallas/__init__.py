"""The JAX-kernel interface other projects import from here: ``jax_op(name, fn)`` (kernels written
for earlier TorchTPU releases, Helion), and for Helion's Pallas launcher
(helion/runtime/pallas/launcher.py) ``pallas.JaxCallable``, ``pallas.jax_placeholder``,
``pallas._get_kernel_invocation_key`` and ``tpu_torch_pallas.call_custom_kernel``; all served by
torch.tpu.pallas' jax_op machinery."""

from torch_tpu._internal.pallas.named_jax_op import jax_op

__all__ = ["jax_op"]

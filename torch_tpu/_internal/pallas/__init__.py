"""The JAX-kernel interface Helion's Pallas launcher (helion/runtime/pallas/launcher.py) imports:
``pallas.JaxCallable``, ``pallas.jax_placeholder``, ``pallas._get_kernel_invocation_key`` and
``tpu_torch_pallas.call_custom_kernel``, served by torch.tpu.pallas' jax_op machinery."""

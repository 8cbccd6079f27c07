// The operator that calls a traced JAX kernel (torch.tpu.pallas.jax_op). Defined here, before
// the eager kernels register, so its lowering (lowering/jax_call.cc) gets the PrivateUse1 kernel
// like any ATen op; torch_tpu/pallas.py adds its fake (shape) and autograd kernels. One operator
// serves every kernel: `kernel` is the key of a traced signature, part of every program signature.
#include <torch/library.h>

TORCH_LIBRARY(tpu_kernels, m) { m.def("jax_call(str kernel, Tensor[] inputs) -> Tensor[]"); }

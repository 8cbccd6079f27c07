// Binds the registry of traced JAX kernels (lowering::JaxKernelRegistry) into torch_tpu._C, for
// torch_tpu.pallas.
#pragma once

#include <pybind11/pybind11.h>

namespace torch_tpu::python {

void BindJaxKernels(pybind11::module& module);

}  // namespace torch_tpu::python

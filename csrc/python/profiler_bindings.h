// torch_tpu._C bindings of the torch.profiler integration (profiler/).
#pragma once

#include <pybind11/pybind11.h>

namespace torch_tpu::python {

// Registers the Kineto activity profiler with PyTorch and binds its introspection.
void BindProfiler(pybind11::module_& module);

}  // namespace torch_tpu::python

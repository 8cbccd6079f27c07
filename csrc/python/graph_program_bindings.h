// Binds exec::GraphProgram (torch.compile's graphs) into torch_tpu._C.
#pragma once

#include <pybind11/pybind11.h>

namespace torch_tpu::python {

void BindGraphProgram(pybind11::module& module);

}  // namespace torch_tpu::python

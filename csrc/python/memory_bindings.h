// Binds the device memory statistics, the live-buffer snapshot, the programs' memory accounting
// and the per-process memory limit behind torch.tpu's memory functions into torch_tpu._C.
#pragma once

#include <pybind11/pybind11.h>

namespace torch_tpu::python {

void BindMemory(pybind11::module& module);

}  // namespace torch_tpu::python

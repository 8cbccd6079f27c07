// Binds the tpu_dist c10d backend (distributed::TpuDistBackend) into torch_tpu._C, for
// torch_tpu.distributed, which registers it with torch.distributed.
#pragma once

#include <pybind11/pybind11.h>

namespace torch_tpu::python {

void BindDistributed(pybind11::module& module);

}  // namespace torch_tpu::python

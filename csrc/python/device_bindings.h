// Binds what torch.tpu reports about devices (get_device_properties) and the matmul precision
// override stack (torch.tpu.precision) into torch_tpu._C.
#pragma once

#include <pybind11/pybind11.h>

namespace torch_tpu::python {

void BindDevice(pybind11::module& module);

}  // namespace torch_tpu::python

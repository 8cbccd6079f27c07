// Binds deviceless ahead-of-time compilation (pjrt::PjrtTopology) and the module capture
// (exec::BeginModuleCapture) into torch_tpu._C, for torch_tpu.aot.
#pragma once

#include <pybind11/pybind11.h>

#include <vector>

#include "pjrt/client.h"

namespace torch_tpu::python {

// {"name": value} with bool, int or str values, as PJRT create options.
std::vector<pjrt::CreateOption> ToCreateOptions(const pybind11::dict& options);

void BindAot(pybind11::module& module);

}  // namespace torch_tpu::python

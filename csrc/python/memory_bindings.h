// Binds the device memory statistics, the live-buffer snapshot, the programs' memory accounting
// and the per-process memory limit behind torch.tpu's memory functions into torch_tpu._C.
#pragma once

#include <pybind11/pybind11.h>

#include "pjrt/compiled_memory.h"

namespace torch_tpu::python {

// The compiler's memory statistics as {"argument_bytes": ..., "output_bytes": ...,
// "alias_bytes": ..., "generated_code_bytes": ..., "peak_bytes": ..., <temporaries_key>: ...}
// (torch_tpu.aot has always called the temporaries "temp_bytes"; torch.tpu
// "temporary_bytes").
pybind11::dict CompiledMemoryDict(const pjrt::CompiledMemoryStats& stats,
                                  const char* temporaries_key);

void BindMemory(pybind11::module& module);

}  // namespace torch_tpu::python

#include "python/memory_bindings.h"

#include <pybind11/stl.h>

#include "runtime/program_memory.h"
#include "runtime/storage.h"
#include "runtime/storage_buffer.h"

namespace torch_tpu::python {
namespace py = pybind11;

py::dict CompiledMemoryDict(const pjrt::CompiledMemoryStats& stats, const char* temporaries_key) {
  py::dict result;
  result[temporaries_key] = stats.temporaries;
  result["argument_bytes"] = stats.arguments;
  result["output_bytes"] = stats.outputs;
  result["alias_bytes"] = stats.aliased;
  result["generated_code_bytes"] = stats.generated_code;
  result["peak_bytes"] = stats.peak;
  return result;
}

void BindMemory(py::module& module) {
  module.def("_memory_stats", &runtime::MemoryStats);
  module.def("_reset_peak_memory_stats", &runtime::ResetPeakMemoryStats);
  module.def("_reset_accumulated_memory_stats", &runtime::ResetAccumulatedMemoryStats);
  module.def("_mem_get_info", [](int device) {
    const runtime::MemoryCapacity capacity = runtime::QueryMemoryCapacity(device);
    return py::make_tuple(capacity.free_bytes, capacity.total_bytes, capacity.host_memory);
  });
  // [(address, bytes, producing op or graph or None)], largest first.
  module.def("_live_buffers", [](int device) {
    {
      // Launches queued behind compiles and the pending fused graph give their buffers first.
      py::gil_scoped_release release;
      runtime::MaterializeDeferred();
    }
    py::list result;
    for (const runtime::LiveBuffer& buffer : runtime::LiveBuffers(device)) {
      result.append(py::make_tuple(buffer.address, buffer.bytes,
                                   buffer.producer ? py::object(py::str(*buffer.producer))
                                                   : py::object(py::none())));
    }
    return result;
  });
  module.def("_program_memory_stats", [](size_t limit) {
    {
      py::gil_scoped_release release;  // programs queued behind their compiles run first
      runtime::MaterializeDeferred();
    }
    py::list result;
    for (const runtime::ProgramMemory& program : runtime::LiveProgramMemory(limit)) {
      py::dict entry = CompiledMemoryDict(program.stats, "temporary_bytes");
      entry["program"] = program.description;
      result.append(entry);
    }
    return result;
  });
  module.def("_set_memory_limit", &runtime::SetMemoryLimit);
  module.def("_memory_limit", &runtime::MemoryLimit);
}

}  // namespace torch_tpu::python

#include "python/aot_bindings.h"

#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "exec/program_execution.h"
#include "pjrt/executable.h"
#include "pjrt/plugin.h"
#include "pjrt/topology.h"
#include "python/memory_bindings.h"

namespace py = pybind11;

namespace torch_tpu::python {

std::vector<pjrt::CreateOption> ToCreateOptions(const py::dict& options) {
  std::vector<pjrt::CreateOption> result;
  for (const auto& [key, value] : options) {
    pjrt::CreateOption option{py::cast<std::string>(key), int64_t{0}};
    // bool first: Python's bool is an int.
    if (py::isinstance<py::bool_>(value)) {
      option.value = py::cast<bool>(value);
    } else if (py::isinstance<py::int_>(value)) {
      option.value = py::cast<int64_t>(value);
    } else {
      option.value = py::cast<std::string>(value);
    }
    result.push_back(std::move(option));
  }
  return result;
}

namespace {

std::shared_ptr<pjrt::PjrtTopology> MakeTopology(const std::string& plugin_path,
                                                 const std::string& name, const py::dict& options) {
  std::vector<pjrt::CreateOption> create_options = ToCreateOptions(options);
  py::gil_scoped_release release;
  return pjrt::PjrtTopology::Create(pjrt::PjrtPlugin::Load(plugin_path), name, create_options);
}

// Compiles with the options every torch_tpu program is compiled with on a device (portable,
// single replica and partition), so the executable is the one the runtime would build there.
py::dict CompileForTopology(const pjrt::PjrtTopology& topology, const std::string& module_text) {
  std::unique_ptr<pjrt::PjrtExecutable> executable;
  std::string serialized;
  pjrt::CompiledMemoryStats memory;
  std::vector<std::pair<std::string, double>> cost;
  {
    py::gil_scoped_release release;
    executable = topology.Compile(module_text, pjrt::SingleDeviceCompileOptions());
    serialized = executable->Serialize();
    memory = executable->MemoryStats();
    cost = executable->CostAnalysis();
  }
  py::dict result;
  result["name"] = executable->name();
  result["num_outputs"] = executable->num_outputs();
  result["serialized"] = py::bytes(serialized);
  result["memory"] = CompiledMemoryDict(memory, "temp_bytes");
  py::dict cost_dict;
  for (const auto& [name, value] : cost) cost_dict[py::str(name)] = value;
  result["cost"] = cost_dict;
  return result;
}

}  // namespace

void BindAot(py::module& module) {
  py::class_<pjrt::PjrtTopology, std::shared_ptr<pjrt::PjrtTopology>>(module, "_PjrtTopology")
      .def(py::init(&MakeTopology), py::arg("plugin_path"), py::arg("name"),
           py::arg("options") = py::dict())
      .def_property_readonly("name", &pjrt::PjrtTopology::name)
      .def_property_readonly("platform_name", &pjrt::PjrtTopology::platform_name)
      .def_property_readonly("platform_version", &pjrt::PjrtTopology::platform_version)
      .def_property_readonly("device_kinds", &pjrt::PjrtTopology::device_kinds)
      .def("compile", &CompileForTopology, py::arg("module_text"));
  module.def("_begin_module_capture", &exec::BeginModuleCapture);
  module.def("_end_module_capture", [] {
    py::list result;
    for (auto& captured : exec::EndModuleCapture()) {
      result.append(py::make_tuple(captured.description, captured.text));
    }
    return result;
  });
}

}  // namespace torch_tpu::python

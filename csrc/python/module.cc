// The torch_tpu._C extension module: binds the runtime for the Python package.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "aten/lowered_kernels.h"
#include "exec/runtime.h"
#include "pjrt/error.h"

namespace py = pybind11;

namespace torch_tpu::python {
namespace {

void ConfigureRuntime(const std::string& plugin_path, const std::string& resolution_error,
                      const py::dict& create_options) {
  exec::RuntimeConfig config;
  config.plugin_path = plugin_path;
  config.resolution_error = resolution_error;
  for (const auto& [key, value] : create_options) {
    pjrt::CreateOption option{py::cast<std::string>(key), int64_t{0}};
    if (py::isinstance<py::bool_>(value)) {
      option.value = py::cast<bool>(value);
    } else if (py::isinstance<py::int_>(value)) {
      option.value = py::cast<int64_t>(value);
    } else {
      option.value = py::cast<std::string>(value);
    }
    config.create_options.push_back(std::move(option));
  }
  exec::Runtime::Configure(std::move(config));
}

py::dict RuntimeInfo() {
  const exec::Runtime& runtime = exec::Runtime::Get();
  const pjrt::PjrtPlugin& plugin = runtime.plugin();
  py::dict info;
  info["plugin_path"] = plugin.path();
  info["platform_name"] = runtime.client().platform_name();
  info["platform_version"] = runtime.client().platform_version();
  info["pjrt_api_version"] = std::to_string(plugin.api_major_version()) + "." +
                             std::to_string(plugin.api_minor_version());
  info["device_count"] = runtime.device_count();
  py::list kinds;
  for (const auto& device : runtime.client().addressable_devices()) kinds.append(device.kind);
  info["device_kinds"] = kinds;
  info["plugin_attributes"] = plugin.Attributes();
  return info;
}

}  // namespace

PYBIND11_MODULE(_C, module) {
  module.doc() = "torch_tpu native extension";
  py::register_exception<pjrt::PjrtError>(module, "PjrtError", PyExc_RuntimeError);
  module.def("_configure_runtime", &ConfigureRuntime, py::arg("plugin_path"),
             py::arg("resolution_error"), py::arg("create_options"));
  module.def("_runtime_is_initialized", &exec::Runtime::IsInitialized);
  module.def("_runtime_info", &RuntimeInfo);
  aten::RegisterLoweredKernels();
}

}  // namespace torch_tpu::python

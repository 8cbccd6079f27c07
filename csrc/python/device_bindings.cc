#include "python/device_bindings.h"

#include <ATen/core/CachingHostAllocator.h>
#include <pybind11/stl.h>

#include <map>
#include <string>

#include "lowering/matmul_precision.h"
#include "pjrt/device_description.h"
#include "runtime/runtime.h"

namespace torch_tpu::python {
namespace {

namespace py = pybind11;

// Everything the plugin describes about addressable device `index` (the runtime starts if needed).
py::dict DeviceDescription(int index) {
  const runtime::Runtime& device_runtime = runtime::Runtime::Get();
  const pjrt::PjrtClient& client = device_runtime.client();
  const pjrt::PjrtDevice& device = client.device(static_cast<size_t>(index));
  const pjrt::PjrtPlugin& plugin = device_runtime.plugin();
  py::dict result;
  result["id"] = device.id;
  result["local_hardware_id"] = device.local_hardware_id;
  result["kind"] = device.kind;
  result["debug_string"] = device.debug_string;
  result["process_index"] = client.process_index();
  result["platform_name"] = client.platform_name();
  result["platform_version"] = client.platform_version();
  result["attributes"] = pjrt::DeviceAttributes(plugin, device.handle);
  result["memory_stats"] = pjrt::DeviceMemoryStats(plugin, device.handle);
  result["memory_kinds"] = pjrt::DeviceMemoryKinds(plugin, device.handle);
  return result;
}

lowering::MatmulPrecision PrecisionNamed(const std::string& name) {
  for (auto precision : {lowering::MatmulPrecision::kDefault, lowering::MatmulPrecision::kHigh,
                         lowering::MatmulPrecision::kHighest}) {
    if (name == lowering::MatmulPrecisionName(precision)) return precision;
  }
  throw py::value_error("torch.tpu.precision: expected 'default', 'high' or 'highest', got '" +
                        name + "'");
}

// The tpu host allocator's statistics (runtime/pinned_memory.cc) under torch.cuda's names.
std::map<std::string, int64_t> HostMemoryStats() {
  const at::HostStats stats = at::getHostAllocator(c10::DeviceType::PrivateUse1)->get_stats();
  std::map<std::string, int64_t> result;
  auto add = [&](const std::string& name, const c10::CachingAllocator::Stat& stat) {
    result[name + ".current"] = stat.current;
    result[name + ".peak"] = stat.peak;
    result[name + ".allocated"] = stat.allocated;
    result[name + ".freed"] = stat.freed;
  };
  add("active_requests", stats.active_requests);
  add("active_bytes", stats.active_bytes);
  add("allocations", stats.allocations);
  add("allocated_bytes", stats.allocated_bytes);
  result["num_host_alloc"] = stats.num_host_alloc;
  result["num_host_free"] = stats.num_host_free;
  return result;
}

}  // namespace

void BindDevice(py::module& module) {
  module.def("_device_description", &DeviceDescription, py::arg("index"));
  module.def("_host_memory_stats", &HostMemoryStats);
  module.def("_reset_peak_host_memory_stats",
             [] { at::getHostAllocator(c10::DeviceType::PrivateUse1)->reset_peak_stats(); });
  module.def(
      "_matmul_precision",
      [] { return std::string(lowering::MatmulPrecisionName(lowering::CurrentMatmulPrecision())); },
      "The precision float32 matmuls and convolutions get in programs built now.");
  module.def("_push_matmul_precision", [](const std::string& name) {
    lowering::PushMatmulPrecision(PrecisionNamed(name));
  });
  module.def("_pop_matmul_precision", &lowering::PopMatmulPrecision);
}

}  // namespace torch_tpu::python

#include "topology.h"

#include "error.h"
#include "executable.h"

namespace torch_tpu::pjrt {

PjrtExecutable::PjrtExecutable(std::shared_ptr<const PjrtPlugin> plugin,
                               PJRT_Executable* executable)
    : plugin_(std::move(plugin)), executable_(executable) {
  try {
    DescribeExecutable(plugin_->api(), executable_, name_, num_outputs_);
  } catch (...) {
    Destroy();  // the destructor does not run for a constructor that throws
    throw;
  }
}

PjrtExecutable::~PjrtExecutable() { Destroy(); }

void PjrtExecutable::Destroy() {
  const PJRT_Api* api = plugin_->api();
  PJRT_Executable_Destroy_Args args{};
  args.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
  args.executable = executable_;
  ConsumeError(api, api->PJRT_Executable_Destroy(&args));
}

std::string PjrtExecutable::Serialize() const {
  return SerializeExecutable(plugin_->api(), executable_);
}

CompiledMemoryStats PjrtExecutable::MemoryStats() const {
  return ReadCompiledMemoryStats(plugin_->api(), executable_);
}

std::vector<std::pair<std::string, double>> PjrtExecutable::CostAnalysis() const {
  std::vector<std::pair<std::string, double>> result;
  if (!plugin_->HasFunction(offsetof(PJRT_Api, PJRT_Executable_GetCostAnalysis))) return result;
  const PJRT_Api* api = plugin_->api();
  PJRT_Executable_GetCostAnalysis_Args args{};
  args.struct_size = PJRT_Executable_GetCostAnalysis_Args_STRUCT_SIZE;
  args.executable = executable_;
  ThrowIfError(api, api->PJRT_Executable_GetCostAnalysis(&args), "PJRT_Executable_GetCostAnalysis");
  for (size_t i = 0; i < args.num_properties; ++i) {
    const PJRT_NamedValue& value = args.properties[i];
    std::string name(value.name, value.name_size);
    if (value.type == PJRT_NamedValue_kFloat) {
      result.emplace_back(std::move(name), value.float_value);
    } else if (value.type == PJRT_NamedValue_kInt64) {
      result.emplace_back(std::move(name), static_cast<double>(value.int64_value));
    }
  }
  return result;
}

std::shared_ptr<PjrtTopology> PjrtTopology::Create(std::shared_ptr<const PjrtPlugin> plugin,
                                                   std::string_view name,
                                                   const std::vector<CreateOption>& options) {
  TORCH_TPU_REQUIRE_PJRT_FUNCTION(*plugin, PJRT_TopologyDescription_Create);
  TORCH_TPU_REQUIRE_PJRT_FUNCTION(*plugin, PJRT_Compile);
  const PJRT_Api* api = plugin->api();
  std::vector<PJRT_NamedValue> named_values = ToNamedValues(options);
  PJRT_TopologyDescription_Create_Args args{};
  args.struct_size = PJRT_TopologyDescription_Create_Args_STRUCT_SIZE;
  args.topology_name = name.data();
  args.topology_name_size = name.size();
  args.create_options = named_values.data();
  args.num_options = named_values.size();
  ThrowIfError(
      api, api->PJRT_TopologyDescription_Create(&args),
      "PJRT_TopologyDescription_Create(\"" + std::string(name) + "\", " + plugin->path() + ")");
  // Owned from here, so a failing query below still destroys it.
  return std::shared_ptr<PjrtTopology>(
      new PjrtTopology(std::move(plugin), std::string(name), args.topology));
}

PjrtTopology::PjrtTopology(std::shared_ptr<const PjrtPlugin> plugin, std::string name,
                           PJRT_TopologyDescription* topology)
    : plugin_(std::move(plugin)), name_(std::move(name)), topology_(topology) {
  const PJRT_Api* api = plugin_->api();
  try {
    PJRT_TopologyDescription_PlatformName_Args name_args{};
    name_args.struct_size = PJRT_TopologyDescription_PlatformName_Args_STRUCT_SIZE;
    name_args.topology = topology_;
    ThrowIfError(api, api->PJRT_TopologyDescription_PlatformName(&name_args),
                 "PJRT_TopologyDescription_PlatformName");
    platform_name_.assign(name_args.platform_name, name_args.platform_name_size);

    PJRT_TopologyDescription_PlatformVersion_Args version_args{};
    version_args.struct_size = PJRT_TopologyDescription_PlatformVersion_Args_STRUCT_SIZE;
    version_args.topology = topology_;
    ThrowIfError(api, api->PJRT_TopologyDescription_PlatformVersion(&version_args),
                 "PJRT_TopologyDescription_PlatformVersion");
    platform_version_.assign(version_args.platform_version, version_args.platform_version_size);

    PJRT_TopologyDescription_GetDeviceDescriptions_Args devices_args{};
    devices_args.struct_size = PJRT_TopologyDescription_GetDeviceDescriptions_Args_STRUCT_SIZE;
    devices_args.topology = topology_;
    ThrowIfError(api, api->PJRT_TopologyDescription_GetDeviceDescriptions(&devices_args),
                 "PJRT_TopologyDescription_GetDeviceDescriptions");
    for (size_t i = 0; i < devices_args.num_descriptions; ++i) {
      PJRT_DeviceDescription_Kind_Args kind_args{};
      kind_args.struct_size = PJRT_DeviceDescription_Kind_Args_STRUCT_SIZE;
      kind_args.device_description = devices_args.descriptions[i];
      ThrowIfError(api, api->PJRT_DeviceDescription_Kind(&kind_args),
                   "PJRT_DeviceDescription_Kind");
      device_kinds_.emplace_back(kind_args.device_kind, kind_args.device_kind_size);
    }
  } catch (...) {
    // The destructor does not run for a constructor that throws.
    PJRT_TopologyDescription_Destroy_Args args{};
    args.struct_size = PJRT_TopologyDescription_Destroy_Args_STRUCT_SIZE;
    args.topology = topology_;
    ConsumeError(api, api->PJRT_TopologyDescription_Destroy(&args));
    throw;
  }
}

PjrtTopology::~PjrtTopology() {
  const PJRT_Api* api = plugin_->api();
  PJRT_TopologyDescription_Destroy_Args args{};
  args.struct_size = PJRT_TopologyDescription_Destroy_Args_STRUCT_SIZE;
  args.topology = topology_;
  ConsumeError(api, api->PJRT_TopologyDescription_Destroy(&args));
}

std::unique_ptr<PjrtExecutable> PjrtTopology::Compile(std::string_view mlir_module,
                                                      std::string_view compile_options) const {
  const PJRT_Api* api = plugin_->api();
  std::string code(mlir_module);
  PJRT_Program program = MlirProgram(code);
  PJRT_Compile_Args args{};
  args.struct_size = PJRT_Compile_Args_STRUCT_SIZE;
  args.topology = topology_;
  args.program = &program;
  args.compile_options = compile_options.data();
  args.compile_options_size = compile_options.size();
  args.client = nullptr;  // deviceless: the topology alone says what the target is
  ThrowIfError(api, api->PJRT_Compile(&args), "compiling StableHLO for topology " + name_);
  return std::make_unique<PjrtExecutable>(plugin_, args.executable);
}

}  // namespace torch_tpu::pjrt

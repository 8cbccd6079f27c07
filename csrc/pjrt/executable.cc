#include "executable.h"

#include <atomic>

#include "error.h"

namespace torch_tpu::pjrt {
namespace {

// Borrows the PJRT_Executable behind a loaded executable for metadata queries and frees it after.
class ExecutableView {
 public:
  ExecutableView(const PJRT_Api* api, PJRT_LoadedExecutable* loaded) : api_(api) {
    PJRT_LoadedExecutable_GetExecutable_Args args{};
    args.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
    args.loaded_executable = loaded;
    ThrowIfError(api, api->PJRT_LoadedExecutable_GetExecutable(&args),
                 "PJRT_LoadedExecutable_GetExecutable");
    executable_ = args.executable;
  }
  ~ExecutableView() {
    PJRT_Executable_Destroy_Args args{};
    args.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
    args.executable = executable_;
    ConsumeError(api_, api_->PJRT_Executable_Destroy(&args));
  }
  ExecutableView(const ExecutableView&) = delete;
  ExecutableView& operator=(const ExecutableView&) = delete;
  PJRT_Executable* get() const { return executable_; }

 private:
  const PJRT_Api* api_;
  PJRT_Executable* executable_ = nullptr;
};

void AppendVarint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

// Protobuf wire format: key = (field_number << 3) | wire_type.
void AppendVarintField(std::string& out, int field, uint64_t value) {
  AppendVarint(out, static_cast<uint64_t>(field) << 3);
  AppendVarint(out, value);
}

void AppendBytesField(std::string& out, int field, const std::string& bytes) {
  AppendVarint(out, (static_cast<uint64_t>(field) << 3) | 2);
  AppendVarint(out, bytes.size());
  out += bytes;
}

}  // namespace

std::string SingleDeviceCompileOptions(std::span<const CompileOptionOverride> overrides) {
  // ExecutableBuildOptionsProto: num_replicas = 4, num_partitions = 5.
  std::string build_options;
  AppendVarintField(build_options, 4, 1);
  AppendVarintField(build_options, 5, 1);
  // CompileOptionsProto: compile_portable_executable = 4, executable_build_options = 3,
  // env_option_overrides = 7 (a map: entries of key = 1, value = 2, an OptionOverrideProto whose
  // int_field is 3).
  std::string options;
  AppendVarintField(options, 4, 1);
  AppendBytesField(options, 3, build_options);
  for (const CompileOptionOverride& option : overrides) {
    std::string value;
    AppendVarintField(value, 3, static_cast<uint64_t>(option.value));
    std::string entry;
    AppendBytesField(entry, 1, option.name);
    AppendBytesField(entry, 2, value);
    AppendBytesField(options, 7, entry);
  }
  return options;
}

std::string ReplicatedCompileOptions(std::span<const int64_t> device_ids) {
  // DeviceAssignmentProto: replica_count = 1, computation_count = 2, computation_devices = 3
  // (one per computation, holding replica_device_ids = 1, packed).
  std::string replica_ids;
  for (int64_t id : device_ids) AppendVarint(replica_ids, static_cast<uint64_t>(id));
  std::string computation;
  AppendBytesField(computation, 1, replica_ids);
  std::string assignment;
  AppendVarintField(assignment, 1, device_ids.size());
  AppendVarintField(assignment, 2, 1);
  AppendBytesField(assignment, 3, computation);
  // ExecutableBuildOptionsProto: num_replicas = 4, num_partitions = 5, device_assignment = 9.
  std::string build_options;
  AppendVarintField(build_options, 4, device_ids.size());
  AppendVarintField(build_options, 5, 1);
  AppendBytesField(build_options, 9, assignment);
  // CompileOptionsProto: executable_build_options = 3.
  std::string options;
  AppendBytesField(options, 3, build_options);
  return options;
}

namespace {
std::atomic<int64_t> live_loaded_executables{0};
}  // namespace

PjrtLoadedExecutable::PjrtLoadedExecutable(std::shared_ptr<const PjrtClient> client,
                                           PJRT_LoadedExecutable* executable)
    : client_(std::move(client)), executable_(executable) {
  const PJRT_Api* api = client_->api();
  ExecutableView view(api, executable_);
  DescribeExecutable(api, view.get(), name_, num_outputs_);
  try {
    memory_stats_ = ReadCompiledMemoryStats(api, view.get());
  } catch (const PjrtError&) {
    // Plugins without the call: temporaries are unknown and count as zero.
  }
  ++live_loaded_executables;
}

int64_t PjrtLoadedExecutable::live_count() { return live_loaded_executables.load(); }

PjrtLoadedExecutable::~PjrtLoadedExecutable() {
  --live_loaded_executables;
  const PJRT_Api* api = client_->api();
  PJRT_LoadedExecutable_Destroy_Args args{};
  args.struct_size = PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE;
  args.executable = executable_;
  ConsumeError(api, api->PJRT_LoadedExecutable_Destroy(&args));
}

ExecutionResult PjrtLoadedExecutable::Execute(std::span<const PjrtBuffer* const> arguments,
                                              const PjrtDevice* device) const {
  std::vector<PJRT_Buffer*> handles;
  handles.reserve(arguments.size());
  for (const PjrtBuffer* argument : arguments) handles.push_back(argument->get());
  return Execute(std::span<PJRT_Buffer* const>(handles), device);
}

ExecutionResult PjrtLoadedExecutable::Execute(std::span<PJRT_Buffer* const> arguments,
                                              const PjrtDevice* device,
                                              std::span<const int64_t> non_donatable) const {
  const PJRT_Api* api = client_->api();
  PJRT_ExecuteOptions options{};
  options.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
  options.non_donatable_input_indices = non_donatable.data();
  options.num_non_donatable_input_indices = non_donatable.size();

  std::vector<PJRT_Buffer*> outputs(num_outputs_, nullptr);
  PJRT_Buffer* const* argument_list = arguments.data();
  PJRT_Buffer** output_list = outputs.data();
  PJRT_Event* done = nullptr;

  PJRT_LoadedExecutable_Execute_Args args{};
  args.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
  args.executable = executable_;
  args.options = &options;
  args.argument_lists = &argument_list;
  args.num_devices = 1;
  args.num_args = arguments.size();
  args.output_lists = &output_list;
  args.device_complete_events = &done;
  // Our executables are portable (see SingleDeviceCompileOptions): they need a device to run on.
  args.execute_device = device ? device->handle : client_->device(0).handle;
  ThrowIfError(api, api->PJRT_LoadedExecutable_Execute(&args), "executing " + name_);

  ExecutionResult result;
  result.outputs.reserve(num_outputs_);
  for (PJRT_Buffer* output : outputs) result.outputs.emplace_back(client_, output);
  result.done = PjrtEvent(client_->plugin(), done);
  return result;
}

std::vector<PJRT_Device*> PjrtLoadedExecutable::assigned_devices() const {
  const PJRT_Api* api = client_->api();
  PJRT_LoadedExecutable_AddressableDevices_Args args{};
  args.struct_size = PJRT_LoadedExecutable_AddressableDevices_Args_STRUCT_SIZE;
  args.executable = executable_;
  ThrowIfError(api, api->PJRT_LoadedExecutable_AddressableDevices(&args),
               "PJRT_LoadedExecutable_AddressableDevices(" + name_ + ")");
  return {args.addressable_devices, args.addressable_devices + args.num_addressable_devices};
}

std::vector<ExecutionResult> PjrtLoadedExecutable::ExecuteOnAssignedDevices(
    std::span<const std::vector<PJRT_Buffer*>> argument_lists) const {
  const PJRT_Api* api = client_->api();
  size_t devices = argument_lists.size();
  size_t num_args = devices ? argument_lists[0].size() : 0;
  for (const auto& list : argument_lists) {
    if (list.size() != num_args) {
      throw PjrtError(PJRT_Error_Code_INVALID_ARGUMENT,
                      "executing " + name_ + ": argument lists differ in length");
    }
  }
  PJRT_ExecuteOptions options{};
  options.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
  std::vector<PJRT_Buffer* const*> inputs;
  for (const auto& list : argument_lists) inputs.push_back(list.data());
  std::vector<std::vector<PJRT_Buffer*>> outputs(devices,
                                                 std::vector<PJRT_Buffer*>(num_outputs_, nullptr));
  std::vector<PJRT_Buffer**> output_lists;
  for (auto& list : outputs) output_lists.push_back(list.data());
  std::vector<PJRT_Event*> done(devices, nullptr);

  PJRT_LoadedExecutable_Execute_Args args{};
  args.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
  args.executable = executable_;
  args.options = &options;
  args.argument_lists = inputs.data();
  args.num_devices = devices;
  args.num_args = num_args;
  args.output_lists = output_lists.data();
  args.device_complete_events = done.data();
  args.execute_device = nullptr;  // the devices fixed at compile time
  ThrowIfError(api, api->PJRT_LoadedExecutable_Execute(&args), "executing " + name_);

  std::vector<ExecutionResult> results(devices);
  for (size_t d = 0; d < devices; ++d) {
    for (PJRT_Buffer* output : outputs[d]) results[d].outputs.emplace_back(client_, output);
    results[d].done = PjrtEvent(client_->plugin(), done[d]);
  }
  return results;
}

std::string PjrtLoadedExecutable::Serialize() const {
  ExecutableView view(client_->api(), executable_);
  return SerializeExecutable(client_->api(), view.get());
}

void DescribeExecutable(const PJRT_Api* api, PJRT_Executable* executable, std::string& name,
                        size_t& num_outputs) {
  PJRT_Executable_NumOutputs_Args outputs_args{};
  outputs_args.struct_size = PJRT_Executable_NumOutputs_Args_STRUCT_SIZE;
  outputs_args.executable = executable;
  ThrowIfError(api, api->PJRT_Executable_NumOutputs(&outputs_args), "PJRT_Executable_NumOutputs");
  num_outputs = outputs_args.num_outputs;

  PJRT_Executable_Name_Args name_args{};
  name_args.struct_size = PJRT_Executable_Name_Args_STRUCT_SIZE;
  name_args.executable = executable;
  ThrowIfError(api, api->PJRT_Executable_Name(&name_args), "PJRT_Executable_Name");
  name.assign(name_args.executable_name, name_args.executable_name_size);
}

std::string SerializeExecutable(const PJRT_Api* api, PJRT_Executable* executable) {
  PJRT_Executable_Serialize_Args args{};
  args.struct_size = PJRT_Executable_Serialize_Args_STRUCT_SIZE;
  args.executable = executable;
  ThrowIfError(api, api->PJRT_Executable_Serialize(&args), "PJRT_Executable_Serialize");
  std::string bytes(args.serialized_bytes, args.serialized_bytes_size);
  if (args.serialized_executable_deleter != nullptr) {
    args.serialized_executable_deleter(args.serialized_executable);
  }
  return bytes;
}

}  // namespace torch_tpu::pjrt

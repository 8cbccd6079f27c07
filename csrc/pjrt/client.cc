#include "client.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>

#include "device_description.h"
#include "error.h"
#include "executable.h"

namespace torch_tpu::pjrt {
namespace {

int DeviceId(const PJRT_Api* api, PJRT_DeviceDescription* description) {
  PJRT_DeviceDescription_Id_Args args{};
  args.struct_size = PJRT_DeviceDescription_Id_Args_STRUCT_SIZE;
  args.device_description = description;
  ThrowIfError(api, api->PJRT_DeviceDescription_Id(&args), "PJRT_DeviceDescription_Id");
  return args.id;
}

std::string DeviceKind(const PJRT_Api* api, PJRT_DeviceDescription* description) {
  PJRT_DeviceDescription_Kind_Args args{};
  args.struct_size = PJRT_DeviceDescription_Kind_Args_STRUCT_SIZE;
  args.device_description = description;
  ThrowIfError(api, api->PJRT_DeviceDescription_Kind(&args), "PJRT_DeviceDescription_Kind");
  return std::string(args.device_kind, args.device_kind_size);
}

PjrtDevice DescribeDevice(const PJRT_Api* api, PJRT_Device* device) {
  PJRT_DeviceDescription* description = DeviceDescriptionOf(api, device);
  PjrtDevice result;
  result.handle = device;
  result.id = DeviceId(api, description);
  result.kind = DeviceKind(api, description);

  PJRT_DeviceDescription_DebugString_Args debug_args{};
  debug_args.struct_size = PJRT_DeviceDescription_DebugString_Args_STRUCT_SIZE;
  debug_args.device_description = description;
  ThrowIfError(api, api->PJRT_DeviceDescription_DebugString(&debug_args),
               "PJRT_DeviceDescription_DebugString");
  result.debug_string.assign(debug_args.debug_string, debug_args.debug_string_size);

  PJRT_Device_LocalHardwareId_Args hardware_args{};
  hardware_args.struct_size = PJRT_Device_LocalHardwareId_Args_STRUCT_SIZE;
  hardware_args.device = device;
  ThrowIfError(api, api->PJRT_Device_LocalHardwareId(&hardware_args),
               "PJRT_Device_LocalHardwareId");
  result.local_hardware_id = hardware_args.local_hardware_id;
  return result;
}

PjrtGlobalDevice DescribeGlobalDevice(const PJRT_Api* api, PJRT_Device* device) {
  PJRT_DeviceDescription* description = DeviceDescriptionOf(api, device);
  PjrtGlobalDevice result;
  result.id = DeviceId(api, description);
  result.kind = DeviceKind(api, description);
  PJRT_DeviceDescription_ProcessIndex_Args process_args{};
  process_args.struct_size = PJRT_DeviceDescription_ProcessIndex_Args_STRUCT_SIZE;
  process_args.device_description = description;
  ThrowIfError(api, api->PJRT_DeviceDescription_ProcessIndex(&process_args),
               "PJRT_DeviceDescription_ProcessIndex");
  result.process_index = process_args.process_index;
  return result;
}

// The store callbacks: C functions that must not throw, so failures become PJRT errors made
// with the plugin's own constructor.
PJRT_Error* StoreFailure(PJRT_CallbackError* make_error, PJRT_Error_Code code,
                         const std::string& message) {
  return (*make_error)(code, message.data(), message.size());
}

char* CopyValue(const std::string& value) {
  // The plugin copies the value and frees ours through the deleter we hand back.
  char* copy = static_cast<char*>(std::malloc(value.size() + 1));
  if (copy != nullptr) std::memcpy(copy, value.data(), value.size());
  return copy;
}

void FreeValue(char* value) { std::free(value); }

// Get and try-get: the value found by `lookup`, or the error for a missing key (`missing`).
template <typename Args, typename Lookup>
PJRT_Error* AnswerLookup(Args* args, Lookup lookup, PJRT_Error_Code missing_code,
                         const std::string& missing) {
  auto* store = static_cast<KeyValueStore*>(args->user_arg);
  std::string key(args->key, args->key_size);
  try {
    std::optional<std::string> value = lookup(*store, key);
    if (!value) {
      return StoreFailure(args->callback_error, missing_code,
                          "key-value store: \"" + key + "\" " + missing);
    }
    args->value = CopyValue(*value);
    args->value_size = value->size();
    args->value_deleter_callback = &FreeValue;
    return nullptr;
  } catch (const std::exception& error) {
    return StoreFailure(args->callback_error, PJRT_Error_Code_UNAVAILABLE,
                        "key-value store get \"" + key + "\": " + error.what());
  }
}

PJRT_Error* StoreGet(PJRT_KeyValueGetCallback_Args* args) {
  const int timeout_ms = args->timeout_in_ms;
  return AnswerLookup(
      args,
      [timeout_ms](KeyValueStore& store, const std::string& key) {
        return store.Get(key, std::chrono::milliseconds(timeout_ms));
      },
      PJRT_Error_Code_DEADLINE_EXCEEDED,
      "did not appear within " + std::to_string(timeout_ms) + " ms");
}

PJRT_Error* StoreTryGet(PJRT_KeyValueTryGetCallback_Args* args) {
  return AnswerLookup(
      args, [](KeyValueStore& store, const std::string& key) { return store.TryGet(key); },
      PJRT_Error_Code_NOT_FOUND, "not found");
}

PJRT_Error* StorePut(PJRT_KeyValuePutCallback_Args* args) {
  auto* store = static_cast<KeyValueStore*>(args->user_arg);
  std::string key(args->key, args->key_size);
  try {
    store->Set(key, std::string_view(args->value, args->value_size));
    return nullptr;
  } catch (const std::exception& error) {
    return StoreFailure(args->callback_error, PJRT_Error_Code_UNAVAILABLE,
                        "key-value store set \"" + key + "\": " + error.what());
  }
}

}  // namespace

std::vector<PJRT_NamedValue> ToNamedValues(const std::vector<CreateOption>& options) {
  std::vector<PJRT_NamedValue> named_values(options.size());
  for (size_t i = 0; i < options.size(); ++i) {
    PJRT_NamedValue& named = named_values[i];
    named.struct_size = PJRT_NamedValue_STRUCT_SIZE;
    named.name = options[i].name.c_str();
    named.name_size = options[i].name.size();
    if (auto* integer = std::get_if<int64_t>(&options[i].value)) {
      named.type = PJRT_NamedValue_kInt64;
      named.int64_value = *integer;
      named.value_size = 1;
    } else if (auto* text = std::get_if<std::string>(&options[i].value)) {
      named.type = PJRT_NamedValue_kString;
      named.string_value = text->c_str();
      named.value_size = text->size();
    } else {
      named.type = PJRT_NamedValue_kBool;
      named.bool_value = std::get<bool>(options[i].value);
      named.value_size = 1;
    }
  }
  return named_values;
}

PJRT_Program MlirProgram(std::string& code) {
  static constexpr std::string_view kFormat = "mlir";
  PJRT_Program program{};
  program.struct_size = PJRT_Program_STRUCT_SIZE;
  program.code = code.data();
  program.code_size = code.size();
  program.format = kFormat.data();
  program.format_size = kFormat.size();
  return program;
}

std::shared_ptr<PjrtClient> PjrtClient::Create(std::shared_ptr<const PjrtPlugin> plugin,
                                               const std::vector<CreateOption>& options) {
  return CreateClient(std::move(plugin), options, nullptr);
}

std::shared_ptr<PjrtClient> PjrtClient::Create(std::shared_ptr<const PjrtPlugin> plugin,
                                               std::vector<CreateOption> options,
                                               const MultiProcessOptions& multi_process) {
  if (multi_process.num_nodes < 1 || multi_process.node_id < 0 ||
      multi_process.node_id >= multi_process.num_nodes || !multi_process.store) {
    throw PjrtError(PJRT_Error_Code_INVALID_ARGUMENT,
                    "PJRT_Client_Create: node_id " + std::to_string(multi_process.node_id) +
                        " of " + std::to_string(multi_process.num_nodes) +
                        " nodes needs 0 <= node_id < num_nodes and a key-value store");
  }
  options.push_back({"node_id", int64_t{multi_process.node_id}});
  options.push_back({"num_nodes", int64_t{multi_process.num_nodes}});
  return CreateClient(std::move(plugin), options, &multi_process);
}

std::shared_ptr<PjrtClient> PjrtClient::CreateClient(std::shared_ptr<const PjrtPlugin> plugin,
                                                     const std::vector<CreateOption>& options,
                                                     const MultiProcessOptions* multi_process) {
  const PJRT_Api* api = plugin->api();
  std::vector<PJRT_NamedValue> named_values = ToNamedValues(options);
  PJRT_Client_Create_Args args{};
  args.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  args.create_options = named_values.data();
  args.num_options = named_values.size();
  std::string context = "PJRT_Client_Create(" + plugin->path();
  std::shared_ptr<KeyValueStore> store;
  if (multi_process != nullptr) {
    store = multi_process->store;
    args.kv_get_callback = &StoreGet;
    args.kv_get_user_arg = store.get();
    args.kv_put_callback = &StorePut;
    args.kv_put_user_arg = store.get();
    args.kv_try_get_callback = &StoreTryGet;
    args.kv_try_get_user_arg = store.get();
    context += ", node " + std::to_string(multi_process->node_id) + " of " +
               std::to_string(multi_process->num_nodes);
  }
  ThrowIfError(api, api->PJRT_Client_Create(&args), context + ")");
  return std::shared_ptr<PjrtClient>(
      new PjrtClient(std::move(plugin), args.client, std::move(store)));
}

PjrtClient::PjrtClient(std::shared_ptr<const PjrtPlugin> plugin, PJRT_Client* client,
                       std::shared_ptr<KeyValueStore> store)
    : plugin_(std::move(plugin)), store_(std::move(store)), client_(client) {
  const PJRT_Api* api = plugin_->api();
  PJRT_Client_PlatformName_Args name_args{};
  name_args.struct_size = PJRT_Client_PlatformName_Args_STRUCT_SIZE;
  name_args.client = client_;
  ThrowIfError(api, api->PJRT_Client_PlatformName(&name_args), "PJRT_Client_PlatformName");
  platform_name_.assign(name_args.platform_name, name_args.platform_name_size);

  PJRT_Client_PlatformVersion_Args version_args{};
  version_args.struct_size = PJRT_Client_PlatformVersion_Args_STRUCT_SIZE;
  version_args.client = client_;
  ThrowIfError(api, api->PJRT_Client_PlatformVersion(&version_args), "PJRT_Client_PlatformVersion");
  platform_version_.assign(version_args.platform_version, version_args.platform_version_size);

  PJRT_Client_AddressableDevices_Args devices_args{};
  devices_args.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE;
  devices_args.client = client_;
  ThrowIfError(api, api->PJRT_Client_AddressableDevices(&devices_args),
               "PJRT_Client_AddressableDevices");
  for (size_t i = 0; i < devices_args.num_addressable_devices; ++i) {
    devices_.push_back(DescribeDevice(api, devices_args.addressable_devices[i]));
  }

  PJRT_Client_Devices_Args all_args{};
  all_args.struct_size = PJRT_Client_Devices_Args_STRUCT_SIZE;
  all_args.client = client_;
  ThrowIfError(api, api->PJRT_Client_Devices(&all_args), "PJRT_Client_Devices");
  for (size_t i = 0; i < all_args.num_devices; ++i) {
    global_devices_.push_back(DescribeGlobalDevice(api, all_args.devices[i]));
  }
  PJRT_Client_ProcessIndex_Args process_args{};
  process_args.struct_size = PJRT_Client_ProcessIndex_Args_STRUCT_SIZE;
  process_args.client = client_;
  ThrowIfError(api, api->PJRT_Client_ProcessIndex(&process_args), "PJRT_Client_ProcessIndex");
  process_index_ = process_args.process_index;
}

int PjrtClient::process_count() const {
  std::set<int> processes;
  for (const PjrtGlobalDevice& device : global_devices_) processes.insert(device.process_index);
  return static_cast<int>(std::max<size_t>(processes.size(), 1));
}

PjrtClient::~PjrtClient() {
  PJRT_Client_Destroy_Args args{};
  args.struct_size = PJRT_Client_Destroy_Args_STRUCT_SIZE;
  args.client = client_;
  ConsumeError(api(), api()->PJRT_Client_Destroy(&args));  // cannot throw from a destructor
}

const PjrtDevice& PjrtClient::device(size_t index) const {
  if (index >= devices_.size()) {
    throw PjrtError(PJRT_Error_Code_INVALID_ARGUMENT,
                    "device index " + std::to_string(index) + " out of range: the " +
                        platform_name_ + " client has " + std::to_string(devices_.size()) +
                        " addressable device(s)");
  }
  return devices_[index];
}

HostToDeviceTransfer PjrtClient::BufferFromHost(const void* data, size_t size_bytes,
                                                PJRT_Buffer_Type type,
                                                std::span<const int64_t> dims,
                                                const PjrtDevice& device,
                                                bool wait_for_host_copy) const {
  std::vector<int64_t> dim_vector(dims.begin(), dims.end());
  for (int64_t dim : dim_vector) {
    if (dim < 0) {
      throw PjrtError(PJRT_Error_Code_INVALID_ARGUMENT,
                      "host-to-device copy with a negative dimension " + std::to_string(dim));
    }
  }
  const size_t expected = static_cast<size_t>(ElementCount(dim_vector)) * ByteWidth(type);
  if (size_bytes != expected) {
    std::string shape;
    for (size_t i = 0; i < dim_vector.size(); ++i) {
      shape += (i ? "x" : "") + std::to_string(dim_vector[i]);
    }
    throw PjrtError(PJRT_Error_Code_INVALID_ARGUMENT,
                    "host-to-device copy of " + std::to_string(size_bytes) + " bytes into a " +
                        ElementTypeName(type) + "[" + shape + "] buffer that needs " +
                        std::to_string(expected) + " bytes");
  }
  PJRT_Client_BufferFromHostBuffer_Args args{};
  args.struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE;
  args.client = client_;
  args.data = data;
  args.type = type;
  args.dims = dim_vector.data();
  args.num_dims = dim_vector.size();
  args.host_buffer_semantics = wait_for_host_copy
                                   ? PJRT_HostBufferSemantics_kImmutableOnlyDuringCall
                                   : PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
  args.device = device.handle;
  ThrowIfError(api(), api()->PJRT_Client_BufferFromHostBuffer(&args),
               "PJRT_Client_BufferFromHostBuffer");
  HostToDeviceTransfer transfer{PjrtBuffer(shared_from_this(), args.buffer),
                                PjrtEvent(plugin_, args.done_with_host_buffer)};
  if (wait_for_host_copy) transfer.host_buffer_released.Await();
  return transfer;
}

PjrtBuffer PjrtClient::ViewOfHostMemory(void* data, PJRT_Buffer_Type type,
                                        std::span<const int64_t> dims, const PjrtDevice& device,
                                        std::function<void()> release) const {
  if (!device_memory_is_host_memory()) {
    throw PjrtError(PJRT_Error_Code_UNIMPLEMENTED,
                    "the " + platform_name_ + " plugin's device memory is not host memory");
  }
  TORCH_TPU_REQUIRE_PJRT_FUNCTION(*plugin_, PJRT_Client_CreateViewOfDeviceBuffer);
  // The C callback owns `release` from a successful call on; before that, this frame does.
  auto owned = std::make_unique<std::function<void()>>(std::move(release));
  PJRT_Client_CreateViewOfDeviceBuffer_Args args{};
  args.struct_size = PJRT_Client_CreateViewOfDeviceBuffer_Args_STRUCT_SIZE;
  args.client = client_;
  args.device_buffer_ptr = data;
  args.dims = dims.data();
  args.num_dims = dims.size();
  args.element_type = type;
  args.device = device.handle;
  args.on_delete_callback = [](void*, void* argument) {
    std::unique_ptr<std::function<void()>> callback(static_cast<std::function<void()>*>(argument));
    (*callback)();
  };
  args.on_delete_callback_arg = owned.get();
  ThrowIfError(api(), api()->PJRT_Client_CreateViewOfDeviceBuffer(&args),
               "PJRT_Client_CreateViewOfDeviceBuffer");
  owned.release();
  return PjrtBuffer(shared_from_this(), args.buffer);
}

PjrtBuffer PjrtClient::FailedBuffer(PJRT_Buffer_Type type, std::span<const int64_t> dims,
                                    const PjrtDevice& device, const std::string& message) const {
  TORCH_TPU_REQUIRE_PJRT_FUNCTION(*plugin_, PJRT_Client_CreateBuffersForAsyncHostToDevice);
  TORCH_TPU_REQUIRE_PJRT_FUNCTION(*plugin_, PJRT_AsyncHostToDeviceTransferManager_SetBufferError);
  PJRT_Device_DefaultMemory_Args memory_args{};
  memory_args.struct_size = PJRT_Device_DefaultMemory_Args_STRUCT_SIZE;
  memory_args.device = device.handle;
  ThrowIfError(api(), api()->PJRT_Device_DefaultMemory(&memory_args), "PJRT_Device_DefaultMemory");

  std::vector<int64_t> dim_vector(dims.begin(), dims.end());
  PJRT_ShapeSpec shape{};
  shape.struct_size = PJRT_ShapeSpec_STRUCT_SIZE;
  shape.dims = dim_vector.data();
  shape.num_dims = dim_vector.size();
  shape.element_type = type;
  PJRT_Client_CreateBuffersForAsyncHostToDevice_Args create_args{};
  create_args.struct_size = PJRT_Client_CreateBuffersForAsyncHostToDevice_Args_STRUCT_SIZE;
  create_args.client = client_;
  create_args.shape_specs = &shape;
  create_args.num_shape_specs = 1;
  create_args.memory = memory_args.memory;
  ThrowIfError(api(), api()->PJRT_Client_CreateBuffersForAsyncHostToDevice(&create_args),
               "PJRT_Client_CreateBuffersForAsyncHostToDevice");
  PJRT_AsyncHostToDeviceTransferManager* manager = create_args.transfer_manager;
  auto destroy_manager = [&] {
    PJRT_AsyncHostToDeviceTransferManager_Destroy_Args args{};
    args.struct_size = PJRT_AsyncHostToDeviceTransferManager_Destroy_Args_STRUCT_SIZE;
    args.transfer_manager = manager;
    ConsumeError(api(), api()->PJRT_AsyncHostToDeviceTransferManager_Destroy(&args));
  };
  try {
    PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args retrieve_args{};
    retrieve_args.struct_size =
        PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args_STRUCT_SIZE;
    retrieve_args.transfer_manager = manager;
    retrieve_args.buffer_index = 0;
    ThrowIfError(api(), api()->PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer(&retrieve_args),
                 "PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer");
    PjrtBuffer buffer(shared_from_this(), retrieve_args.buffer_out);
    PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args error_args{};
    error_args.struct_size = PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args_STRUCT_SIZE;
    error_args.transfer_manager = manager;
    error_args.buffer_index = 0;
    error_args.error_code = PJRT_Error_Code_INTERNAL;
    error_args.error_message = message.data();
    error_args.error_message_size = message.size();
    ThrowIfError(api(), api()->PJRT_AsyncHostToDeviceTransferManager_SetBufferError(&error_args),
                 "PJRT_AsyncHostToDeviceTransferManager_SetBufferError");
    destroy_manager();
    return buffer;
  } catch (...) {
    destroy_manager();
    throw;
  }
}

std::shared_ptr<PjrtLoadedExecutable> PjrtClient::Compile(std::string_view mlir_module,
                                                          std::string_view compile_options) const {
  std::string code(mlir_module);  // PJRT_Program.code is a non-const char*
  PJRT_Program program = MlirProgram(code);
  PJRT_Client_Compile_Args args{};
  args.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE;
  args.client = client_;
  args.program = &program;
  args.compile_options = compile_options.data();
  args.compile_options_size = compile_options.size();
  ThrowIfError(api(), api()->PJRT_Client_Compile(&args), "compiling StableHLO");
  return std::make_shared<PjrtLoadedExecutable>(shared_from_this(), args.executable);
}

std::shared_ptr<PjrtLoadedExecutable> PjrtClient::DeserializeAndLoad(
    std::string_view serialized) const {
  PJRT_Executable_DeserializeAndLoad_Args args{};
  args.struct_size = PJRT_Executable_DeserializeAndLoad_Args_STRUCT_SIZE;
  args.client = client_;
  args.serialized_executable = serialized.data();
  args.serialized_executable_size = serialized.size();
  ThrowIfError(api(), api()->PJRT_Executable_DeserializeAndLoad(&args),
               "PJRT_Executable_DeserializeAndLoad");
  return std::make_shared<PjrtLoadedExecutable>(shared_from_this(), args.loaded_executable);
}

}  // namespace torch_tpu::pjrt

#include "device_description.h"

#include <cstddef>

#include "error.h"

namespace torch_tpu::pjrt {
PJRT_DeviceDescription* DeviceDescriptionOf(const PJRT_Api* api, PJRT_Device* device) {
  PJRT_Device_GetDescription_Args args{};
  args.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE;
  args.device = device;
  ThrowIfError(api, api->PJRT_Device_GetDescription(&args), "PJRT_Device_GetDescription");
  return args.device_description;
}

namespace {

AttributeValue ValueOf(const PJRT_NamedValue& value) {
  switch (value.type) {
    case PJRT_NamedValue_kString:
      return std::string(value.string_value, value.value_size);
    case PJRT_NamedValue_kInt64:
      return value.int64_value;
    case PJRT_NamedValue_kInt64List:
      return std::vector<int64_t>(value.int64_array_value,
                                  value.int64_array_value + value.value_size);
    case PJRT_NamedValue_kFloat:
      return static_cast<double>(value.float_value);
    case PJRT_NamedValue_kBool:
      return value.bool_value;
  }
  return std::string();
}

std::string MemoryKind(const PJRT_Api* api, PJRT_Memory* memory) {
  PJRT_Memory_Kind_Args args{};
  args.struct_size = PJRT_Memory_Kind_Args_STRUCT_SIZE;
  args.memory = memory;
  ThrowIfError(api, api->PJRT_Memory_Kind(&args), "PJRT_Memory_Kind");
  return std::string(args.kind, args.kind_size);
}

}  // namespace

std::map<std::string, AttributeValue> DeviceAttributes(const PjrtPlugin& plugin,
                                                       PJRT_Device* device) {
  std::map<std::string, AttributeValue> result;
  const PJRT_Api* api = plugin.api();
  if (!plugin.HasFunction(offsetof(PJRT_Api, PJRT_DeviceDescription_Attributes))) return result;
  PJRT_DeviceDescription_Attributes_Args args{};
  args.struct_size = PJRT_DeviceDescription_Attributes_Args_STRUCT_SIZE;
  args.device_description = DeviceDescriptionOf(api, device);
  ThrowIfError(api, api->PJRT_DeviceDescription_Attributes(&args),
               "PJRT_DeviceDescription_Attributes");
  for (size_t i = 0; i < args.num_attributes; ++i) {
    const PJRT_NamedValue& value = args.attributes[i];
    result.emplace(std::string(value.name, value.name_size), ValueOf(value));
  }
  return result;
}

std::map<std::string, int64_t> DeviceMemoryStats(const PjrtPlugin& plugin, PJRT_Device* device) {
  std::map<std::string, int64_t> result;
  const PJRT_Api* api = plugin.api();
  if (!plugin.HasFunction(offsetof(PJRT_Api, PJRT_Device_MemoryStats))) return result;
  PJRT_Device_MemoryStats_Args args{};
  args.struct_size = PJRT_Device_MemoryStats_Args_STRUCT_SIZE;
  args.device = device;
  // Plugins without statistics answer UNIMPLEMENTED (the CPU plugin): nothing to report.
  if (!ConsumeError(api, api->PJRT_Device_MemoryStats(&args)).empty()) return result;
  result["bytes_in_use"] = args.bytes_in_use;
  auto add = [&](const char* name, int64_t value, bool is_set) {
    if (is_set) result[name] = value;
  };
  add("peak_bytes_in_use", args.peak_bytes_in_use, args.peak_bytes_in_use_is_set);
  add("num_allocs", args.num_allocs, args.num_allocs_is_set);
  add("largest_alloc_size", args.largest_alloc_size, args.largest_alloc_size_is_set);
  add("bytes_limit", args.bytes_limit, args.bytes_limit_is_set);
  add("bytes_reserved", args.bytes_reserved, args.bytes_reserved_is_set);
  add("peak_bytes_reserved", args.peak_bytes_reserved, args.peak_bytes_reserved_is_set);
  add("bytes_reservable_limit", args.bytes_reservable_limit, args.bytes_reservable_limit_is_set);
  add("largest_free_block_bytes", args.largest_free_block_bytes,
      args.largest_free_block_bytes_is_set);
  add("pool_bytes", args.pool_bytes, args.pool_bytes_is_set);
  add("peak_pool_bytes", args.peak_pool_bytes, args.peak_pool_bytes_is_set);
  return result;
}

std::vector<std::string> DeviceMemoryKinds(const PjrtPlugin& plugin, PJRT_Device* device) {
  std::vector<std::string> kinds;
  const PJRT_Api* api = plugin.api();
  if (!plugin.HasFunction(offsetof(PJRT_Api, PJRT_Device_AddressableMemories)) ||
      !plugin.HasFunction(offsetof(PJRT_Api, PJRT_Memory_Kind))) {
    return kinds;
  }
  std::string default_kind;
  if (plugin.HasFunction(offsetof(PJRT_Api, PJRT_Device_DefaultMemory))) {
    PJRT_Device_DefaultMemory_Args args{};
    args.struct_size = PJRT_Device_DefaultMemory_Args_STRUCT_SIZE;
    args.device = device;
    if (ConsumeError(api, api->PJRT_Device_DefaultMemory(&args)).empty() && args.memory) {
      default_kind = MemoryKind(api, args.memory);
      kinds.push_back(default_kind);
    }
  }
  PJRT_Device_AddressableMemories_Args args{};
  args.struct_size = PJRT_Device_AddressableMemories_Args_STRUCT_SIZE;
  args.device = device;
  ThrowIfError(api, api->PJRT_Device_AddressableMemories(&args),
               "PJRT_Device_AddressableMemories");
  for (size_t i = 0; i < args.num_memories; ++i) {
    std::string kind = MemoryKind(api, args.memories[i]);
    if (kind != default_kind) kinds.push_back(std::move(kind));
  }
  return kinds;
}

}  // namespace torch_tpu::pjrt

// What a plugin says about one of its devices beyond id and kind: the description's attributes
// (libtpu: "coords", "core_on_chip"...; the CUDA plugin: "compute_capability"...), the memory
// statistics of PJRT_Device_MemoryStats and the kinds of memory the device addresses. Used for
// torch.tpu.get_device_properties.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "pjrt_c_api.h"
#include "plugin.h"

namespace torch_tpu::pjrt {

// The description of `device` (owned by the client, as the device).
PJRT_DeviceDescription* DeviceDescriptionOf(const PJRT_Api* api, PJRT_Device* device);

using AttributeValue = std::variant<std::string, int64_t, std::vector<int64_t>, double, bool>;

// PJRT_DeviceDescription_Attributes of `device`; empty for plugins without the call.
std::map<std::string, AttributeValue> DeviceAttributes(const PjrtPlugin& plugin,
                                                       PJRT_Device* device);

// The statistics PJRT_Device_MemoryStats sets, by their field names ("bytes_in_use",
// "peak_bytes_in_use", "num_allocs", "largest_alloc_size", "bytes_limit", "bytes_reserved",
// "peak_bytes_reserved", "bytes_reservable_limit", "largest_free_block_bytes", "pool_bytes",
// "peak_pool_bytes"); empty when the plugin does not implement the call (the CPU plugin).
std::map<std::string, int64_t> DeviceMemoryStats(const PjrtPlugin& plugin, PJRT_Device* device);

// The kinds of the memories the device addresses ("device", "pinned_host"...), its default one
// first; empty for plugins without memory spaces.
std::vector<std::string> DeviceMemoryKinds(const PjrtPlugin& plugin, PJRT_Device* device);

}  // namespace torch_tpu::pjrt

// Loading a PJRT plugin shared library and checking that its C API is one we can talk to.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>

#include "pjrt_c_api.h"

namespace torch_tpu::pjrt {

class PjrtPlugin {
 public:
  // Loads the plugin at `path` (once per process; later calls return the same plugin), checks its
  // API version against the header we compiled with and runs PJRT_Plugin_Initialize. Throws
  // PjrtError naming the path when the file is missing, is not a plugin, or is incompatible.
  static std::shared_ptr<PjrtPlugin> Load(const std::string& path);

  const PJRT_Api* api() const { return api_; }
  const std::string& path() const { return path_; }
  int api_major_version() const { return api_->pjrt_api_version.major_version; }
  int api_minor_version() const { return api_->pjrt_api_version.minor_version; }

  // Plugin attributes (e.g. "xla_version", "stablehlo_current_version") rendered as strings.
  std::map<std::string, std::string> Attributes() const;

  // Whether the plugin's PJRT_Api struct is long enough to hold the function at `field_offset`
  // (older plugins have shorter structs) and the pointer is set.
  bool HasFunction(size_t field_offset) const;

  PjrtPlugin(const PjrtPlugin&) = delete;
  PjrtPlugin& operator=(const PjrtPlugin&) = delete;

 private:
  PjrtPlugin(std::string path, void* handle, const PJRT_Api* api);

  std::string path_;
  // Never dlclose'd: plugins start threads and register static state that outlive any unload.
  void* handle_;
  const PJRT_Api* api_;
};

// Throws PjrtError(UNIMPLEMENTED) when the plugin lacks `function` (a PJRT_Api member name).
#define TORCH_TPU_REQUIRE_PJRT_FUNCTION(plugin, function)                                  \
  ::torch_tpu::pjrt::RequireFunction((plugin), offsetof(PJRT_Api, function), #function)

void RequireFunction(const PjrtPlugin& plugin, size_t field_offset, const char* name);

}  // namespace torch_tpu::pjrt

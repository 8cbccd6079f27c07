#include "plugin.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstring>
#include <mutex>
#include <sstream>

#include "error.h"

namespace torch_tpu::pjrt {
namespace {

std::string NamedValueToString(const PJRT_NamedValue& value) {
  switch (value.type) {
    case PJRT_NamedValue_kString:
      return std::string(value.string_value, value.value_size);
    case PJRT_NamedValue_kInt64:
      return std::to_string(value.int64_value);
    case PJRT_NamedValue_kInt64List: {
      std::ostringstream out;
      out << "[";
      for (size_t i = 0; i < value.value_size; ++i) {
        out << (i ? ", " : "") << value.int64_array_value[i];
      }
      out << "]";
      return out.str();
    }
    case PJRT_NamedValue_kFloat:
      return std::to_string(value.float_value);
    case PJRT_NamedValue_kBool:
      return value.bool_value ? "true" : "false";
  }
  return "?";
}

}  // namespace

PjrtPlugin::PjrtPlugin(std::string path, void* handle, const PJRT_Api* api)
    : path_(std::move(path)), handle_(handle), api_(api) {}

std::shared_ptr<PjrtPlugin> PjrtPlugin::Load(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<PjrtPlugin>> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = loaded.find(path); it != loaded.end()) return it->second;

  struct stat file_status{};
  if (::stat(path.c_str(), &file_status) != 0) {
    throw PjrtError(PJRT_Error_Code_NOT_FOUND, "PJRT plugin file not found: " + path);
  }
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* reason = ::dlerror();
    throw PjrtError(PJRT_Error_Code_INVALID_ARGUMENT,
                    "cannot load PJRT plugin " + path + ": " + (reason ? reason : "dlopen failed"));
  }
  using GetPjrtApiFunction = const PJRT_Api* (*)();
  auto get_api = reinterpret_cast<GetPjrtApiFunction>(::dlsym(handle, "GetPjrtApi"));
  if (get_api == nullptr) {
    throw PjrtError(PJRT_Error_Code_INVALID_ARGUMENT,
                    "not a PJRT plugin (no GetPjrtApi symbol): " + path);
  }
  const PJRT_Api* api = get_api();
  if (api == nullptr) {
    throw PjrtError(PJRT_Error_Code_INTERNAL, "GetPjrtApi returned null in " + path);
  }
  const int major = api->pjrt_api_version.major_version;
  const int minor = api->pjrt_api_version.minor_version;
  // Structs are append-only within a major version, so any minor version works as long as we
  // check struct sizes before touching newer fields; a different major version may have moved them.
  if (major != PJRT_API_MAJOR) {
    std::ostringstream message;
    message << "PJRT plugin " << path << " implements C API version " << major << "." << minor
            << ", but torch_tpu was built against " << PJRT_API_MAJOR << "." << PJRT_API_MINOR
            << "; the major versions must match";
    throw PjrtError(PJRT_Error_Code_FAILED_PRECONDITION, message.str());
  }
  auto plugin = std::shared_ptr<PjrtPlugin>(new PjrtPlugin(path, handle, api));
  if (plugin->HasFunction(offsetof(PJRT_Api, PJRT_Plugin_Initialize))) {
    PJRT_Plugin_Initialize_Args args{};
    args.struct_size = PJRT_Plugin_Initialize_Args_STRUCT_SIZE;
    ThrowIfError(api, api->PJRT_Plugin_Initialize(&args), "PJRT_Plugin_Initialize(" + path + ")");
  }
  loaded.emplace(path, plugin);
  return plugin;
}

bool PjrtPlugin::HasFunction(size_t field_offset) const {
  if (field_offset + sizeof(void*) > api_->struct_size) return false;
  void* pointer = nullptr;
  std::memcpy(&pointer, reinterpret_cast<const char*>(api_) + field_offset, sizeof(void*));
  return pointer != nullptr;
}

void RequireFunction(const PjrtPlugin& plugin, size_t field_offset, const char* name) {
  if (!plugin.HasFunction(field_offset)) {
    throw PjrtError(PJRT_Error_Code_UNIMPLEMENTED,
                    std::string("the PJRT plugin ") + plugin.path() + " does not implement " + name);
  }
}

std::map<std::string, std::string> PjrtPlugin::Attributes() const {
  std::map<std::string, std::string> result;
  if (!HasFunction(offsetof(PJRT_Api, PJRT_Plugin_Attributes))) return result;
  PJRT_Plugin_Attributes_Args args{};
  args.struct_size = PJRT_Plugin_Attributes_Args_STRUCT_SIZE;
  ThrowIfError(api_, api_->PJRT_Plugin_Attributes(&args), "PJRT_Plugin_Attributes");
  for (size_t i = 0; i < args.num_attributes; ++i) {
    const PJRT_NamedValue& value = args.attributes[i];
    result.emplace(std::string(value.name, value.name_size), NamedValueToString(value));
  }
  return result;
}

}  // namespace torch_tpu::pjrt

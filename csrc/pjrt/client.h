// PjrtClient: owns a PJRT_Client; creates buffers from host memory and compiles programs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "buffer.h"
#include "event.h"
#include "key_value_store.h"
#include "pjrt_c_api.h"
#include "plugin.h"

namespace torch_tpu::pjrt {

class PjrtLoadedExecutable;

// A device as seen at client creation. The handle is owned by the client and lives as long as it.
struct PjrtDevice {
  PJRT_Device* handle = nullptr;
  int id = 0;
  int local_hardware_id = -1;
  std::string kind;
  std::string debug_string;
};

// A device of a (possibly multi-process) client's topology, addressable from this process or not.
struct PjrtGlobalDevice {
  int id = 0;
  int process_index = 0;
  std::string kind;
};

struct CreateOption {
  std::string name;
  std::variant<int64_t, std::string, bool> value;
};

// The C API's view of `options`: the result borrows their strings, so it must not outlive them.
std::vector<PJRT_NamedValue> ToNamedValues(const std::vector<CreateOption>& options);

// A StableHLO/MHLO program (MLIR text or bytecode) for the compile calls; it borrows `code`,
// which is non-const because PJRT_Program.code is.
PJRT_Program MlirProgram(std::string& code);

// A host->device transfer in flight: the buffer (usable at once as an execution input) and the
// event after which the host memory may be reused.
struct HostToDeviceTransfer {
  PjrtBuffer buffer;
  PjrtEvent host_buffer_released;
};

class PjrtClient : public std::enable_shared_from_this<PjrtClient> {
 public:
  static std::shared_ptr<PjrtClient> Create(std::shared_ptr<const PjrtPlugin> plugin,
                                            const std::vector<CreateOption>& options);
  // A client spanning `multi_process.num_nodes` processes (this one is `node_id`), which find
  // each other through `multi_process.store`; creation waits for all of them. Plugins without
  // multi-process support (the XLA CPU plugin) ignore the store and give a one-process client,
  // which callers see as process_count() == 1.
  static std::shared_ptr<PjrtClient> Create(std::shared_ptr<const PjrtPlugin> plugin,
                                            std::vector<CreateOption> options,
                                            const MultiProcessOptions& multi_process);
  ~PjrtClient();
  PjrtClient(const PjrtClient&) = delete;
  PjrtClient& operator=(const PjrtClient&) = delete;

  const PJRT_Api* api() const { return plugin_->api(); }
  const std::shared_ptr<const PjrtPlugin>& plugin() const { return plugin_; }
  PJRT_Client* get() const { return client_; }
  const std::string& platform_name() const { return platform_name_; }
  const std::string& platform_version() const { return platform_version_; }
  const std::vector<PjrtDevice>& addressable_devices() const { return devices_; }
  // Every device of the topology, in the client's order, and this process's index in it.
  const std::vector<PjrtGlobalDevice>& global_devices() const { return global_devices_; }
  int process_index() const { return process_index_; }
  // Processes owning the topology's devices (1 unless created multi-process by a plugin that
  // supports it).
  int process_count() const;
  const PjrtDevice& device(size_t index) const;
  // Whether the plugin's device buffers are ordinary memory of this process (the XLA CPU plugin),
  // so the host can read them in place and lend them memory (ViewOfHostMemory).
  bool device_memory_is_host_memory() const { return platform_name_ == "cpu"; }

  // Copies `data` (dense row-major, exactly ElementCount(dims) * ByteWidth(type) bytes, checked)
  // to `device`. With `wait_for_host_copy` false the host memory must stay valid until
  // `host_buffer_released` completes; with true the data is copied before returning.
  HostToDeviceTransfer BufferFromHost(const void* data, size_t size_bytes, PJRT_Buffer_Type type,
                                      std::span<const int64_t> dims, const PjrtDevice& device,
                                      bool wait_for_host_copy = true) const;

  // A buffer over host memory the caller lends without a copy (`data`: dense row-major, aligned as
  // the plugin requires), on plugins whose device memory is host memory; `release` runs once the
  // plugin no longer uses the memory (the buffer and every execution reading it are gone).
  PjrtBuffer ViewOfHostMemory(void* data, PJRT_Buffer_Type type, std::span<const int64_t> dims,
                              const PjrtDevice& device, std::function<void()> release) const;

  // A buffer whose contents failed to arrive: every computation that consumes it fails with
  // `message`, asynchronously, the way a failed transfer or kernel propagates. Used to exercise
  // error propagation; throws UNIMPLEMENTED when the plugin lacks async transfer managers.
  PjrtBuffer FailedBuffer(PJRT_Buffer_Type type, std::span<const int64_t> dims,
                          const PjrtDevice& device, const std::string& message) const;

  // Compiles a StableHLO/MHLO module given as MLIR text or bytecode. Throws PjrtError carrying the
  // compiler's diagnostic when the program is rejected.
  std::shared_ptr<PjrtLoadedExecutable> Compile(std::string_view mlir_module,
                                                std::string_view compile_options) const;
  // Loads an executable produced by PjrtLoadedExecutable::Serialize on the same plugin version.
  std::shared_ptr<PjrtLoadedExecutable> DeserializeAndLoad(std::string_view serialized) const;

 private:
  // Both Create overloads: `multi_process` null for a one-process client.
  static std::shared_ptr<PjrtClient> CreateClient(std::shared_ptr<const PjrtPlugin> plugin,
                                                  const std::vector<CreateOption>& options,
                                                  const MultiProcessOptions* multi_process);
  PjrtClient(std::shared_ptr<const PjrtPlugin> plugin, PJRT_Client* client,
             std::shared_ptr<KeyValueStore> store);
  std::shared_ptr<const PjrtPlugin> plugin_;
  // Kept alive as long as the client: the plugin may call the store's callbacks at any time.
  std::shared_ptr<KeyValueStore> store_;
  PJRT_Client* client_;
  std::string platform_name_;
  std::string platform_version_;
  std::vector<PjrtDevice> devices_;
  std::vector<PjrtGlobalDevice> global_devices_;
  int process_index_ = 0;
};

}  // namespace torch_tpu::pjrt

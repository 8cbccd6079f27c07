// PjrtLoadedExecutable: owns a compiled program loaded on the client's devices.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "buffer.h"
#include "client.h"
#include "compiled_memory.h"
#include "event.h"

namespace torch_tpu::pjrt {

struct ExecutionResult {
  std::vector<PjrtBuffer> outputs;
  PjrtEvent done;  // ready when the device finished (or failed) this execution
};

class PjrtLoadedExecutable {
 public:
  PjrtLoadedExecutable(std::shared_ptr<const PjrtClient> client, PJRT_LoadedExecutable* executable);
  ~PjrtLoadedExecutable();
  PjrtLoadedExecutable(const PjrtLoadedExecutable&) = delete;
  PjrtLoadedExecutable& operator=(const PjrtLoadedExecutable&) = delete;

  size_t num_outputs() const { return num_outputs_; }
  const std::string& name() const { return name_; }
  // The compiler's memory accounting of this program (read once, at load); empty when the plugin
  // does not report it.
  const std::optional<CompiledMemoryStats>& memory_stats() const { return memory_stats_; }
  // Device memory a run holds beyond its arguments and outputs (0 when unknown).
  int64_t temporary_bytes() const { return memory_stats_ ? memory_stats_->temporaries : 0; }
  // True for the first caller only: lets the executor describe each program once.
  bool MarkFirstRun() const {
    // A load first: every launch asks, and only the first may write the shared flag.
    return !first_run_done_.load(std::memory_order_relaxed) &&
           !first_run_done_.exchange(true, std::memory_order_relaxed);
  }

  // Enqueues one execution on `device` (the client's first device when null) and returns at once;
  // output buffers may be passed to further executions before they are ready. Errors found while
  // enqueuing throw here; errors during the run surface through `done` and the outputs' events.
  // Arguments aliased with an output (see the module's input/output aliasing) are donated, their
  // buffers deleted and reused for that output, unless listed in `non_donatable`.
  ExecutionResult Execute(std::span<PJRT_Buffer* const> arguments,
                          const PjrtDevice* device = nullptr,
                          std::span<const int64_t> non_donatable = {}) const;
  ExecutionResult Execute(std::span<const PjrtBuffer* const> arguments,
                          const PjrtDevice* device = nullptr) const;

  // Enqueues the program on every device it was compiled for that this process can address
  // (a replicated program, see ReplicatedCompileOptions): `argument_lists[i]` are the arguments
  // for the i-th of assigned_devices(). Returns one result per such device.
  std::vector<ExecutionResult> ExecuteOnAssignedDevices(
      std::span<const std::vector<PJRT_Buffer*>> argument_lists) const;
  // This process's devices among those the program was compiled for, in execution order.
  std::vector<PJRT_Device*> assigned_devices() const;

  // Platform-specific bytes that PjrtClient::DeserializeAndLoad turns back into an executable.
  std::string Serialize() const;

  // Executables loaded in this process right now (created and not yet destroyed): what tests of
  // the caches' memory bounds count.
  static int64_t live_count();

 private:
  std::shared_ptr<const PjrtClient> client_;
  PJRT_LoadedExecutable* executable_;
  size_t num_outputs_ = 0;
  std::string name_;
  std::optional<CompiledMemoryStats> memory_stats_;
  mutable std::atomic<bool> first_run_done_{false};
};

// A DebugOptions field set for one compile (CompileOptionsProto.env_option_overrides), as the
// XLA_FLAGS flag of the same name would set it for every compile.
struct CompileOptionOverride {
  std::string name;  // "xla_backend_optimization_level"
  int64_t value;
};

// Serialized xla.CompileOptionsProto for a single-replica, single-partition program that is
// portable: not bound to a device at compile time, so one executable runs on any device given
// at execution. Hand-encoded
// because the plugin only accepts the protobuf wire format and we do not depend on protobuf; empty
// options are not an option (the CPU plugin aborts on zero replicas).
std::string SingleDeviceCompileOptions(std::span<const CompileOptionOverride> overrides = {});

// Serialized xla.CompileOptionsProto for a program of `device_ids.size()` replicas, replica i on
// the device whose global id is device_ids[i] (any process's): what cross-process collective
// programs are compiled with. Not portable: it runs on exactly those devices.
std::string ReplicatedCompileOptions(std::span<const int64_t> device_ids);

// The executable's name and output count (shared by loaded and unloaded executables).
void DescribeExecutable(const PJRT_Api* api, PJRT_Executable* executable, std::string& name,
                        size_t& num_outputs);

// The plugin's serialized form of an (unloaded or loaded) executable's program.
std::string SerializeExecutable(const PJRT_Api* api, PJRT_Executable* executable);

}  // namespace torch_tpu::pjrt

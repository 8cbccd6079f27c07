// The process-wide PJRT runtime: one plugin, one client, its devices. Configured from Python at
// import (plugin path resolved there, where packages are known), created on first use so that
// `import torch` stays cheap and a missing plugin only fails code that needs the device.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "pjrt/client.h"

namespace torch_tpu::runtime {

// How hard XLA works on a program. A quick compile (backend optimization level 0) costs about
// two thirds of an optimized one and runs slower: what a fused graph or a compiled graph gets
// first, before it has shown that it runs again (exec/tiered_compilation.h).
enum class CompileTier { kOptimized, kQuick };

struct RuntimeConfig {
  std::string plugin_path;       // empty when resolution failed
  std::string resolution_error;  // why there is no plugin path, shown on first use
  std::vector<pjrt::CreateOption> create_options;
};

class Runtime {
 public:
  // Replaces the configuration; only allowed before the client exists.
  static void Configure(RuntimeConfig config);
  // Makes the client, when it is created, one process of a multi-process client (tpu_dist's
  // group of every process does this), so that plugins with cross-process collectives (TPU, GPU)
  // can run them as device programs. Returns false, changing nothing, when the client already
  // exists or another call came first. Plugins without multi-process clients ignore it.
  static bool JoinProcesses(pjrt::MultiProcessOptions options);
  // The runtime, creating the client on first call. Throws std::runtime_error with the resolution
  // error or the plugin's message when the device cannot be brought up; that first failure is
  // kept, and later calls raise it again without retrying (until Configure or JoinProcesses
  // changes what to start).
  static Runtime& Get();
  // Why the device cannot be used (starting the runtime if it has not started): the startup
  // failure Get() raises, or why this forked process cannot use it; nullopt when it runs.
  // torch_tpu.plugin_error() returns it, so `torch.tpu.is_available() == False` has a reason.
  static std::optional<std::string> StartupError();
  static bool IsInitialized();
  // Whether code other than warm-start preloading (cache/preload.h) has used the runtime:
  // torch.tpu.is_initialized(), as torch.cuda's means "this process started using the device".
  // torch's DeviceMesh sets each rank's device only while it is false, and the preloader may
  // start the runtime at import, on its own thread, at a moment no user code chooses.
  static bool IsInUse();
  // Marks the calling thread as the preloader's: its Get() calls are not use.
  static void MarkPreloaderThread();
  // True in a process forked after the runtime started there; Get() then raises.
  static bool InBadFork();
  // Makes this (forked) process's InBadFork() true; for fork handlers of threads that may start
  // the runtime (cache/preload.h).
  static void MarkForkedChild();

  const pjrt::PjrtClient& client() const { return *client_; }
  const std::shared_ptr<pjrt::PjrtClient>& client_ptr() const { return client_; }
  const pjrt::PjrtPlugin& plugin() const { return *client_->plugin(); }
  size_t device_count() const { return client_->addressable_devices().size(); }
  const pjrt::PjrtDevice& device(size_t index) const { return client_->device(index); }
  const std::string& compile_options(CompileTier tier = CompileTier::kOptimized) const {
    return tier == CompileTier::kQuick ? quick_compile_options_ : compile_options_;
  }
  // Whether the plugin accepts the quick tier's options: a plugin that refuses the override
  // compiles everything optimized. Probed once, with a one-op program.
  bool SupportsQuickCompiles() const;

 private:
  explicit Runtime(std::shared_ptr<pjrt::PjrtClient> client);
  std::shared_ptr<pjrt::PjrtClient> client_;
  std::string compile_options_;
  std::string quick_compile_options_;
  mutable std::once_flag quick_probe_;
  mutable bool quick_supported_ = false;
};

}  // namespace torch_tpu::runtime

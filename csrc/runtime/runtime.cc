#include "runtime/runtime.h"

#include <pthread.h>

#include <array>
#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string_view>

#include "pjrt/executable.h"

namespace torch_tpu::runtime {
namespace {

std::mutex& RuntimeMutex() {
  static std::mutex mutex;
  return mutex;
}
RuntimeConfig& Config() {
  static RuntimeConfig config;
  return config;
}
// Never destroyed, nor is anything else holding PJRT objects (the executable and plan caches,
// scalar buffers, pending events): at exit, static destructors run in reverse order of
// construction, and these were constructed before the plugin was loaded, so they would reach
// the plugin after its own statics are gone, while detached compile and launch threads may
// still use it. The process's exit frees the device.
std::unique_ptr<Runtime>& Instance() {
  static auto* instance = new std::unique_ptr<Runtime>();
  return *instance;
}

// Set in a child forked after the runtime started: the plugin's threads (thread pools, the launch
// queue's worker) do not exist there, so using the device would hang rather than fail.
std::atomic<bool>& ForkedAfterStart() {
  static std::atomic<bool> forked{false};
  return forked;
}

// The message of the first failed start, raised again by every later Get(): loading the plugin
// again would fail the same way, and one reason keeps is_available() and errors consistent.
std::optional<std::string>& StartupFailure() {
  static auto* failure = new std::optional<std::string>();
  return *failure;
}

std::optional<pjrt::MultiProcessOptions>& MultiProcess() {
  static auto* options = new std::optional<pjrt::MultiProcessOptions>();
  return *options;
}

void MarkForkedAfterStart() { ForkedAfterStart().store(true, std::memory_order_relaxed); }

// The configured plugin's client; called with the runtime mutex held.
std::shared_ptr<pjrt::PjrtClient> CreateClient() {
  const RuntimeConfig& config = Config();
  if (config.plugin_path.empty()) {
    throw std::runtime_error(config.resolution_error.empty() ? "torch_tpu: no PJRT plugin configured"
                                                             : config.resolution_error);
  }
  auto plugin = pjrt::PjrtPlugin::Load(config.plugin_path);
  auto client = MultiProcess()
                    ? pjrt::PjrtClient::Create(plugin, config.create_options, *MultiProcess())
                    : pjrt::PjrtClient::Create(plugin, config.create_options);
  if (client->addressable_devices().empty()) {
    throw std::runtime_error("torch_tpu: the PJRT plugin " + config.plugin_path +
                             " reports no addressable devices");
  }
  return client;
}

}  // namespace

void Runtime::MarkForkedChild() { MarkForkedAfterStart(); }

bool Runtime::InBadFork() { return ForkedAfterStart().load(std::memory_order_relaxed); }

Runtime::Runtime(std::shared_ptr<pjrt::PjrtClient> client)
    : client_(std::move(client)),
      compile_options_(pjrt::SingleDeviceCompileOptions()),
      quick_compile_options_(pjrt::SingleDeviceCompileOptions(
          std::array{pjrt::CompileOptionOverride{"xla_backend_optimization_level", 0}})) {}

bool Runtime::SupportsQuickCompiles() const {
  std::call_once(quick_probe_, [this] {
    static constexpr std::string_view kProbe =
        "module {\n"
        "  func.func public @main(%arg0: tensor<f32>) -> tensor<f32> {\n"
        "    %0 = stablehlo.add %arg0, %arg0 : tensor<f32>\n"
        "    return %0 : tensor<f32>\n"
        "  }\n"
        "}\n";
    try {
      quick_supported_ = client_->Compile(kProbe, quick_compile_options_) != nullptr;
    } catch (const std::exception&) {
      quick_supported_ = false;
    }
  });
  return quick_supported_;
}

void Runtime::Configure(RuntimeConfig config) {
  std::lock_guard<std::mutex> lock(RuntimeMutex());
  if (Instance()) {
    throw std::runtime_error("torch_tpu: the PJRT runtime is already running on " +
                             Instance()->plugin().path() + "; configure it before first use");
  }
  Config() = std::move(config);
  StartupFailure().reset();
}

bool Runtime::JoinProcesses(pjrt::MultiProcessOptions options) {
  std::lock_guard<std::mutex> lock(RuntimeMutex());
  if (Instance() || MultiProcess()) return false;
  MultiProcess() = std::move(options);
  StartupFailure().reset();
  return true;
}

bool Runtime::IsInitialized() {
  std::lock_guard<std::mutex> lock(RuntimeMutex());
  return Instance() != nullptr;
}

namespace {
thread_local bool preloader_thread = false;
std::atomic<bool> used_outside_preloading{false};
}  // namespace

void Runtime::MarkPreloaderThread() { preloader_thread = true; }

bool Runtime::IsInUse() {
  return used_outside_preloading.load(std::memory_order_relaxed) && IsInitialized();
}

Runtime& Runtime::Get() {
  if (InBadFork()) {
    throw std::runtime_error(
        "torch_tpu: cannot use the tpu device in a forked subprocess: the parent had already "
        "started the PJRT runtime, whose threads do not survive fork(). Use the 'spawn' start "
        "method (multiprocessing.set_start_method('spawn'), or DataLoader(..., "
        "multiprocessing_context='spawn')) for child processes that use tpu.");
  }
  // The atomic first: once the device is in use (every op's call) this is one relaxed load, and
  // the thread-local (a __tls_get_addr call in a dlopen'ed module) is never read again.
  if (!used_outside_preloading.load(std::memory_order_relaxed) && !preloader_thread) {
    used_outside_preloading.store(true, std::memory_order_relaxed);
  }
  // Fast path without the lock: the instance is never reset once created.
  static std::atomic<Runtime*> ready{nullptr};
  if (Runtime* runtime = ready.load(std::memory_order_acquire)) return *runtime;
  std::lock_guard<std::mutex> lock(RuntimeMutex());
  if (!Instance()) {
    if (StartupFailure()) throw std::runtime_error(*StartupFailure());
    try {
      Instance().reset(new Runtime(CreateClient()));
    } catch (const std::exception& error) {
      StartupFailure() = error.what();
      throw;
    }
    pthread_atfork(nullptr, nullptr, &MarkForkedAfterStart);
  }
  ready.store(Instance().get(), std::memory_order_release);
  return *Instance();
}

std::optional<std::string> Runtime::StartupError() {
  try {
    Get();
  } catch (const std::exception& error) {
    return error.what();
  }
  return std::nullopt;
}

}  // namespace torch_tpu::runtime

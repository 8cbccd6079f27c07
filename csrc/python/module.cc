// The torch_tpu._C extension module: binds the runtime for the Python package.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include <map>

#include "aten/lowered_kernels.h"
#include "cache/executable_cache.h"
#include "cache/preload.h"
#include "exec/compile_pool.h"
#include "exec/deferred_graph.h"
#include "exec/eager.h"
#include "exec/launch_queue.h"
#include "exec/program_execution.h"
#include "exec/tiered_compilation.h"
#include "pjrt/error.h"
#include "pjrt/executable.h"
#include "python/aot_bindings.h"
#include "python/device_bindings.h"
#include "python/distributed_bindings.h"
#include "python/graph_program_bindings.h"
#include "python/jax_kernel_bindings.h"
#include "python/memory_bindings.h"
#include "python/profiler_bindings.h"
#include "runtime/device.h"
#include "runtime/element_types.h"
#include "runtime/fault_injection.h"
#include "runtime/generator.h"
#include "runtime/metrics.h"
#include "runtime/runtime.h"
#include "runtime/storage.h"

namespace py = pybind11;

namespace torch_tpu::python {
namespace {

void ConfigureRuntime(const std::string& plugin_path, const std::string& resolution_error,
                      const py::dict& create_options) {
  runtime::RuntimeConfig config;
  config.plugin_path = plugin_path;
  config.resolution_error = resolution_error;
  config.create_options = ToCreateOptions(create_options);
  runtime::Runtime::Configure(std::move(config));
}

py::dict RuntimeInfo() {
  const runtime::Runtime& device_runtime = runtime::Runtime::Get();
  const pjrt::PjrtPlugin& plugin = device_runtime.plugin();
  py::dict info;
  info["plugin_path"] = plugin.path();
  info["platform_name"] = device_runtime.client().platform_name();
  info["platform_version"] = device_runtime.client().platform_version();
  info["pjrt_api_version"] =
      std::to_string(plugin.api_major_version()) + "." + std::to_string(plugin.api_minor_version());
  info["device_count"] = device_runtime.device_count();
  py::list kinds;
  for (const auto& device : device_runtime.client().addressable_devices())
    kinds.append(device.kind);
  info["device_kinds"] = kinds;
  info["plugin_attributes"] = plugin.Attributes();
  return info;
}

py::dict MetricsDict() {
  {
    // Compiles and executions of queued launches count once they happened.
    py::gil_scoped_release release;
    exec::LaunchQueue::Get().Drain();
  }
  const runtime::Metrics& metrics = runtime::Metrics::Get();
  py::dict result;
  result["compile_count"] = metrics.compile_count.load();
  result["compile_seconds"] = static_cast<double>(metrics.compile_nanoseconds.load()) * 1e-9;
  result["quick_compiles"] = metrics.quick_compiles.load();
  result["tier_up_compiles"] = metrics.tier_up_compiles.load();
  result["tier_up_seconds"] = static_cast<double>(metrics.tier_up_nanoseconds.load()) * 1e-9;
  result["tiered_up_programs"] = metrics.tiered_up_programs.load();
  result["execute_count"] = metrics.execute_count.load();
  result["cache_hits_memory"] = metrics.cache_hits_memory.load();
  result["cache_hits_shared"] = metrics.cache_hits_shared.load();
  result["cache_hits_remote"] = metrics.cache_hits_remote.load();
  result["cache_misses"] = metrics.cache_misses.load();
  result["cache_corrupt_entries"] = metrics.cache_corrupt_entries.load();
  result["cache_preloaded"] = metrics.cache_preloaded.load();
  result["transfer_to_device_bytes"] = metrics.transfer_to_device_bytes.load();
  result["transfer_to_host_bytes"] = metrics.transfer_to_host_bytes.load();
  result["fallback_ops"] = metrics.fallback_ops();
  result["donated_buffers"] = metrics.donated_buffers.load();
  result["donated_bytes"] = metrics.donated_bytes.load();
  result["fused_graphs"] = metrics.fused_graphs.load();
  result["fused_ops"] = metrics.fused_ops.load();
  result["fused_programs"] = metrics.fused_programs.load();
  result["fused_bucketed_ops"] = metrics.fused_bucketed_ops.load();
  result["fused_replays"] = metrics.fused_replays.load();
  result["device_collectives"] = metrics.device_collectives.load();
  result["fuse_cuts"] = exec::DeferredGraph::Get().cut_reasons();
  for (const auto& [counter, reasons] : metrics.reasons()) result[py::str(counter)] = reasons;
  return result;
}

cache::Tier TierNamed(const std::string& name) {
  if (name == "memory") return cache::Tier::kMemory;
  if (name == "shared") return cache::Tier::kShared;
  if (name == "remote") return cache::Tier::kRemote;
  throw py::value_error("unknown cache tier '" + name +
                        "': expected 'memory', 'shared' or 'remote'");
}

py::dict CacheTierInfo(const std::string& name) {
  const cache::TierInfo info = cache::ExecutableCache::Get().Info(TierNamed(name));
  py::dict result;
  result["enabled"] = info.enabled;
  result["location"] = info.location.empty() ? py::none() : py::cast(info.location);
  result["entries"] = info.entries ? py::cast(*info.entries) : py::none();
  result["bytes"] = info.bytes ? py::cast(*info.bytes) : py::none();
  return result;
}

}  // namespace

PYBIND11_MODULE(_C, module) {
  module.doc() = "torch_tpu native extension";
  py::register_exception<pjrt::PjrtError>(module, "PjrtError", PyExc_RuntimeError);
  module.def("_configure_runtime", &ConfigureRuntime, py::arg("plugin_path"),
             py::arg("resolution_error"), py::arg("create_options"));
  module.def("_runtime_is_initialized", &runtime::Runtime::IsInitialized);
  module.def("_runtime_is_in_use", &runtime::Runtime::IsInUse);
  module.def("_start_preloading", &cache::StartPreloading, py::arg("name"));
  module.def("_finish_preloading", &cache::FinishPreloading, py::arg("store"),
             py::call_guard<py::gil_scoped_release>());
  module.def("_runtime_in_bad_fork", &runtime::Runtime::InBadFork);
  module.def("_runtime_info", &RuntimeInfo);
  // Wrapped so that the warning of a runtime that cannot start is a Python warning.
  module.def("_device_count", torch::wrap_pybind_function(&runtime::DeviceCount));
  module.def("_plugin_error", &runtime::Runtime::StartupError);
  module.def("_current_device", &runtime::CurrentDevice);
  module.def("_set_device", &runtime::SetCurrentDevice);
  module.def("_synchronize", [] {
    py::gil_scoped_release release;
    exec::SynchronizeAll();
  });
  module.def("_all_work_done", &exec::AllWorkDone);
  module.def("_set_launch_recording", &exec::SetLaunchRecording,
             py::call_guard<py::gil_scoped_release>());
  module.def("_recorded_launch_count", &exec::RecordedLaunchCount,
             py::call_guard<py::gil_scoped_release>());
  module.def("_replay_recorded_launches", &exec::ReplayRecordedLaunches,
             py::call_guard<py::gil_scoped_release>());
  // Defer-and-fuse replay on or off (TORCH_TPU_FUSE_REPLAY); the pending graph runs first.
  module.def("_set_fuse_replay", [](bool enabled) {
    py::gil_scoped_release release;
    exec::DeferredGraph::Get().Flush("mode_switch");
    exec::SetFuseReplay(enabled);
  });
  module.def("_fuse_replay_enabled", &exec::FuseReplayEnabled);
  module.def("_default_generator", [](int device) {
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(
        runtime::DefaultGenerator(static_cast<c10::DeviceIndex>(device))));
  });
  module.def("_metrics", &MetricsDict);
  module.def("_cache_tier_info", &CacheTierInfo);
  module.def("_clear_cache",
             [](const std::string& name) { cache::ExecutableCache::Get().Clear(TierNamed(name)); });
  // Counters with reasons counted in Python (torch_tpu._dynamo's graphs that run eagerly,
  // programs and padding of bucketed dynamic shapes).
  module.def(
      "_record_reason",
      [](const std::string& counter, const std::string& reason, int64_t amount) {
        runtime::Metrics::Get().RecordReason(counter, reason, amount);
      },
      py::arg("counter"), py::arg("reason"), py::arg("amount") = 1);
  module.def("_reset_metrics", [] {
    {
      // Queued launches' compiles count before the reset, not after it.
      py::gil_scoped_release release;
      exec::LaunchQueue::Get().Drain();
    }
    runtime::Metrics::Get().Reset();
    exec::DeferredGraph::Get().ResetCutReasons();
  });
  module.def("_set_eager_mode", [](const std::string& name) {
    static const std::map<std::string, exec::ExecutionMode> modes{
        {"strict", exec::ExecutionMode::kStrict},
        {"debug", exec::ExecutionMode::kDebug},
        {"defer_and_fuse", exec::ExecutionMode::kDeferAndFuse}};
    auto it = modes.find(name);
    TORCH_CHECK_VALUE(it != modes.end(), "unknown eager mode '", name,
                      "': expected 'strict', 'debug' or 'defer_and_fuse'");
    exec::SetExecutionMode(it->second);
  });
  module.def("_eager_mode", [] {
    switch (exec::CurrentExecutionMode()) {
      case exec::ExecutionMode::kDebug:
        return "debug";
      case exec::ExecutionMode::kDeferAndFuse:
        return "defer_and_fuse";
      default:
        return "strict";
    }
  });
  // Returns whether a pending graph ran (the exit hook waits for it and warns if it failed).
  module.def("_fuse_flush", [](const std::string& reason) {
    const bool pending = !exec::DeferredGraph::Get().empty();
    exec::DeferredGraph::Get().Flush(reason.c_str());
    return pending;
  });
  module.def("_debug_mode",
             [] { return exec::CurrentExecutionMode() == exec::ExecutionMode::kDebug; });
  module.def("_fail_storage", [](const at::Tensor& tensor, const std::string& message) {
    // Test hook: replaces the tensor's storage contents with a buffer whose producer failed, so
    // every computation reading it fails asynchronously, like a real device fault.
    runtime::StorageBuffer* storage = runtime::GetStorageBuffer(tensor);
    TORCH_CHECK(storage != nullptr && tensor.device().is_privateuseone(),
                "_fail_storage needs a non-empty tpu tensor");
    const runtime::Runtime& device_runtime = runtime::Runtime::Get();
    const auto type = stablehlo::ElementType::kU8;
    int64_t dims[] = {static_cast<int64_t>(storage->nbytes())};
    auto buffer = device_runtime.client().FailedBuffer(runtime::ToPjrtType(type), dims,
                                                       device_runtime.device(0), message);
    storage->set_contents({std::make_shared<pjrt::PjrtBuffer>(std::move(buffer)), type});
  });
  module.def("_inject_failures", [](const std::string& site, int64_t count) {
    const std::optional<runtime::FaultSite> named = runtime::FaultSiteNamed(site);
    TORCH_CHECK_VALUE(named.has_value(), "inject_failure: unknown site '", site,
                      "': expected 'compile', 'execute', 'transfer', 'store_read' or "
                      "'store_write'");
    TORCH_CHECK_VALUE(count >= 0, "inject_failure: count must be >= 0, got ", count);
    runtime::InjectFailures(*named, count);
  });
  module.def("_injected_failures_pending", [](const std::string& site) {
    const std::optional<runtime::FaultSite> named = runtime::FaultSiteNamed(site);
    TORCH_CHECK_VALUE(named.has_value(), "inject_failure: unknown site '", site, "'");
    return runtime::InjectedFailuresPending(*named);
  });
  module.def("_is_ready", [](const at::Tensor& tensor) {
    // Whether the tensor's device buffer has been computed (false while work is queued).
    runtime::StorageBuffer* storage = runtime::GetStorageBuffer(tensor);
    if (storage == nullptr) return true;
    const runtime::StorageContents contents = storage->contents();
    return !contents.initialized() || contents.buffer->ReadyEvent().IsReady();
  });
  module.def("_hold_compiles", &exec::HoldCompiles,
              "Test hook: background compiles wait while held (at most a minute each).");
  module.def("_inject_compile_failure", &exec::InjectCompileFailure,
             "Test hook: the next background compile fails with this message.");
  module.def("_wait_for_tier_ups", &exec::WaitForTierUps, py::call_guard<py::gil_scoped_release>(),
             "Test hook: waits for the optimized compiles started so far (tiered compilation).");
  module.def("_live_executables", &pjrt::PjrtLoadedExecutable::live_count,
             "Executables loaded in this process now (what the caches' memory bounds free).");
  module.def("_queued_launches", [] { return exec::LaunchQueue::Get().size(); },
             "Launches waiting for their compile (or behind one), without waiting for them.");
  module.def("_lowered_overload_names", &aten::LoweredOverloadNames);
  module.def("_unboxed_lowered_overload_names", &aten::UnboxedLoweredOverloadNames);
  BindGraphProgram(module);
  BindAot(module);
  BindDevice(module);
  BindMemory(module);
  BindJaxKernels(module);
  BindDistributed(module);
  BindProfiler(module);
  aten::RegisterLoweredKernels();
}

}  // namespace torch_tpu::python

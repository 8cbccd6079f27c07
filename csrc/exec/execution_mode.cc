// The process-wide eager mode (strict, debug, defer-and-fuse) and the settings read once.
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "exec/deferred_graph.h"
#include "exec/eager.h"

namespace torch_tpu::exec {

namespace {

bool EnvironmentFlag(const char* name) {
  const char* value = std::getenv(name);
  return value && std::strcmp(value, "1") == 0;
}

std::atomic<ExecutionMode>& ModeSetting() {
  // Debugging asks for blocking launches, so it wins over fusing when both are set.
  static std::atomic<ExecutionMode> mode{
      EnvironmentFlag("TORCH_TPU_LAUNCH_BLOCKING")  ? ExecutionMode::kDebug
      : EnvironmentFlag("TORCH_TPU_DEFER_AND_FUSE") ? ExecutionMode::kDeferAndFuse
                                                    : ExecutionMode::kStrict};
  return mode;
}

}  // namespace

ExecutionMode CurrentExecutionMode() { return ModeSetting().load(std::memory_order_relaxed); }

void SetExecutionMode(ExecutionMode mode) {
  const ExecutionMode previous = ModeSetting().exchange(mode);
  if (previous == ExecutionMode::kDeferAndFuse && mode != previous) {
    DeferredGraph::Get().Flush("mode_switch");
  }
}

bool DeviceChecksEnabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("TORCH_TPU_DEVICE_CHECKS");
    return !(value && std::strcmp(value, "0") == 0);
  }();
  return enabled;
}

}  // namespace torch_tpu::exec

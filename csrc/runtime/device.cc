#include "runtime/device.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <string>

#include "runtime/runtime.h"

namespace torch_tpu::runtime {
namespace {
thread_local int current_device = 0;
}

int CurrentDevice() { return current_device; }

void SetCurrentDevice(int device) {
  const int count = DeviceCountOrThrow();
  TORCH_CHECK(device >= 0 && device < count, "tpu: invalid device index ", device, " (there are ",
              count, " tpu device(s))");
  current_device = device;
}

int DeviceCount() {
  try {
    return static_cast<int>(runtime::Runtime::Get().device_count());
  } catch (const std::exception& error) {
    // As torch.cuda.is_available() warns why CUDA failed to initialize: the count alone would
    // hide a plugin that is missing or broken. A forked child's refusal is expected (DataLoader
    // workers ask), so only a failed start warns.
    static std::atomic<bool> warned{false};
    if (!Runtime::InBadFork() && !warned.exchange(true)) {
      // Verbatim: the reason is the user's setup, not a place in this file.
      c10::warn(c10::Warning(c10::UserWarning(), {__func__, __FILE__, __LINE__},
                             std::string("torch_tpu: the tpu device is unavailable "
                                         "(torch.tpu.is_available() is False, device_count() is "
                                         "0): ") +
                                 error.what() + " (torch_tpu.plugin_error() returns this reason)",
                             /*verbatim=*/true));
    }
    return 0;
  }
}

int DeviceCountOrThrow() {
  try {
    return static_cast<int>(runtime::Runtime::Get().device_count());
  } catch (const std::exception& error) {
    TORCH_CHECK(false, error.what());
  }
}

}  // namespace torch_tpu::runtime

#include "runtime/device.h"

#include <c10/util/Exception.h>

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
  } catch (const std::exception&) {
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

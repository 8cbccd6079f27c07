// Current tpu device of the calling thread and the number of devices.
#pragma once

namespace torch_tpu::runtime {

int CurrentDevice();
void SetCurrentDevice(int device);
// Devices of the PJRT client; 0 when the runtime cannot start (is_available() is then false),
// with one warning per process naming why (Runtime::StartupError()).
int DeviceCount();
// Starts the runtime if needed and rethrows its startup error.
int DeviceCountOrThrow();

// Makes `device` the calling thread's current device for its lifetime (allocations land there).
class DeviceScope {
 public:
  explicit DeviceScope(int device) : previous_(CurrentDevice()) {
    if (device >= 0 && device != previous_) SetCurrentDevice(device);
  }
  ~DeviceScope() {
    if (CurrentDevice() != previous_) SetCurrentDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_;
};

}  // namespace torch_tpu::runtime

// Current tpu device of the calling thread and the number of devices.
#pragma once

namespace torch_tpu::runtime {

int CurrentDevice();
void SetCurrentDevice(int device);
// Devices of the PJRT client; 0 when the runtime cannot start (is_available() is then false).
int DeviceCount();
// Starts the runtime if needed and rethrows its startup error.
int DeviceCountOrThrow();

}  // namespace torch_tpu::runtime

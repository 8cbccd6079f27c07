// What the runtime's c10 interfaces (device guard, hooks) need from the executors above them:
// waiting for launched work and resizing a storage's contents on the device. The executors
// (exec/) install these at load time, so dependencies keep pointing down: runtime never includes
// exec.
#pragma once

#include <cstddef>

#include "runtime/storage_buffer.h"

namespace torch_tpu::runtime {

struct DeviceWork {
  // Blocks until all launched work is done; throws the first asynchronous device error.
  void (*synchronize_all)() = nullptr;
  // Whether all launched work has finished (never blocks).
  bool (*all_work_done)() = nullptr;
  // Launches work recorded but not launched yet (DeferAndFuse's pending graph), so that every
  // live storage holds its buffer: memory statistics count buffers.
  void (*launch_recorded)() = nullptr;
  // The contents of a storage resized from `old_nbytes` to `new_nbytes` on `device`.
  StorageContents (*resize)(const StorageContents& old, size_t old_nbytes, size_t new_nbytes,
                            int device) = nullptr;
};

void InstallDeviceWork(const DeviceWork& work);
// The installed functions; throws when nothing was installed (a build without exec/).
const DeviceWork& GetDeviceWork();

}  // namespace torch_tpu::runtime

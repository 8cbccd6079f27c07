#include "runtime/device_work.h"

#include <c10/util/Exception.h>

namespace torch_tpu::runtime {
namespace {

DeviceWork& Installed() {
  static DeviceWork work;
  return work;
}

}  // namespace

void InstallDeviceWork(const DeviceWork& work) { Installed() = work; }

const DeviceWork& GetDeviceWork() {
  const DeviceWork& work = Installed();
  TORCH_INTERNAL_ASSERT(work.synchronize_all && work.all_work_done && work.resize,
                        "tpu runtime: the executors did not install their device work hooks");
  return work;
}

}  // namespace torch_tpu::runtime

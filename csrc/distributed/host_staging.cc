#include "distributed/host_staging.h"

#include <c10/core/DeviceGuard.h>

namespace torch_tpu::distributed {

at::Tensor HostStaging::Stage(const at::Tensor& tensor, bool read, bool write) {
  if (tensor.device().is_cpu()) return tensor;
  // Dense and contiguous: Gloo reads and writes raw memory of the whole tensor.
  at::Tensor host = at::empty(tensor.sizes(), tensor.options().device(at::kCPU));
  if (read) host.copy_(tensor);
  if (write) {
    written_device_.push_back(tensor);
    written_host_.push_back(host);
  }
  return host;
}

std::vector<at::Tensor> HostStaging::StageAll(const std::vector<at::Tensor>& tensors, bool read,
                                              bool write) {
  std::vector<at::Tensor> host;
  host.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors) host.push_back(Stage(tensor, read, write));
  return host;
}

void HostStaging::WriteBack() {
  for (size_t i = 0; i < written_device_.size(); ++i) {
    // This runs on the backend's completion thread, whose current device is not the caller's.
    c10::DeviceGuard guard(written_device_[i].device());
    written_device_[i].copy_(written_host_[i]);
  }
}

}  // namespace torch_tpu::distributed

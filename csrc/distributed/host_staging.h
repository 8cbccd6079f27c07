// Staging device tensors through host memory for a host transport (PyTorch's Gloo on the CPU
// plugin, whose PJRT C API has no cross-process collectives).
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace torch_tpu::distributed {

// The host side of a collective's tensors. Each device tensor is read into a dense CPU tensor at
// most once (device->host through the view machinery, so non-contiguous views are read as
// tensor.copy_ would), the host transport works on those in place, and the tensors the
// collective produces are written back once (host->device into the original view). CPU tensors
// are used as they are: nothing to stage.
class HostStaging {
 public:
  // The host tensor standing for `tensor`. `read`: the collective consumes its values (copied to
  // host now); `write`: it produces them (copied back by WriteBack). Host tensors the transport
  // requires dense are dense.
  at::Tensor Stage(const at::Tensor& tensor, bool read, bool write);
  std::vector<at::Tensor> StageAll(const std::vector<at::Tensor>& tensors, bool read, bool write);

  // Copies every written host tensor into its device tensor (asynchronous device work, ordered
  // by the storages' buffers like any other op).
  void WriteBack();

  // The host tensors that will be written back (for post-processing such as AVG's division).
  const std::vector<at::Tensor>& written_host() const { return written_host_; }

 private:
  std::vector<at::Tensor> written_device_;
  std::vector<at::Tensor> written_host_;
};

}  // namespace torch_tpu::distributed

// Staging device tensors through host memory for a host transport (PyTorch's Gloo on the CPU
// plugin, whose PJRT C API has no cross-process collectives).
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "pjrt/buffer.h"

namespace torch_tpu::distributed {

// The host side of a collective's tensors, with as few copies as the plugin allows.
//
// Where device buffers are host memory (the XLA CPU plugin) and a tensor is its whole storage,
// nothing goes through a transfer: inputs the transport only reads are the device buffer itself
// (Lend), private host tensors start as one memcpy of it, and results become the storage's next
// buffer in place (the plugin adopts the host tensor's memory). Other tensors (views, other
// plugins) are read into a dense CPU tensor through the view machinery, as copy_ does, and
// written back into the original view. Device values are read on the completion thread (Prepare),
// after their producers finish, so the caller never waits for the device. CPU tensors are used as
// they are.
class HostStaging {
 public:
  // A host tensor standing for `tensor` that the transport owns. `read`: it starts with the
  // tensor's values; `write`: its final values become the tensor's (WriteBack).
  at::Tensor Stage(const at::Tensor& tensor, bool read, bool write);
  std::vector<at::Tensor> StageAll(const std::vector<at::Tensor>& tensors, bool read, bool write);
  // Like StageAll(tensors, true, true) for a collective the caller waits for at once with nothing
  // queued before it: a tensor whose buffer nothing else holds or reads (all device work done,
  // the buffer final) is handed to the transport as the buffer itself, which the transport then
  // updates in place, with no copy at all.
  std::vector<at::Tensor> StageAllForUpdateInPlace(const std::vector<at::Tensor>& tensors);
  // A host tensor with `tensor`'s values for a transport that only reads it (never scribbles on
  // it): the device buffer itself where possible.
  at::Tensor Lend(const at::Tensor& tensor);
  std::vector<at::Tensor> LendAll(const std::vector<at::Tensor>& tensors);

  // Before the transport runs (on the completion thread): waits for the device values the host
  // tensors read and copies them where the host tensor is private. Throws the producer's error.
  void Prepare();
  // Makes every written host tensor its device tensor's values (asynchronous device work where a
  // copy is needed, ordered by the storages' buffers like any other op).
  void WriteBack();

  // The host tensors that will be written back (for post-processing such as AVG's division).
  const std::vector<at::Tensor>& written_host() const { return written_host_; }
  // The CPU tensors the transport writes as they are (nothing to write back, but post-processing
  // applies to them too).
  const std::vector<at::Tensor>& written_cpu() const { return written_cpu_; }

 private:
  at::Tensor StageInPlace(const at::Tensor& tensor, bool read, bool write, bool lend);
  // The device buffer of `tensor` as a host tensor for the transport to update, if nothing else
  // holds or reads it; undefined otherwise.
  at::Tensor DeviceBufferToUpdate(const at::Tensor& tensor);

  // A device buffer the host reads: in place (`copy` undefined) or into `copy`.
  struct DeviceRead {
    std::shared_ptr<pjrt::PjrtBuffer> buffer;
    at::Tensor copy;
  };
  std::vector<DeviceRead> device_reads_;
  std::vector<at::Tensor> written_device_;
  std::vector<at::Tensor> written_host_;
  std::vector<at::Tensor> written_cpu_;
  // How a written host tensor reaches its device tensor.
  enum class WriteBackKind : uint8_t {
    kCopy,     // copied into the device view
    kAdopt,    // the host tensor becomes the storage's buffer
    kUpdated,  // the host tensor is the storage's buffer, updated in place: nothing to do
  };
  std::vector<WriteBackKind> write_back_kinds_;
};

}  // namespace torch_tpu::distributed

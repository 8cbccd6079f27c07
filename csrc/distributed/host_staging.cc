#include "distributed/host_staging.h"

#include <c10/core/DeviceGuard.h>

#include <cstring>

#include "exec/storage_ops.h"
#include "lowering/dtype.h"
#include "runtime/device_work.h"
#include "runtime/storage.h"

namespace torch_tpu::distributed {
namespace {

// The storage whose one buffer holds exactly `tensor` (in order, in its own dtype) on a plugin
// whose buffers are host memory; nullptr when the tensor is a view or the plugin's are not.
runtime::StorageBuffer* WholeHostMemoryStorage(const at::Tensor& tensor) {
  if (!runtime::CoversWholeStorage(tensor)) return nullptr;
  runtime::StorageBuffer* storage = runtime::GetStorageBuffer(tensor);
  if (!exec::StoragesAreHostMemory(storage->device_index())) return nullptr;
  const auto type = lowering::ToElementType(tensor.scalar_type());
  if (!type) return nullptr;
  const runtime::StorageContents contents = storage->contents();
  return !contents.initialized() || contents.element_type == *type ? storage : nullptr;
}

}  // namespace

at::Tensor HostStaging::StageInPlace(const at::Tensor& tensor, bool read, bool write, bool lend) {
  runtime::StorageBuffer* storage = WholeHostMemoryStorage(tensor);
  if (storage == nullptr) return at::Tensor();
  const runtime::StorageContents contents = storage->contents();
  const auto host_options = tensor.options().device(at::kCPU);
  if (lend && contents.initialized()) {
    // The holder keeps the buffer alive and, being one more holder, undonatable while Gloo reads.
    std::shared_ptr<pjrt::PjrtBuffer> buffer = contents.buffer;
    device_reads_.push_back({buffer, at::Tensor()});
    return at::from_blob(buffer->HostAddress(), tensor.sizes(), [buffer](void*) {}, host_options);
  }
  at::Tensor host = at::empty(tensor.sizes(), host_options);
  if (read && contents.initialized()) {
    device_reads_.push_back({contents.buffer, host});
  } else if (read) {
    host.zero_();  // a storage never written reads as zeros
  }
  if (write) {
    written_device_.push_back(tensor);
    written_host_.push_back(host);
    write_back_kinds_.push_back(WriteBackKind::kAdopt);
  }
  return host;
}

at::Tensor HostStaging::Stage(const at::Tensor& tensor, bool read, bool write) {
  if (tensor.device().is_cpu()) {
    if (write) written_cpu_.push_back(tensor);
    return tensor;
  }
  at::Tensor in_place = StageInPlace(tensor, read, write, false);
  if (in_place.defined()) return in_place;
  // Dense and contiguous: Gloo reads and writes raw memory of the whole tensor.
  at::Tensor host = at::empty(tensor.sizes(), tensor.options().device(at::kCPU));
  if (read) host.copy_(tensor);
  if (write) {
    written_device_.push_back(tensor);
    written_host_.push_back(host);
    write_back_kinds_.push_back(WriteBackKind::kCopy);
  }
  return host;
}

at::Tensor HostStaging::Lend(const at::Tensor& tensor) {
  if (tensor.device().is_cpu()) return tensor;
  at::Tensor in_place = StageInPlace(tensor, true, false, true);
  return in_place.defined() ? in_place : Stage(tensor, true, false);
}

std::vector<at::Tensor> HostStaging::StageAll(const std::vector<at::Tensor>& tensors, bool read,
                                              bool write) {
  std::vector<at::Tensor> host;
  host.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors) host.push_back(Stage(tensor, read, write));
  return host;
}

at::Tensor HostStaging::DeviceBufferToUpdate(const at::Tensor& tensor) {
  runtime::StorageBuffer* storage =
      tensor.device().is_cpu() ? nullptr : WholeHostMemoryStorage(tensor);
  if (storage == nullptr || storage->deferred() != runtime::StorageBuffer::Deferred::kNone) {
    return at::Tensor();
  }
  const runtime::StorageContents contents = storage->contents();
  // Held by the storage and `contents` only; no program still reads it (every launched one is
  // done) and none can start before the caller's wait returns.
  if (!contents.initialized() || contents.buffer.use_count() != 2 ||
      !contents.buffer->ReadyEvent().IsReady() || !runtime::GetDeviceWork().all_work_done()) {
    return at::Tensor();
  }
  std::shared_ptr<pjrt::PjrtBuffer> buffer = contents.buffer;
  at::Tensor host = at::from_blob(
      buffer->HostAddress(), tensor.sizes(), [buffer](void*) {}, tensor.options().device(at::kCPU));
  written_device_.push_back(tensor);
  written_host_.push_back(host);
  write_back_kinds_.push_back(WriteBackKind::kUpdated);
  return host;
}

std::vector<at::Tensor> HostStaging::StageAllForUpdateInPlace(
    const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> host;
  host.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors) {
    at::Tensor updated = DeviceBufferToUpdate(tensor);
    host.push_back(updated.defined() ? updated : Stage(tensor, true, true));
  }
  return host;
}

std::vector<at::Tensor> HostStaging::LendAll(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> host;
  host.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors) host.push_back(Lend(tensor));
  return host;
}

void HostStaging::Prepare() {
  for (const DeviceRead& read : device_reads_) {
    read.buffer->ReadyEvent().Await();
    if (read.copy.defined()) {
      std::memcpy(read.copy.data_ptr(), read.buffer->HostAddress(), read.copy.nbytes());
    }
  }
  device_reads_.clear();  // lent host tensors keep their own buffers alive
}

void HostStaging::WriteBack() {
  for (size_t i = 0; i < written_device_.size(); ++i) {
    const at::Tensor& device = written_device_[i];
    if (write_back_kinds_[i] == WriteBackKind::kUpdated) continue;
    if (write_back_kinds_[i] == WriteBackKind::kAdopt) {
      runtime::StorageBuffer* storage = runtime::GetStorageBuffer(device);
      at::Tensor host = written_host_[i];
      storage->set_contents(exec::LendHostMemory(host.data_ptr(), storage->nbytes(),
                                                 *lowering::ToElementType(device.scalar_type()),
                                                 storage->device_index(), [host]() {}));
      continue;
    }
    // This runs on the backend's completion thread, whose current device is not the caller's.
    c10::DeviceGuard guard(device.device());
    device.copy_(written_host_[i]);
  }
}

}  // namespace torch_tpu::distributed

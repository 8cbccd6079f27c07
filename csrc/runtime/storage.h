// tpu storages: the allocator behind every tpu StorageImpl, access to a tensor's device buffer and
// the device memory statistics behind torch.tpu.memory_* and torch.accelerator.memory_*.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

#include <cstdint>
#include <map>
#include <string>

#include "runtime/storage_buffer.h"

namespace torch_tpu::runtime {

// The StorageBuffer of a tpu storage; nullptr for zero-byte storages.
runtime::StorageBuffer* GetStorageBuffer(const c10::Storage& storage);
inline runtime::StorageBuffer* GetStorageBuffer(const at::Tensor& tensor) {
  return GetStorageBuffer(tensor.storage());
}

// Whether `tensor` shows its whole storage in order, as stored: contiguous from offset 0 over all
// of the storage's bytes, without a lazy conjugation or negation. False for zero-byte storages.
// (Callers check that the buffer holds the tensor's own element type.)
inline bool CoversWholeStorage(const at::Tensor& tensor) {
  const StorageBuffer* storage = GetStorageBuffer(tensor);
  return storage != nullptr && !tensor.is_conj() && !tensor.is_neg() && tensor.is_contiguous() &&
         tensor.storage_offset() == 0 &&
         static_cast<size_t>(tensor.numel()) * tensor.element_size() == storage->nbytes();
}

// The registered PrivateUse1 allocator (a c10::DeviceAllocator).
c10::Allocator* TpuAllocator();

// Statistics of `device` flattened under PyTorch's names ("allocated_bytes.all.current",
// "num_ooms", ...), as torch.cuda.memory_stats() names them.
std::map<std::string, int64_t> MemoryStats(int device);
void ResetPeakMemoryStats(int device);
void ResetAccumulatedMemoryStats(int device);

// What the device can still hold. From the plugin's PJRT_Device_MemoryStats when it reports a
// limit; otherwise (the XLA CPU plugin, whose buffers are host memory) from /proc/meminfo. Zeros
// when neither is known.
struct MemoryCapacity {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
  bool host_memory = false;  // the numbers describe host memory, not device memory
};
MemoryCapacity QueryMemoryCapacity(int device);

}  // namespace torch_tpu::runtime

// tpu storages: the allocator behind every tpu StorageImpl and access to a tensor's device buffer.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

#include "runtime/storage_buffer.h"

namespace torch_tpu::runtime {

// The StorageBuffer of a tpu storage; nullptr for zero-byte storages.
runtime::StorageBuffer* GetStorageBuffer(const c10::Storage& storage);
inline runtime::StorageBuffer* GetStorageBuffer(const at::Tensor& tensor) {
  return GetStorageBuffer(tensor.storage());
}

c10::Allocator* TpuAllocator();

struct MemoryStats {
  int64_t allocated_bytes;
  int64_t peak_allocated_bytes;
};
MemoryStats GetMemoryStats(int device);
void ResetPeakMemoryStats(int device);

}  // namespace torch_tpu::runtime

// tpu storages: the allocator behind every tpu StorageImpl, access to a tensor's device buffer and
// the device memory statistics behind torch.tpu.memory_* and torch.accelerator.memory_*.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/storage_buffer.h"

namespace torch_tpu::runtime {

// The StorageBuffer of a tpu storage; nullptr for zero-byte storages.
runtime::StorageBuffer* GetStorageBuffer(const c10::Storage& storage);
inline runtime::StorageBuffer* GetStorageBuffer(const at::Tensor& tensor) {
  return GetStorageBuffer(tensor.storage());
}

// Grows `storage` to `new_nbytes` in place: the same StorageBuffer (held by whoever holds it)
// gets a buffer with the old bytes first and zeros after them. Unlike resize_, which swaps in a
// new StorageBuffer, an executor may call it on a storage other threads read. Raises
// torch.OutOfMemoryError when the device cannot hold the difference.
void GrowStorage(const c10::Storage& storage, size_t new_nbytes);

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

// While one lives, buffers this thread publishes are described as produced by `description` (an
// op or graph; kept alive by the buffers), and out-of-memory errors name it.
class ProducerScope {
 public:
  explicit ProducerScope(const std::shared_ptr<const std::string>& description);
  ~ProducerScope();
  ProducerScope(const ProducerScope&) = delete;
  ProducerScope& operator=(const ProducerScope&) = delete;

 private:
  const std::shared_ptr<const std::string>* previous_;
};

// A program run on `device` holds `temporary_bytes` (the compiler's temporaries) beyond its
// arguments and outputs while it runs: counted in the byte peaks the moment it is launched, so
// max_memory_allocated() is never below what the device held.
void CountProgramTemporaries(int device, int64_t temporary_bytes);

// Raises torch.OutOfMemoryError naming `description` when a run needing `bytes` more (its new
// outputs and temporaries) would pass this process's memory limit on `device`.
void CheckProgramFits(int device, int64_t bytes, const std::string& description);

// This process's limit on `device` (torch.tpu.set_per_process_memory_fraction); 0: none.
void SetMemoryLimit(int device, int64_t bytes);
int64_t MemoryLimit(int device);

// A device buffer that counts in memory_allocated(), largest first.
struct LiveBuffer {
  uintptr_t address;  // identifies it (the PJRT handle), never dereferenced
  int64_t bytes;
  std::shared_ptr<const std::string> producer;  // null: a copy from the host or another device
};
// `launch_recorded_work`: run DeferAndFuse's pending graph first, so its results are listed.
std::vector<LiveBuffer> LiveBuffers(int device, bool launch_recorded_work = true);

}  // namespace torch_tpu::runtime

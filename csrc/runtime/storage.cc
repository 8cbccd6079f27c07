#include "runtime/storage.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <memory>

#include "runtime/device.h"

namespace torch_tpu::runtime {
namespace {

constexpr int kMaxDevices = 64;
std::atomic<int64_t> allocated_bytes[kMaxDevices];
std::atomic<int64_t> peak_bytes[kMaxDevices];

void DeleteStorageBuffer(void* context) {
  auto* buffer = static_cast<runtime::StorageBuffer*>(context);
  allocated_bytes[buffer->device_index()] -= static_cast<int64_t>(buffer->nbytes());
  delete buffer;  // owned by the DataPtr: this is its deleter
}

// The DataPtr's data is the StorageBuffer itself: a unique, stable address per storage, which
// is all PyTorch uses device pointers for (identity, overlap checks within one storage). It is
// never dereferenced: device bytes live in the PJRT buffer.
class Allocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const int device = CurrentDevice();
    const c10::Device where(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device));
    if (nbytes == 0) return c10::DataPtr(nullptr, nullptr, &DeleteNothing, where);
    auto buffer = std::make_unique<runtime::StorageBuffer>(nbytes, device);
    const int64_t now = allocated_bytes[device] += static_cast<int64_t>(nbytes);
    int64_t peak = peak_bytes[device].load();
    while (now > peak && !peak_bytes[device].compare_exchange_weak(peak, now)) {
    }
    void* raw = buffer.release();
    return c10::DataPtr(raw, raw, &DeleteStorageBuffer, where);
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* destination, const void* source, std::size_t count) const override {
    TORCH_CHECK(false, "tpu storages cannot be copied byte-wise on the host; use tensor.copy_()");
  }

 private:
  static void DeleteNothing(void*) {}
};

Allocator allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &allocator);

}  // namespace

runtime::StorageBuffer* GetStorageBuffer(const c10::Storage& storage) {
  if (!storage) return nullptr;
  return static_cast<runtime::StorageBuffer*>(storage.data_ptr().get_context());
}

c10::Allocator* TpuAllocator() { return &allocator; }

MemoryStats GetMemoryStats(int device) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "invalid tpu device index ", device);
  return {allocated_bytes[device].load(), peak_bytes[device].load()};
}

void ResetPeakMemoryStats(int device) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "invalid tpu device index ", device);
  peak_bytes[device] = allocated_bytes[device].load();
}

}  // namespace torch_tpu::runtime

#include "runtime/pinned_memory.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <map>
#include <mutex>

namespace torch_tpu::runtime {
namespace {

std::mutex mutex;
std::map<const char*, size_t>& Blocks() {  // start -> size
  static std::map<const char*, size_t> blocks;
  return blocks;
}

void FreePinned(void* data) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    Blocks().erase(static_cast<const char*>(data));
  }
  std::free(data);
}

class Allocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return c10::DataPtr(nullptr, c10::Device(c10::kCPU));
    constexpr size_t kAlignment = 4096;
    void* data =
        std::aligned_alloc(kAlignment, (nbytes + kAlignment - 1) / kAlignment * kAlignment);
    TORCH_CHECK(data != nullptr, "pinned host allocation of ", nbytes, " bytes failed");
    {
      std::lock_guard<std::mutex> lock(mutex);
      Blocks()[static_cast<const char*>(data)] = nbytes;
    }
    return c10::DataPtr(data, data, &FreePinned, c10::Device(c10::kCPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &FreePinned; }
  void copy_data(void* destination, const void* source, std::size_t count) const override {
    default_copy_data(destination, source, count);
  }
};

Allocator allocator;

}  // namespace

c10::Allocator* PinnedHostAllocator() { return &allocator; }

bool IsPinnedHostPointer(const void* data) {
  const char* pointer = static_cast<const char*>(data);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = Blocks().upper_bound(pointer);
  if (it == Blocks().begin()) return false;
  --it;
  return pointer < it->first + it->second;
}

}  // namespace torch_tpu::runtime

#include "runtime/pinned_memory.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <array>
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
// Guarded by `mutex`. Nothing is cached: every block is a live allocation until it is freed.
at::HostStats& Stats() {
  static at::HostStats stats;
  return stats;
}

std::array<c10::CachingAllocator::Stat*, 4> Counters() {
  at::HostStats& stats = Stats();
  return {&stats.active_requests, &stats.active_bytes, &stats.allocations,
          &stats.allocated_bytes};
}

void FreePinned(void* data) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = Blocks().find(static_cast<const char*>(data));
    if (it != Blocks().end()) {
      at::HostStats& stats = Stats();
      stats.active_requests.decrease(1);
      stats.active_bytes.decrease(it->second);
      stats.allocations.decrease(1);
      stats.allocated_bytes.decrease(it->second);
      ++stats.num_host_free;
      Blocks().erase(it);
    }
  }
  std::free(data);
}

// The host allocator of the tpu device (pin_memory(), torch.accelerator's host memory calls).
// Pinned memory here is page-aligned host memory: PJRT copies from any host memory, and the
// alignment lets transfers read it in place.
class Allocator final : public at::HostAllocator {
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
      at::HostStats& stats = Stats();
      stats.active_requests.increase(1);
      stats.active_bytes.increase(nbytes);
      stats.allocations.increase(1);
      stats.allocated_bytes.increase(nbytes);
      ++stats.num_host_alloc;
    }
    return c10::DataPtr(data, data, &FreePinned, c10::Device(c10::kCPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &FreePinned; }
  void copy_data(void* destination, const void* source, std::size_t count) const override {
    default_copy_data(destination, source, count);
  }
  // No block is cached for reuse, so there is no later allocation to order after the work that
  // still reads it: nothing to record.
  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}  // nothing is cached
  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(mutex);
    return Stats();
  }
  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> lock(mutex);
    for (c10::CachingAllocator::Stat* stat : Counters()) stat->reset_accumulated();
    at::HostStats& stats = Stats();
    stats.num_host_alloc = 0;
    stats.num_host_free = 0;
  }
  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(mutex);
    for (c10::CachingAllocator::Stat* stat : Counters()) stat->reset_peak();
  }
};

Allocator allocator;

[[maybe_unused]] const bool host_allocator_registered = [] {
  at::setHostAllocator(c10::DeviceType::PrivateUse1, &allocator);
  return true;
}();

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

#include "runtime/loaded_executable_cap.h"

#include <c10/util/Exception.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <mutex>

#include "pjrt/executable.h"
#include "runtime/metrics.h"

namespace torch_tpu::runtime {
namespace {

constexpr size_t kCheckEvery = 32;
constexpr size_t kMinLoadedExecutables = 64;
constexpr size_t kDefaultMappingLimit = 65530;  // the kernel's default vm.max_map_count

// Newlines in a /proc file, read with raw reads: no allocation per line.
size_t CountLines(const char* path) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  std::array<char, 1 << 16> buffer;
  size_t lines = 0;
  for (;;) {
    const ssize_t got = ::read(fd, buffer.data(), buffer.size());
    if (got <= 0) break;
    lines += static_cast<size_t>(std::count(buffer.data(), buffer.data() + got, '\n'));
  }
  ::close(fd);
  return lines;
}

struct CapState {
  std::mutex mutex;
  size_t calls = 0;
  size_t cap = std::numeric_limits<size_t>::max();
};

size_t ProcessMappingLimit() {
  static const size_t limit = [] {
    const int fd = ::open("/proc/sys/vm/max_map_count", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kDefaultMappingLimit;
    char text[32] = {};
    const ssize_t got = ::read(fd, text, sizeof(text) - 1);
    ::close(fd);
    const long long parsed = got > 0 ? std::atoll(text) : 0;
    return parsed > 0 ? static_cast<size_t>(parsed) : kDefaultMappingLimit;
  }();
  return limit;
}

}  // namespace

size_t LoadedExecutableCap() {
  static auto* state = new CapState();  // never destroyed: caches insert at exit too
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    if (state->calls++ % kCheckEvery != 0) return state->cap;
  }
  const size_t mappings = CountLines("/proc/self/maps");
  const size_t limit = ProcessMappingLimit();
  const int64_t live = pjrt::PjrtLoadedExecutable::live_count();
  std::lock_guard<std::mutex> lock(state->mutex);
  if (mappings * 2 > limit && live > 0) {
    // Every mapping counts as an executable's: the cap errs low when other code maps a lot.
    const size_t per_executable = std::max<size_t>(1, mappings / static_cast<size_t>(live));
    const size_t fits = std::max(kMinLoadedExecutables, limit * 2 / 5 / per_executable);
    if (fits < state->cap) {
      const bool first = state->cap == std::numeric_limits<size_t>::max();
      state->cap = fits;
      Metrics::Get().RecordReason("loaded_executable_cap_lowered",
                                  "memory mappings past half of vm.max_map_count");
      if (first) {
        TORCH_WARN("torch_tpu: this process uses ", mappings, " memory mappings of the ", limit,
                   " the kernel allows (vm.max_map_count) with ", live,
                   " programs loaded; at most ", fits,
                   " stay loaded from now on, and a program unloaded is rebuilt from the cache "
                   "tiers at its next use. Raising vm.max_map_count lifts this.");
      }
    }
  }
  return state->cap;
}

}  // namespace torch_tpu::runtime

// Waiting on a non-blocking socket under a deadline: shared by the HTTP client and its TLS layer.
#pragma once

#include <poll.h>

#include <cerrno>
#include <chrono>

namespace torch_tpu::cache {

using Clock = std::chrono::steady_clock;

inline int RemainingMilliseconds(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Waits until `fd` is ready for `events` or the deadline passes; false on timeout or error.
inline bool WaitFor(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd entry{fd, events, 0};
    const int ready = ::poll(&entry, 1, RemainingMilliseconds(deadline));
    if (ready > 0) return true;
    if (ready == 0) return false;
    if (errno != EINTR) return false;
  }
}

}  // namespace torch_tpu::cache

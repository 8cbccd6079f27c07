// Serializes launches: a launch reads storages' current buffers, executes, and swaps in the
// buffers it wrote; two threads writing disjoint views of one storage must not interleave those
// steps, or one thread's write replaces the other's (lost update).
#pragma once

#include <mutex>

namespace torch_tpu::exec {

inline std::mutex& LaunchMutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace torch_tpu::exec

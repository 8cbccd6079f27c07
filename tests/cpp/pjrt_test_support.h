// Shared fixture for tests that need the real XLA CPU PJRT plugin.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "pjrt/buffer.h"
#include "pjrt/client.h"
#include "pjrt/executable.h"
#include "pjrt/plugin.h"

namespace torch_tpu::testing {

inline std::string TestPluginPath() {
  const char* path = std::getenv("TORCH_TPU_TEST_PJRT_PLUGIN");
  return path ? path : "";
}

// One client for the whole test binary: creating CPU clients is cheap, but sharing one also checks
// that independent tests do not interfere through it.
inline std::shared_ptr<pjrt::PjrtClient> SharedClient() {
  static std::shared_ptr<pjrt::PjrtClient> client = [] {
    auto plugin = pjrt::PjrtPlugin::Load(TestPluginPath());
    return pjrt::PjrtClient::Create(plugin, {{"cpu_device_count", int64_t{1}}});
  }();
  return client;
}

template <typename T>
pjrt::PjrtBuffer ToDevice(const std::vector<T>& values, PJRT_Buffer_Type type,
                          std::vector<int64_t> dims) {
  auto client = SharedClient();
  return client
      ->BufferFromHost(values.data(), values.size() * sizeof(T), type, dims, client->device(0))
      .buffer;
}

template <typename T>
std::vector<T> ToHost(const pjrt::PjrtBuffer& buffer) {
  std::vector<T> values(buffer.host_size_bytes() / sizeof(T));
  buffer.ToHost(values.data(), values.size() * sizeof(T)).Await();
  return values;
}

}  // namespace torch_tpu::testing

#include "exec/scalar_buffers.h"

#include <cstring>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>

#include "runtime/element_types.h"
#include "runtime/metrics.h"
#include "runtime/runtime.h"

namespace torch_tpu::exec {

struct ScalarBuffers::Impl {
  struct Key {
    int device;
    stablehlo::ElementType type;
    uint64_t bits;
    uint64_t high_bits;  // the imaginary part of a complex128 scalar
    bool operator==(const Key& other) const {
      return device == other.device && type == other.type && bits == other.bits &&
             high_bits == other.high_bits;
    }
  };
  struct KeyHash {
    size_t operator()(const Key& key) const {
      return std::hash<uint64_t>()(key.bits * 31 + key.high_bits * 131 +
                                   static_cast<uint64_t>(key.type) * 7 +
                                   static_cast<uint64_t>(key.device));
    }
  };
  std::mutex mutex;
  std::unordered_map<Key, std::shared_ptr<pjrt::PjrtBuffer>, KeyHash> buffers;
};

ScalarBuffers& ScalarBuffers::Get() {
  static ScalarBuffers buffers;
  return buffers;
}

ScalarBuffers::Impl& ScalarBuffers::impl() {
  static Impl* instance = new Impl();  // holds PJRT buffers: never destroyed (runtime.cc)
  return *instance;
}

namespace {

std::shared_ptr<pjrt::PjrtBuffer> Upload(int device, stablehlo::ElementType type, const void* data,
                                         size_t size, std::span<const int64_t> dims) {
  const runtime::Runtime& device_runtime = runtime::Runtime::Get();
  auto transfer = device_runtime.client().BufferFromHost(data, size, runtime::ToPjrtType(type),
                                                         dims, device_runtime.device(device));
  runtime::Metrics::Get().transfer_to_device_bytes += static_cast<int64_t>(size);
  return std::make_shared<pjrt::PjrtBuffer>(std::move(transfer.buffer));
}

}  // namespace

std::shared_ptr<pjrt::PjrtBuffer> ScalarBuffers::Buffer(int device, const HostScalar& scalar) {
  Impl::Key key{device, scalar.type, 0, 0};
  uint64_t words[2] = {0, 0};
  std::memcpy(words, scalar.bytes, scalar.size);  // size <= 16; the rest stays zero
  key.bits = words[0];
  key.high_bits = words[1];
  Impl& state = impl();
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    auto it = state.buffers.find(key);
    if (it != state.buffers.end()) return it->second;
  }
  auto buffer = Upload(device, scalar.type, scalar.bytes, scalar.size, {});
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.buffers.size() > 4096) state.buffers.clear();
  state.buffers.emplace(key, buffer);
  return buffer;
}

std::shared_ptr<pjrt::PjrtBuffer> ScalarBuffers::RngState(int device, uint64_t seed,
                                                          uint64_t offset) {
  const uint64_t state[2] = {seed, offset};
  const int64_t dims[] = {2};
  return Upload(device, stablehlo::ElementType::kU64, state, sizeof(state), dims);
}

}  // namespace torch_tpu::exec

// Small device buffers for runtime arguments: Python scalars (reused while the same values keep
// coming: alpha=1, a fixed learning rate...) and random states.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "pjrt/buffer.h"
#include "stablehlo/element_type.h"

namespace torch_tpu::exec {

// Host bytes and element type of a runtime scalar.
struct HostScalar {
  stablehlo::ElementType type;
  alignas(8) unsigned char bytes[16];  // up to a complex128
  size_t size;
};

class ScalarBuffers {
 public:
  static ScalarBuffers& Get();
  std::shared_ptr<pjrt::PjrtBuffer> Buffer(int device, const HostScalar& scalar);
  // u64[2] {seed, offset}.
  std::shared_ptr<pjrt::PjrtBuffer> RngState(int device, uint64_t seed, uint64_t offset);

 private:
  ScalarBuffers() = default;
  struct Impl;
  Impl& impl();
};

}  // namespace torch_tpu::exec

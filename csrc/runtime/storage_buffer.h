// The device side of one tpu storage: its current PJRT buffer (flat, 1-D) and that buffer's
// element type. PJRT buffers are immutable, so every write swaps in a new buffer; all views of
// the storage see the change because they share this object (the storage DataPtr's context).
#pragma once

#include <memory>
#include <mutex>
#include <optional>

#include "pjrt/buffer.h"
#include "stablehlo/element_type.h"

namespace torch_tpu::runtime {

struct StorageContents {
  std::shared_ptr<pjrt::PjrtBuffer> buffer;  // null: never written, reads as zeros
  stablehlo::ElementType element_type = stablehlo::ElementType::kU8;
  bool initialized() const { return buffer != nullptr; }
  // Elements of element_type in the buffer.
  int64_t length(size_t nbytes) const {
    return static_cast<int64_t>(nbytes) / stablehlo::ByteWidth(element_type);
  }
};

class StorageBuffer {
 public:
  StorageBuffer(size_t nbytes, int device_index) : nbytes_(nbytes), device_index_(device_index) {}
  size_t nbytes() const { return nbytes_; }
  int device_index() const { return device_index_; }

  StorageContents contents() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return contents_;
  }
  void set_contents(StorageContents contents) {
    std::lock_guard<std::mutex> lock(mutex_);
    contents_ = std::move(contents);
  }

 private:
  const size_t nbytes_;
  const int device_index_;
  mutable std::mutex mutex_;
  StorageContents contents_;
};

}  // namespace torch_tpu::runtime

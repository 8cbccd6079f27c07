// The device side of one tpu storage: its current PJRT buffer (flat, 1-D) and that buffer's
// element type. PJRT buffers are immutable, so every write swaps in a new buffer; all views of
// the storage see the change because they share this object (the storage DataPtr's context).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "pjrt/buffer.h"
#include "stablehlo/element_type.h"

namespace torch_tpu::runtime {

struct StorageContents {
  std::shared_ptr<pjrt::PjrtBuffer> buffer;  // null: never written, reads as zeros
  stablehlo::ElementType element_type = stablehlo::ElementType::kU8;
  // A launch queued behind a compile (exec/launch_queue.h) produces the buffer, of element_type;
  // only StorageBuffer::launch_contents() hands such contents out.
  bool queued = false;
  bool initialized() const { return buffer != nullptr || queued; }
  // Elements of element_type in the buffer.
  int64_t length(size_t nbytes) const {
    return static_cast<int64_t>(nbytes) / stablehlo::ByteWidth(element_type);
  }
};

// Makes `buffer` count in the memory statistics of `device` (torch.tpu.memory_allocated) for as
// long as any copy of the returned pointer lives: a buffer replaced by a write stays counted while
// a program still reads it, which is the peak the write really causes. Passing a buffer that is
// already counted (one storage's contents handed to another) returns it counted once. Defined in
// storage.cc.
std::shared_ptr<pjrt::PjrtBuffer> CountBufferMemory(std::shared_ptr<pjrt::PjrtBuffer> buffer,
                                                    int device, size_t fallback_nbytes);

// A counted buffer whose memory PJRT handed to a program output (donation): it stops counting
// now rather than when its last holder lets go.
void UncountDonatedBuffer(const pjrt::PjrtBuffer* buffer);

// The executors that hold work back register how to run it: DeferAndFuse (exec/deferred_graph.h)
// runs its pending graph, the launch queue (exec/launch_queue.h) waits for the launches queued
// behind compiles. A storage that such work references calls them all before handing out or
// replacing its buffer, so code that needs a concrete buffer never sees a stale one. Defined in
// storage.cc.
using MaterializeFunction = void (*)();
void AddMaterializeFunction(MaterializeFunction function);
void MaterializeDeferred();

class StorageBuffer {
 public:
  // How the pending deferred graph uses this storage.
  enum class Deferred : uint8_t {
    kNone,     // not in the pending graph
    kRead,     // the graph read its current buffer: replacing the buffer must run the graph first
    kWritten,  // the graph computes its next buffer: reading the buffer must run the graph first
  };

  StorageBuffer(size_t nbytes, int device_index) : nbytes_(nbytes), device_index_(device_index) {}
  size_t nbytes() const { return nbytes_.load(std::memory_order_acquire); }
  int device_index() const { return device_index_; }

  StorageContents contents() const {
    if (deferred_.load(std::memory_order_acquire) == Deferred::kWritten ||
        queued_writes_.load(std::memory_order_acquire) > 0) {
      MaterializeDeferred();
    }
    return deferred_contents();
  }
  void set_contents(StorageContents contents) {
    WaitForPendingUse();
    publish_contents(std::move(contents));
  }
  // Runs or waits for all held-back work that reads or writes this storage (before its buffer is
  // replaced).
  void WaitForPendingUse() const {
    if (deferred_.load(std::memory_order_acquire) != Deferred::kNone ||
        queued_reads_.load(std::memory_order_acquire) + queued_writes_.load() > 0) {
      MaterializeDeferred();
    }
  }
  // set_contents for the executor that runs the held-back work itself.
  void publish_contents(StorageContents contents) {
    if (contents.buffer) {
      contents.buffer = CountBufferMemory(std::move(contents.buffer), device_index_, nbytes_);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    std::swap(contents_, contents);
    // The previous contents are released after the lock, when `contents` goes out of scope.
  }

  // Grows the storage in place (GrowStorage in storage.h): waits for held-back work that uses it,
  // then swaps in `contents`, `nbytes` long. The object stays, so whoever holds it stays valid.
  void GrowTo(size_t nbytes, StorageContents contents) {
    WaitForPendingUse();
    if (contents.buffer) {
      contents.buffer = CountBufferMemory(std::move(contents.buffer), device_index_, nbytes);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    nbytes_.store(nbytes, std::memory_order_release);
    std::swap(contents_, contents);
  }

  // The deferred graph's own access: the buffer as it is now, even while the graph is pending.
  StorageContents deferred_contents() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return contents_;
  }
  Deferred deferred() const { return deferred_.load(std::memory_order_acquire); }
  void set_deferred(Deferred state) { deferred_.store(state, std::memory_order_release); }

  // Launches queued behind compiles (exec/launch_queue.h). A launch issued now sees the contents
  // the queued launches will leave: while one will write the storage, its element type (marked
  // `queued`, no buffer) instead of waiting. Begin/End bracket a queued launch's use, in order.
  StorageContents launch_contents() const {
    if (deferred_.load(std::memory_order_acquire) == Deferred::kWritten) MaterializeDeferred();
    std::lock_guard<std::mutex> lock(mutex_);
    if (queued_writes_.load(std::memory_order_relaxed) > 0) {
      return StorageContents{nullptr, queued_type_, true};
    }
    return contents_;
  }
  void BeginQueuedUse(bool writes, stablehlo::ElementType written_type) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (writes) {
      queued_type_ = written_type;
      queued_writes_.fetch_add(1, std::memory_order_acq_rel);
    } else {
      queued_reads_.fetch_add(1, std::memory_order_acq_rel);
    }
  }
  // Ends a queued launch's use; frees the storage when it was released meanwhile and this was
  // the last use.
  void EndQueuedUse(bool writes) {
    bool free = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      (writes ? queued_writes_ : queued_reads_).fetch_sub(1, std::memory_order_acq_rel);
      free = released_ && queued_reads_.load() + queued_writes_.load() == 0;
    }
    if (free) delete this;
  }
  // What sized this storage beyond its tensor's elements, as the executor that sized it describes
  // it (exec/growing_shapes.h: a bucketed result's line and bucket); null for most storages.
  // Set before the storage is handed out; opaque here, as the runtime knows no executor.
  bool has_sized_by() const { return has_sized_by_.load(std::memory_order_acquire); }
  std::shared_ptr<const void> sized_by() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return sized_by_;
  }
  void set_sized_by(std::shared_ptr<const void> origin) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::swap(sized_by_, origin);
    }
    has_sized_by_.store(true, std::memory_order_release);
  }

  // The DataPtr that owns this storage lets go. Returns whether the caller deletes it now; else
  // queued launches still use it and the last one's EndQueuedUse does. Queued launches thus hold
  // no reference PyTorch counts (autograd accumulates gradients in place by storage use counts).
  bool ReleaseNowOrWhenUnqueued() {
    std::lock_guard<std::mutex> lock(mutex_);
    released_ = true;
    return queued_reads_.load() + queued_writes_.load() == 0;
  }

 private:
  std::atomic<size_t> nbytes_;
  std::atomic<Deferred> deferred_{Deferred::kNone};
  const int device_index_;
  std::atomic<int> queued_reads_{0};
  std::atomic<int> queued_writes_{0};
  mutable std::mutex mutex_;
  StorageContents contents_;
  stablehlo::ElementType queued_type_ = stablehlo::ElementType::kU8;  // of the last queued write
  bool released_ = false;  // the DataPtr let go while queued launches used the storage
  std::shared_ptr<const void> sized_by_;
  std::atomic<bool> has_sized_by_{false};
};

}  // namespace torch_tpu::runtime

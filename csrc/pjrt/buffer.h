// PjrtBuffer: owns a PJRT_Buffer, an immutable array on one device.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "event.h"
#include "pjrt_c_api.h"

namespace torch_tpu::pjrt {

class PjrtClient;

// Bytes per element of a PJRT element type; throws PjrtError for sub-byte and unsupported types.
size_t ByteWidth(PJRT_Buffer_Type type);
std::string ElementTypeName(PJRT_Buffer_Type type);
int64_t ElementCount(const std::vector<int64_t>& dims);

class PjrtBuffer {
 public:
  PjrtBuffer() = default;
  PjrtBuffer(std::shared_ptr<const PjrtClient> client, PJRT_Buffer* buffer);
  PjrtBuffer(PjrtBuffer&& other) noexcept;
  PjrtBuffer& operator=(PjrtBuffer&& other) noexcept;
  PjrtBuffer(const PjrtBuffer&) = delete;
  PjrtBuffer& operator=(const PjrtBuffer&) = delete;
  ~PjrtBuffer();

  bool valid() const { return buffer_ != nullptr; }
  PJRT_Buffer* get() const { return buffer_; }
  const std::shared_ptr<const PjrtClient>& client() const { return client_; }

  PJRT_Buffer_Type element_type() const;
  std::vector<int64_t> dimensions() const;
  // Size in bytes of the dense host representation (elements * byte width).
  size_t host_size_bytes() const;
  size_t on_device_size_bytes() const;

  // Starts copying the whole buffer into `destination` (dense, row-major). Throws PjrtError if
  // `destination_size` differs from host_size_bytes(). The returned event completes the copy.
  PjrtEvent ToHost(void* destination, size_t destination_size) const;
  // ToHost(...).Await(). Where device memory is host memory and the buffer is laid out densely,
  // waits for the contents and copies them in place instead: the plugin's copy is a task on its
  // worker threads, and handing it over and back cost a host read ~100 us of thread wake-ups on
  // the XLA CPU plugin, against a few us in place (what JAX's CPU arrays do). Throws the
  // producer's error as the copy would.
  void CopyToHostNow(void* destination, size_t destination_size) const;
  // Becomes ready when the buffer's contents are computed; carries the error of the producer.
  PjrtEvent ReadyEvent() const;
  // True once the runtime deleted the buffer's contents, e.g. after donating it to an execution.
  bool IsDeleted() const;
  // The device holding the buffer (owned by the client).
  PJRT_Device* device() const;
  // Starts copying the buffer to another device of the same client; the result is usable at once.
  PjrtBuffer CopyToDevice(PJRT_Device* device) const;
  // Where the contents live in this process's memory, on plugins whose device memory is host
  // memory (PjrtClient::device_memory_is_host_memory). Valid while this buffer lives (a holder
  // also keeps it from being donated); its values are final once ReadyEvent() completes.
  void* HostAddress() const;

 private:
  void Reset();
  std::shared_ptr<const PjrtClient> client_;
  PJRT_Buffer* buffer_ = nullptr;
};

}  // namespace torch_tpu::pjrt

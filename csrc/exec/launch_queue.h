// Launches issued while their program still compiles (exec/compile_pool.h), or behind such
// launches, wait here in issue order, one queue per device; a worker thread per device executes
// each as soon as its executable is ready. So Python runs ahead of compiles while the device
// still sees the ops in program order.
//
// A queued launch binds its storages' buffers when it executes, not when issued: the launches
// before it in the queue have produced them by then. Its storages are marked meanwhile
// (StorageBuffer::BeginQueuedUse): a later launch signs a storage by the element type a queued
// write will leave; reading a queued-written buffer, or replacing a queued-used one, from outside
// waits for the queue (runtime::MaterializeDeferred), as do synchronization, memory statistics
// and every other path that runs programs itself.
//
// A compile error cannot be raised at the call any more: the launch's outputs become failed
// buffers (reading them raises the error; programs reading them fail asynchronously) and the
// error is raised at the next synchronization, naming the op, like an asynchronous device error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "exec/compile_pool.h"
#include "exec/program_builder.h"
#include "exec/scalar_buffers.h"
#include "runtime/storage_buffer.h"

namespace torch_tpu::exec {

struct QueuedLaunch {
  std::shared_ptr<const void> owner;  // keeps `program` alive
  const BuiltProgram* program = nullptr;
  std::shared_ptr<CompileJob> compile;  // sets program->executable; null when compiled at issue
  // The program's storage slots (null: zero bytes). A storage freed meanwhile stays alive until
  // the launch ends (StorageBuffer::ReleaseNowOrWhenUnqueued).
  std::vector<runtime::StorageBuffer*> slots;
  // Per new output, the storage of the tensor handed out at issue (null: zero bytes); the
  // tensor itself may be given another storage meanwhile.
  std::vector<runtime::StorageBuffer*> new_outputs;
  std::vector<HostScalar> host_scalars;
  std::vector<std::pair<uint64_t, uint64_t>> rng_states;
  std::shared_ptr<const std::string> description;
  // The CPU op it was issued in, while a profiler records (profiler/device_trace.h); set by Push.
  uint64_t profiler_correlation = 0;
};

class LaunchQueue {
 public:
  static LaunchQueue& Get();

  // Whether a launch on `device` must queue: an earlier one still waits there. The caller holds
  // LaunchMutex(), under which launches are issued.
  bool Busy(int device);
  // Queues `launch` behind the earlier ones on `device` and marks its storages. The caller holds
  // LaunchMutex().
  void Push(int device, QueuedLaunch launch);
  // Blocks until every launch queued so far on `device` (-1: on every device) has executed.
  // Returns at once on a queue's own worker thread.
  void Drain(int device = -1);
  // Whether nothing waits in any queue; never blocks.
  bool Idle();
  // Launches waiting in all queues (for tests: launches issued before their compile ended).
  size_t size();

 private:
  LaunchQueue() = default;
  struct Impl;
  Impl& impl();
};

}  // namespace torch_tpu::exec

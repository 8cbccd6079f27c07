#include "exec/storage_ops.h"

#include <exception>
#include <stdexcept>

#include "cache/executable_cache.h"
#include "exec/pending_work.h"
#include "pjrt/error.h"
#include "profiler/device_trace.h"
#include "runtime/element_types.h"
#include "runtime/fault_injection.h"
#include "runtime/metrics.h"
#include "runtime/runtime.h"
#include "stablehlo/module.h"

namespace torch_tpu::exec {

using runtime::Runtime;
using runtime::StorageContents;
using runtime::ToPjrtType;

using stablehlo::ElementType;
using stablehlo::TensorType;

namespace {

// The index of the device holding `contents` (for the profiler's tracks).
int DeviceOf(const StorageContents& contents) {
  const PJRT_Device* handle = contents.buffer->device();
  const auto& devices = Runtime::Get().client().addressable_devices();
  for (size_t index = 0; index < devices.size(); ++index) {
    if (devices[index].handle == handle) return static_cast<int>(index);
  }
  return 0;
}

}  // namespace

StorageContents ResizeStorage(const StorageContents& old, size_t old_nbytes, size_t new_nbytes,
                              int device) {
  if (!old.initialized()) return {};
  ElementType type = old.element_type;
  const size_t width = static_cast<size_t>(stablehlo::ByteWidth(type));
  if (new_nbytes % width != 0) {
    throw std::invalid_argument("cannot resize a storage of " +
                                std::string(stablehlo::MlirName(type)) + " elements to " +
                                std::to_string(new_nbytes) + " bytes");
  }
  const int64_t old_length = static_cast<int64_t>(old_nbytes / width);
  const int64_t new_length = static_cast<int64_t>(new_nbytes / width);
  stablehlo::Module module;
  auto& builder = module.main();
  auto flat = builder.Argument(TensorType{type, {old_length}});
  auto resized = new_length >= old_length ? builder.Pad(flat, builder.Constant(type, 0.0), {0},
                                                        {new_length - old_length}, {0})
                                          : builder.Slice(flat, {0}, {new_length}, {1});
  builder.Return({resized});
  auto executable = ExecutableCache::Get().GetOrCompile(module);
  PJRT_Buffer* arguments[] = {old.buffer->get()};
  const int64_t profiled_since = profiler::Active() ? profiler::NowNs() : 0;
  auto result =
      executable->Execute(std::span<PJRT_Buffer* const>(arguments), &Runtime::Get().device(device));
  ++runtime::Metrics::Get().execute_count;
  static const auto description = std::make_shared<const std::string>("resize_");
  if (profiled_since != 0) {
    profiler::RecordExecution(*description, device, profiled_since, result.done);
  }
  PendingWork::Get().Add(std::move(result.done), description);
  return StorageContents{std::make_shared<pjrt::PjrtBuffer>(std::move(result.outputs[0])), type};
}

StorageContents UploadStorage(const void* data, size_t nbytes, ElementType type, int device) {
  if (runtime::ShouldInjectFailure(runtime::FaultSite::kTransfer)) {
    // As the plugin refuses a transfer: nothing reaches the device.
    throw pjrt::PjrtError(PJRT_Error_Code_INTERNAL,
                          runtime::InjectedFailureMessage(runtime::FaultSite::kTransfer));
  }
  const Runtime& device_runtime = Runtime::Get();
  const int64_t length = static_cast<int64_t>(nbytes) / stablehlo::ByteWidth(type);
  int64_t dims[] = {length};
  const int64_t profiled_since = profiler::Active() ? profiler::NowNs() : 0;
  auto transfer = device_runtime.client().BufferFromHost(data, nbytes, ToPjrtType(type), dims,
                                                         device_runtime.device(device));
  runtime::Metrics::Get().transfer_to_device_bytes += static_cast<int64_t>(nbytes);
  if (profiled_since != 0) {
    // Ends when the buffer holds the values on the device.
    profiler::RecordAsync(profiler::EventKind::kTransfer, "host to device", device,
                          static_cast<int64_t>(nbytes), profiled_since,
                          transfer.buffer.ReadyEvent());
  }
  return StorageContents{std::make_shared<pjrt::PjrtBuffer>(std::move(transfer.buffer)), type};
}

bool StoragesAreHostMemory(int device) {
  (void)device;  // one plugin serves every device
  return Runtime::Get().client().device_memory_is_host_memory();
}

StorageContents LendHostMemory(void* data, size_t nbytes, ElementType type, int device,
                               std::function<void()> release) {
  const Runtime& device_runtime = Runtime::Get();
  int64_t dims[] = {static_cast<int64_t>(nbytes) / stablehlo::ByteWidth(type)};
  return StorageContents{
      std::make_shared<pjrt::PjrtBuffer>(device_runtime.client().ViewOfHostMemory(
          data, ToPjrtType(type), dims, device_runtime.device(device), std::move(release))),
      type};
}

StorageContents CopyStorageToDevice(const StorageContents& contents, int device) {
  if (!contents.initialized()) return contents;
  const int64_t profiled_since = profiler::Active() ? profiler::NowNs() : 0;
  auto copy = std::make_shared<pjrt::PjrtBuffer>(
      contents.buffer->CopyToDevice(Runtime::Get().device(device).handle));
  if (profiled_since != 0) {
    profiler::RecordAsync(profiler::EventKind::kTransfer, "device to device", device,
                          static_cast<int64_t>(copy->on_device_size_bytes()), profiled_since,
                          copy->ReadyEvent());
  }
  return StorageContents{std::move(copy), contents.element_type};
}

void DownloadStorage(const StorageContents& contents, void* destination, size_t nbytes) {
  if (runtime::ShouldInjectFailure(runtime::FaultSite::kTransfer)) {
    // As a failed device-to-host copy: the host memory is not written.
    throw pjrt::PjrtError(PJRT_Error_Code_INTERNAL,
                          runtime::InjectedFailureMessage(runtime::FaultSite::kTransfer));
  }
  int64_t profiled_since = 0;
  if (profiler::Active()) {
    // The transfer starts once its source is computed: wait for that first, so the span shows
    // the copy alone. A failed source raises below, from the copy, as without a profiler.
    try {
      contents.buffer->ReadyEvent().Await();
    } catch (const pjrt::PjrtError&) {
    }
    profiled_since = profiler::NowNs();
  }
  if (contents.buffer->client()->device_memory_is_host_memory()) {
    // Read in place (PjrtBuffer::CopyToHostNow): its own failure first, then the checks'.
    contents.buffer->CopyToHostNow(destination, nbytes);
    PendingWork::Get().CheckErrorWords();
  } else {
    pjrt::PjrtEvent copied = contents.buffer->ToHost(destination, nbytes);
    // The device-side checks' error words come back while the copy is under way: one wait for
    // both rather than two round trips. The copy writes `destination` until it is awaited, so
    // it is awaited whatever the checks raise; its own failure is raised first, as before.
    std::exception_ptr check_failure;
    try {
      PendingWork::Get().CheckErrorWords();
    } catch (...) {
      check_failure = std::current_exception();
    }
    copied.Await();
    if (check_failure) std::rethrow_exception(check_failure);
  }
  if (profiled_since != 0) {
    profiler::RecordSpan(profiler::EventKind::kTransfer, "device to host", "", DeviceOf(contents),
                         static_cast<int64_t>(nbytes), profiled_since);
  }
  runtime::Metrics::Get().transfer_to_host_bytes += static_cast<int64_t>(nbytes);
}

}  // namespace torch_tpu::exec

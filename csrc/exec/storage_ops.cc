#include "exec/storage_ops.h"

#include <stdexcept>

#include "cache/executable_cache.h"
#include "exec/pending_work.h"
#include "pjrt/error.h"
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
  auto result =
      executable->Execute(std::span<PJRT_Buffer* const>(arguments), &Runtime::Get().device(device));
  ++runtime::Metrics::Get().execute_count;
  static const auto description = std::make_shared<const std::string>("resize_");
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
  auto transfer = device_runtime.client().BufferFromHost(data, nbytes, ToPjrtType(type), dims,
                                                         device_runtime.device(device));
  runtime::Metrics::Get().transfer_to_device_bytes += static_cast<int64_t>(nbytes);
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
  return StorageContents{std::make_shared<pjrt::PjrtBuffer>(
                             contents.buffer->CopyToDevice(Runtime::Get().device(device).handle)),
                         contents.element_type};
}

void DownloadStorage(const StorageContents& contents, void* destination, size_t nbytes) {
  if (runtime::ShouldInjectFailure(runtime::FaultSite::kTransfer)) {
    // As a failed device-to-host copy: the host memory is not written.
    throw pjrt::PjrtError(PJRT_Error_Code_INTERNAL,
                          runtime::InjectedFailureMessage(runtime::FaultSite::kTransfer));
  }
  contents.buffer->ToHost(destination, nbytes).Await();
  PendingWork::Get().CheckErrorWords();
  runtime::Metrics::Get().transfer_to_host_bytes += static_cast<int64_t>(nbytes);
}

}  // namespace torch_tpu::exec

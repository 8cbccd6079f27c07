#include "exec/failed_work.h"

#include <cstdint>
#include <memory>

#include "runtime/element_types.h"
#include "runtime/runtime.h"

namespace torch_tpu::exec {

runtime::StorageContents FailedContents(size_t nbytes, stablehlo::ElementType type, int device,
                                        const std::string& failure) {
  // A storage whose size is no multiple of `type` (a byte view, say) fails as bytes.
  if (nbytes % static_cast<size_t>(stablehlo::ByteWidth(type)) != 0) {
    type = stablehlo::ElementType::kU8;
  }
  const runtime::Runtime& device_runtime = runtime::Runtime::Get();
  const int64_t dims[] = {static_cast<int64_t>(nbytes) / stablehlo::ByteWidth(type)};
  auto buffer = device_runtime.client().FailedBuffer(runtime::ToPjrtType(type), dims,
                                                     device_runtime.device(device), failure);
  return {std::make_shared<pjrt::PjrtBuffer>(std::move(buffer)), type};
}

pjrt::PjrtEvent FailedEvent(int device, const std::string& failure) {
  const runtime::Runtime& device_runtime = runtime::Runtime::Get();
  // The event is the PJRT future of a one-byte failed buffer; it outlives the buffer.
  const int64_t dims[] = {1};
  const pjrt::PjrtBuffer buffer = device_runtime.client().FailedBuffer(
      runtime::ToPjrtType(stablehlo::ElementType::kU8), dims, device_runtime.device(device),
      failure);
  return buffer.ReadyEvent();
}

}  // namespace torch_tpu::exec

#include "distributed/device_transport.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <future>

#include "lowering/dtype.h"
#include "runtime/metrics.h"
#include "runtime/runtime.h"
#include "runtime/storage.h"

namespace torch_tpu::distributed {
namespace {

// Whether the storage's buffer holds exactly `tensor`'s values in its own element type (so it
// can be the program's operand as it is).
bool IsWholeStorage(const at::Tensor& tensor, stablehlo::ElementType type) {
  if (!runtime::CoversWholeStorage(tensor)) return false;
  const runtime::StorageContents contents = runtime::GetStorageBuffer(tensor)->contents();
  return contents.buffer != nullptr && contents.element_type == type;
}

// Whether a result of `type` can become `tensor`'s storage's buffer: the tensor covers it and
// no other element type lives there (dtype views read it as theirs).
bool CanAdopt(const at::Tensor& tensor, stablehlo::ElementType type) {
  if (!runtime::CoversWholeStorage(tensor)) return false;
  const runtime::StorageContents contents = runtime::GetStorageBuffer(tensor)->contents();
  return !contents.initialized() || contents.element_type == type;
}

// Collective programs count in the compile metrics like every other program.
std::shared_ptr<pjrt::PjrtLoadedExecutable> CompileCounted(const std::string& text,
                                                           const std::string& options) {
  const auto start = std::chrono::steady_clock::now();
  auto executable = runtime::Runtime::Get().client().Compile(text, options);
  runtime::Metrics::Get().RecordCompile(std::chrono::steady_clock::now() - start);
  return executable;
}

}  // namespace

DeviceTransport::DeviceTransport(std::unique_ptr<collectives::DeviceCollectives> collectives,
                                 int device_index)
    : collectives_(std::move(collectives)), device_index_(device_index) {}

std::unique_ptr<DeviceTransport> DeviceTransport::ForGroup(int rank, int size) {
  runtime::Runtime& runtime = runtime::Runtime::Get();
  const pjrt::PjrtClient& client = runtime.client();
  if (client.process_count() != size || client.process_index() != rank) return nullptr;
  std::vector<int64_t> devices = collectives::DeviceCollectives::OneDevicePerProcess(client);
  const int64_t own = devices.at(rank);
  for (size_t index = 0; index < runtime.device_count(); ++index) {
    if (runtime.device(index).id == own) {
      return std::unique_ptr<DeviceTransport>(new DeviceTransport(
          std::make_unique<collectives::DeviceCollectives>(runtime.client_ptr(), devices,
                                                           &CompileCounted),
          static_cast<int>(index)));
    }
  }
  return nullptr;
}

bool DeviceTransport::Accepts(const std::vector<at::Tensor>& tensors) const {
  for (const at::Tensor& tensor : tensors) {
    if (!tensor.device().is_privateuseone() || tensor.device().index() != device_index_ ||
        tensor.numel() == 0 || !lowering::ToElementType(tensor.scalar_type())) {
      return false;
    }
  }
  return !tensors.empty();
}

DeviceTransport::Operand DeviceTransport::Capture(const at::Tensor& tensor) const {
  const stablehlo::ElementType type = *lowering::ToElementType(tensor.scalar_type());
  // A view, a dtype view, or a storage never written (reads as zeros): a dense copy, made by an
  // ordinary device op issued now, in order with the caller's other work.
  const at::Tensor dense =
      IsWholeStorage(tensor, type) ? tensor : tensor.clone(at::MemoryFormat::Contiguous);
  const runtime::StorageContents contents = runtime::GetStorageBuffer(dense)->contents();
  TORCH_CHECK(contents.buffer != nullptr && contents.element_type == type,
              "tpu_dist: no device buffer for a ", tensor.scalar_type(), tensor.sizes(),
              " tensor on ", tensor.device());
  return Operand{contents.buffer, tensor.numel(), type};
}

void DeviceTransport::Run(collectives::CollectiveSpec spec, const Operand& operand,
                          const at::Tensor& output, std::chrono::milliseconds timeout) {
  spec.element_type = operand.type;
  spec.dims = {operand.numel};
  auto result = std::make_shared<pjrt::ExecutionResult>(
      std::move(collectives_->Run(spec, {operand.buffer->get()}).at(0)));
  auto finished = std::make_shared<std::promise<std::string>>();
  std::future<std::string> outcome = finished->get_future();
  // The callback holds the result: a program that never finishes keeps its buffers, which the
  // plugin may still write, rather than having them destroyed under it.
  result->done.OnReady(
      [finished, result](const std::string& error) { finished->set_value(error); });
  if (outcome.wait_for(timeout) != std::future_status::ready) {
    throw std::runtime_error("the device program of " + collectives::Describe(spec) +
                             " timed out after " + std::to_string(timeout.count()) + " ms");
  }
  if (std::string error = outcome.get(); !error.empty()) throw std::runtime_error(error);
  ++runtime::Metrics::Get().device_collectives;
  auto buffer = std::make_shared<pjrt::PjrtBuffer>(std::move(result->outputs.at(0)));
  TORCH_CHECK(static_cast<int64_t>(buffer->host_size_bytes()) ==
                  output.numel() * static_cast<int64_t>(output.element_size()),
              "tpu_dist: ", collectives::Describe(spec), " gave ", buffer->host_size_bytes(),
              " bytes for an output of ", output.numel(), " elements");
  // Runs on the backend's completion thread, whose current device is not the caller's.
  c10::DeviceGuard guard(output.device());
  if (CanAdopt(output, operand.type)) {
    runtime::GetStorageBuffer(output)->set_contents({std::move(buffer), operand.type});
    return;
  }
  at::Tensor result_tensor = at::empty({output.numel()}, output.options());
  runtime::GetStorageBuffer(result_tensor)->set_contents({std::move(buffer), operand.type});
  output.copy_(result_tensor.view(output.sizes()));
}

}  // namespace torch_tpu::distributed

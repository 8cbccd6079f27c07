// Copies between tpu and CPU and within tpu: copy_, to(), .cpu(), .item().
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/from_blob.h>
#include <torch/library.h>

#include "exec/deferred_graph.h"
#include "exec/eager.h"
#include "exec/storage_ops.h"
#include "lowering/dtype.h"
#include "lowering/registry.h"
#include "runtime/storage.h"

namespace torch_tpu::aten {
namespace {

const lowering::LoweringFunction& BroadcastToLowering() {
  return lowering::LoweringRegistry::Get().Function("torch_tpu::broadcast_to");
}

// Whether `tensor` is exactly its whole storage, in order, stored in its own dtype.
bool IsWholeStorage(const at::Tensor& tensor, const runtime::StorageContents& contents) {
  if (runtime::GetStorageBuffer(tensor) == nullptr) return tensor.numel() == 0;
  return runtime::CoversWholeStorage(tensor) &&
         (!contents.initialized() ||
          contents.element_type == lowering::ToElementType(tensor.scalar_type()));
}

at::Tensor Materialize(const at::Tensor& tensor);

// `tensor`'s values on tpu device `device`: its whole storage copied there when it lives on
// another device.
at::Tensor OnDevice(const at::Tensor& tensor, c10::Device device) {
  if (tensor.device() == device) return tensor;
  at::Tensor whole = Materialize(tensor);
  at::Tensor moved = at::empty(whole.sizes(), whole.options().device(device));
  runtime::StorageBuffer* from = runtime::GetStorageBuffer(whole);
  runtime::StorageBuffer* to = runtime::GetStorageBuffer(moved);
  if (from != nullptr && to != nullptr) {
    to->set_contents(exec::CopyStorageToDevice(from->contents(), to->device_index()));
  }
  return moved;
}

// Writes `source` (tpu) into the view `destination` (tpu), converting dtype and broadcasting.
void DeviceToDevice(const at::Tensor& source_on_any_device, const at::Tensor& destination) {
  const at::Tensor source = OnDevice(source_on_any_device, destination.device());
  exec::EagerLaunch launch("aten::copy_");
  launch.AddTensor(source);
  launch.AddStatic(c10::IValue(destination.sizes().vec()));
  launch.WriteResultTo(0, destination, /*check_cast=*/false);
  launch.Run(BroadcastToLowering());
}

// A tpu tensor with the same values as `tensor` that is its whole storage.
at::Tensor Materialize(const at::Tensor& tensor) {
  runtime::StorageBuffer* storage = runtime::GetStorageBuffer(tensor);
  if (storage != nullptr && IsWholeStorage(tensor, storage->contents())) return tensor;
  exec::EagerLaunch launch("aten::clone");
  launch.AddTensor(tensor);
  launch.AddStatic(c10::IValue(tensor.sizes().vec()));
  return launch.Run(BroadcastToLowering())[0];
}

void HostToDevice(const at::Tensor& source, const at::Tensor& destination) {
  at::Tensor values = source.resolve_conj()
                          .resolve_neg()
                          .to(destination.scalar_type())
                          .expand(destination.sizes())
                          .contiguous();
  runtime::StorageBuffer* storage = runtime::GetStorageBuffer(destination);
  if (storage != nullptr && IsWholeStorage(destination, runtime::StorageContents{})) {
    const auto type =
        lowering::ToElementTypeOrThrow(destination.scalar_type(), "copy_ (CPU to tpu)");
    runtime::StorageContents uploaded;
    try {
      uploaded = exec::UploadStorage(values.const_data_ptr(), storage->nbytes(), type,
                                     storage->device_index());
    } catch (const std::exception& error) {
      // Raised at the copy, which wrote nothing: the destination keeps its values.
      TORCH_CHECK(false, "copying a CPU tensor to tpu failed: ", error.what());
    }
    storage->set_contents(std::move(uploaded));
    return;
  }
  if (destination.numel() == 0) return;
  // A partial write: upload the values to a fresh storage, then write the view on the device.
  at::Tensor staged = at::empty(destination.sizes(), destination.options());
  HostToDevice(values, staged);
  DeviceToDevice(staged, destination);
}

void Download(const runtime::StorageContents& contents, void* host, size_t nbytes) {
  try {
    exec::DownloadStorage(contents, host, nbytes);
  } catch (const c10::Error&) {
    throw;  // already names the op that failed (a device-side check, say)
  } catch (const std::exception& error) {
    TORCH_CHECK(false, "copying a tpu tensor to the CPU failed: ", error.what());
  }
}

// Whether `tensor` is, in order, the start of its storage, and that storage is small or the
// tensor is half of it or more: the results of programs shared by growing shapes
// (exec/growing_shapes.h) live in storages sized for their bucket. Downloading the whole storage
// is then cheaper than compiling a copy for each size.
bool IsLeadingPart(const at::Tensor& tensor, const runtime::StorageContents& contents) {
  const runtime::StorageBuffer* storage = runtime::GetStorageBuffer(tensor);
  if (storage == nullptr || !contents.initialized() || tensor.is_conj() || tensor.is_neg() ||
      !tensor.is_contiguous() || tensor.storage_offset() != 0 ||
      contents.element_type != lowering::ToElementType(tensor.scalar_type())) {
    return false;
  }
  const size_t bytes = static_cast<size_t>(tensor.numel()) * tensor.element_size();
  constexpr size_t kSmallStorageBytes = size_t{1} << 20;
  return bytes > 0 && bytes <= storage->nbytes() &&
         (2 * bytes >= storage->nbytes() || storage->nbytes() <= kSmallStorageBytes);
}

void DeviceToHost(const at::Tensor& source, const at::Tensor& destination) {
  exec::DeferredGraph::Get().Flush("to_cpu");
  if (runtime::StorageBuffer* storage = runtime::GetStorageBuffer(source)) {
    const runtime::StorageContents contents = storage->contents();
    if (!IsWholeStorage(source, contents) && IsLeadingPart(source, contents)) {
      at::Tensor bytes = at::empty({static_cast<int64_t>(storage->nbytes())},
                                   source.options().device(c10::kCPU).dtype(at::kByte));
      Download(contents, bytes.data_ptr(), storage->nbytes());
      destination.copy_(at::from_blob(bytes.data_ptr(), source.sizes(),
                                      source.options().device(c10::kCPU)));
      return;
    }
  }
  at::Tensor whole = Materialize(source);
  // Straight into the destination when it is laid out as the download is (`.cpu()`, the
  // host staging of collectives), else through a temporary that copy_ then converts.
  const bool direct = destination.is_contiguous() &&
                      destination.scalar_type() == source.scalar_type() &&
                      destination.sizes() == source.sizes() && !destination.is_conj() &&
                      !destination.is_neg();
  at::Tensor host =
      direct ? destination : at::empty(source.sizes(), source.options().device(c10::kCPU));
  runtime::StorageBuffer* storage = runtime::GetStorageBuffer(whole);
  if (storage != nullptr) {
    const runtime::StorageContents contents = storage->contents();
    if (contents.initialized()) {
      Download(contents, host.data_ptr(), storage->nbytes());
    } else {
      host.zero_();  // never written
    }
  }
  if (!direct) destination.copy_(host);
}

at::Tensor CopyFrom(const at::Tensor& self, const at::Tensor& destination, bool non_blocking) {
  // `self` is the source. Host copies block: PyTorch may reuse the host memory right after.
  if (self.is_cpu()) {
    HostToDevice(self, destination);
  } else if (destination.is_cpu()) {
    DeviceToHost(self, destination);
  } else {
    DeviceToDevice(self, destination);
  }
  return destination;
}

at::Tensor CopyFromAndResize(const at::Tensor& self, const at::Tensor& destination) {
  if (destination.sizes() != self.sizes()) destination.resize_(self.sizes());
  return CopyFrom(self, destination, false);
}

c10::Scalar LocalScalarDense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  exec::DeferredGraph::Get().Flush("item");
  at::Tensor host = at::empty(self.sizes(), self.options().device(c10::kCPU));
  DeviceToHost(self, host);
  return host.item();
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", CopyFrom);
  m.impl("_copy_from_and_resize", CopyFromAndResize);
  m.impl("_local_scalar_dense", LocalScalarDense);
}

// copy_ passes lazily conjugated or negated tensors straight to _copy_from on non-CPU devices,
// where PyTorch's math-bit fallback would resolve the destination into a temporary and drop the
// write. CopyFrom honours both bits itself (the executor reads and writes views through them).
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

}  // namespace
}  // namespace torch_tpu::aten

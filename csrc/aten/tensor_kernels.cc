// Kernels that only touch tensor metadata or storage allocation: factories, views, resize_, set_.
// Views are ordinary TensorImpls on the same storage (see exec/view_io.h for how reads and writes
// of them become StableHLO), so PyTorch's own metadata-only kernels are reused for them.
#include <ATen/EmptyTensor.h>
#include <ATen/InferSize.h>
#include <ATen/TensorUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include "runtime/device.h"
#include "runtime/storage.h"

namespace torch_tpu::aten {
namespace {

constexpr c10::DispatchKey kKey = c10::DispatchKey::PrivateUse1;

void CheckOptions(std::optional<c10::Layout> layout, std::optional<bool> pin_memory,
                  const char* op) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, op,
              ": only strided tensors are supported on tpu");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), op,
              ": pin_memory applies to CPU tensors, not tpu ones");
}

// Makes `device` current for allocation when it names a specific tpu.
struct AllocationDevice {
  explicit AllocationDevice(std::optional<c10::Device> device)
      : previous(runtime::CurrentDevice()) {
    if (device && device->has_index() && device->index() != previous) {
      runtime::SetCurrentDevice(device->index());
    }
  }
  ~AllocationDevice() {
    if (runtime::CurrentDevice() != previous) runtime::SetCurrentDevice(previous);
  }
  int previous;
};

at::Tensor Empty(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                 std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                 std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  CheckOptions(layout, pin_memory, "empty");
  AllocationDevice guard(device);
  return at::detail::empty_generic(size, runtime::TpuAllocator(), c10::DispatchKeySet(kKey),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor EmptyStrided(c10::IntArrayRef size, c10::IntArrayRef stride,
                        std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                        std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  CheckOptions(layout, pin_memory, "empty_strided");
  AllocationDevice guard(device);
  return at::detail::empty_strided_generic(size, stride, runtime::TpuAllocator(),
                                           c10::DispatchKeySet(kKey), c10::dtype_or_default(dtype));
}

// Grows the storage (never shrinks it, like CPU) so that `self` with its current geometry fits.
void EnsureStorageFits(at::TensorImpl* self) {
  if (self->numel() == 0) return;
  const size_t needed = at::detail::computeStorageNbytes(
      self->sizes(), self->strides(), self->dtype().itemsize(), self->storage_offset());
  const c10::Storage& storage = self->unsafe_storage();
  if (needed > storage.nbytes()) {
    runtime::DeviceScope device(storage.device().index());  // the storage stays on its device
    at::native::resize_bytes_nocuda(storage, needed);
  }
}

const at::Tensor& Resize(const at::Tensor& self, c10::IntArrayRef size,
                         std::optional<c10::MemoryFormat> memory_format) {
  at::TensorImpl* impl = self.unsafeGetTensorImpl();
  if (self.sizes() == size && !memory_format) return self;
  impl->set_sizes_contiguous(size);
  const auto format = memory_format.value_or(c10::MemoryFormat::Contiguous);
  if (format != c10::MemoryFormat::Contiguous) impl->empty_tensor_restride(format);
  EnsureStorageFits(impl);
  return self;
}

at::Tensor& SetStorage(at::Tensor& self, c10::Storage source, int64_t storage_offset,
                       c10::IntArrayRef size, c10::IntArrayRef stride) {
  TORCH_CHECK(source.device_type() == c10::DeviceType::PrivateUse1,
              "set_: expected a tpu storage, got one on ", source.device());
  TORCH_CHECK(storage_offset >= 0, "set_: storage offset must be non-negative, got ",
              storage_offset);
  at::TensorImpl* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(storage_offset);
  if (stride.empty()) {
    impl->set_sizes_contiguous(size);
  } else {
    TORCH_CHECK(size.size() == stride.size(), "set_: got ", size.size(), " sizes and ",
                stride.size(), " strides");
    impl->set_sizes_and_strides(size, stride);
  }
  EnsureStorageFits(impl);
  return self;
}

at::Tensor& SetSourceStorage(at::Tensor& self, c10::Storage source) {
  const int64_t elements = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return SetStorage(self, std::move(source), 0, {elements}, {});
}

at::Tensor& SetSourceTensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return SetStorage(self, source.storage(), source.storage_offset(), source.sizes(),
                    source.strides());
}

at::Tensor& SetEmpty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, runtime::TpuAllocator(),
                       /*resizable=*/true);
  return SetStorage(self, std::move(storage), 0, {0}, {});
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", Empty);
  m.impl("empty_strided", EmptyStrided);
  m.impl("view", at::native::view);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("unfold", at::native::unfold);
  m.impl("alias", at::native::alias);
  // Both reinterpret the same storage with another dtype and shape (exec/view_io reads complex
  // storage as float pairs and back), so writes through either show in the other.
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
  m.impl("resize_", Resize);
  m.impl("set_.source_Storage_storage_offset", SetStorage);
  m.impl("set_.source_Storage", SetSourceStorage);
  m.impl("set_.source_Tensor", SetSourceTensor);
  m.impl("set_", SetEmpty);
}

}  // namespace
}  // namespace torch_tpu::aten

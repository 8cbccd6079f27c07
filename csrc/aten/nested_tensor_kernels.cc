// Nested (strided-layout) tensors on tpu. PyTorch builds them itself in a few places users meet
// without asking for them, most visibly nn.TransformerEncoder's inference fast path, which packs
// the batch by src_key_padding_mask into a nested tensor on the input's device. A nested tpu
// tensor is a dense 1-D tpu buffer plus its layout (sizes, strides, offsets: CPU tensors), so
// moving one between devices moves the buffer. The transformer fast path's nested ops are device
// kernels (nested_transformer_kernels.cc); other ops on nested tpu tensors run through the
// explicit CPU fallback (counted and warned like every other fallback op).
#include <ATen/NestedTensorImpl.h>
#include <ATen/native/nested/NestedTensorUtils.h>
#include <ATen/ops/_to_copy.h>
#include <torch/library.h>

#include "aten/fallback.h"

namespace torch_tpu::aten {
namespace {

at::Tensor NestedToCopy(const at::Tensor& self, std::optional<at::ScalarType> dtype,
                        std::optional<at::Layout> layout, std::optional<at::Device> device,
                        std::optional<bool> pin_memory, bool non_blocking,
                        std::optional<at::MemoryFormat> memory_format) {
  TORCH_CHECK(!layout.has_value() || *layout == at::kStrided, "_to_copy: a nested tensor on ",
              self.device(), " converts only to the strided layout, not ", *layout);
  TORCH_CHECK(!memory_format.has_value() || *memory_format == at::MemoryFormat::Preserve,
              "_to_copy: a nested tensor on ", self.device(),
              " keeps its memory format; got memory_format=", *memory_format);
  const at::native::NestedTensorImpl* nested = at::native::get_nested_tensor_impl(self);
  at::Tensor buffer =
      at::_to_copy(nested->get_unsafe_storage_as_tensor(), dtype, layout, device, pin_memory,
                   non_blocking, std::nullopt);
  return at::native::wrap_buffer(std::move(buffer), nested->get_nested_sizes().clone(),
                                 nested->get_nested_strides().clone(),
                                 nested->get_storage_offsets().clone());
}

at::Tensor ToDevice(const at::Tensor& tensor, at::Device device) {
  if (tensor.is_nested()) {
    return NestedToCopy(tensor, std::nullopt, std::nullopt, device, std::nullopt, false,
                        std::nullopt);
  }
  return at::_to_copy(tensor, std::nullopt, std::nullopt, device, std::nullopt, false, std::nullopt);
}

// at::native::cpu_fallback copies arguments by their dense sizes, which a nested tensor lacks;
// this one moves each tensor whole. Ops that write their arguments are refused rather than run
// on copies the caller never sees.
void NestedCpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  for (const c10::Argument& argument : schema.arguments()) {
    TORCH_CHECK_NOT_IMPLEMENTED(!argument.alias_info() || !argument.alias_info()->isWrite(),
                                schema.operator_name(),
                                ": writing into a nested tensor on tpu is not supported");
  }
  RecordFallback(op);
  std::optional<at::Device> device;
  const size_t count = schema.arguments().size();
  for (auto it = stack->end() - count; it != stack->end(); ++it) {
    auto move = [&](const at::Tensor& tensor) {
      if (!tensor.defined() || tensor.device().type() != c10::DeviceType::PrivateUse1) {
        return tensor;
      }
      device = tensor.device();
      return ToDevice(tensor, at::kCPU);
    };
    if (it->isTensor()) {
      *it = move(it->toTensor());
    } else if (it->isTensorList()) {
      std::vector<at::Tensor> moved;
      for (const at::Tensor& tensor : it->toTensorList()) moved.push_back(move(tensor));
      *it = c10::IValue(moved);
    }
  }
  op.callBoxed(stack);
  TORCH_INTERNAL_ASSERT(device.has_value());
  for (auto it = stack->end() - schema.returns().size(); it != stack->end(); ++it) {
    if (it->isTensor() && it->toTensor().defined()) *it = ToDevice(it->toTensor(), *device);
  }
}

// The layout accessors return the host tensors, as on CPU and CUDA (the fallback would copy them
// to the device and count a fallback for metadata).
at::Tensor NestedSizes(const at::Tensor& self) {
  return at::native::get_nested_tensor_impl(self)->get_nested_sizes().clone();
}

at::Tensor NestedStrides(const at::Tensor& self) {
  return at::native::get_nested_tensor_impl(self)->get_nested_strides().clone();
}

at::Tensor NestedStorageOffsets(const at::Tensor& self) {
  return at::native::get_nested_tensor_impl(self)->get_storage_offsets().clone();
}

TORCH_LIBRARY_IMPL(aten, NestedTensorPrivateUse1, m) {
  m.impl("_to_copy", NestedToCopy);
  m.impl("_nested_tensor_size", NestedSizes);
  m.impl("_nested_tensor_strides", NestedStrides);
  m.impl("_nested_tensor_storage_offsets", NestedStorageOffsets);
}

TORCH_LIBRARY_IMPL(_, NestedTensorPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&NestedCpuFallback>());
}

}  // namespace
}  // namespace torch_tpu::aten

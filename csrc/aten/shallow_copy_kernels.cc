// Whether `param.data = other` may swap a tensor's contents in place across devices.
//
// nn.Module.to(), .cpu() and `param.data = t` keep Parameter objects (and so tied weights and
// optimizers holding them) only when aten::_has_compatible_shallow_copy_type says the two
// tensors are interchangeable. c10's answer lists the built-in dense backends but not
// PrivateUse1, so without this kernel every .to("tpu") would create new Parameters. The op is
// CompositeImplicitAutograd: a kernel for AutogradPrivateUse1 is chosen whenever either argument
// is a tpu tensor, which covers both directions.
#include <ATen/core/Tensor.h>
#include <torch/library.h>

namespace torch_tpu::aten {
namespace {

// Dense strided tensors of backends whose TensorImpls are plain (no backend-specific subclass),
// so a shallow copy between them is just a metadata and storage swap.
bool IsPlainDense(const at::Tensor& tensor) {
  constexpr auto kPlainBackends = c10::DispatchKeySet(
      {c10::BackendComponent::CPUBit, c10::BackendComponent::CUDABit, c10::BackendComponent::MPSBit,
       c10::BackendComponent::HIPBit, c10::BackendComponent::XPUBit, c10::BackendComponent::HPUBit,
       c10::BackendComponent::MTIABit, c10::BackendComponent::PrivateUse1Bit});
  const c10::DispatchKeySet keys = tensor.key_set();
  return tensor.layout() == c10::kStrided && keys.has(c10::DispatchKey::Dense) &&
         keys.has_any(kPlainBackends);
}

bool HasCompatibleShallowCopyType(const at::Tensor& self, const at::Tensor& from) {
  if (self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set())) return true;
  return IsPlainDense(self) && IsPlainDense(from);
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", HasCompatibleShallowCopyType);
}

}  // namespace
}  // namespace torch_tpu::aten

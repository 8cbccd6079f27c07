#include "aten/output_layout.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_strided.h>
#include <c10/util/Exception.h>

namespace torch_tpu::aten {
namespace {

at::Tensor OnMeta(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.device().is_privateuseone()) return tensor;
  return at::empty_strided(tensor.sizes(), tensor.strides(),
                           tensor.options().device(c10::kMeta));
}

c10::IValue OnMeta(const c10::IValue& value) {
  if (value.isTensor()) return OnMeta(value.toTensor());
  if (value.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& tensor : value.toTensorList()) list.push_back(OnMeta(tensor));
    return list;
  }
  if (value.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> list;
    for (const auto& entry : value.toOptionalTensorList()) {
      const std::optional<at::Tensor> tensor = entry;
      list.push_back(tensor.has_value() ? std::optional<at::Tensor>(OnMeta(*tensor))
                                        : std::nullopt);
    }
    return list;
  }
  return value;
}

}  // namespace

std::vector<std::vector<int64_t>> MetaOutputStrides(const c10::OperatorHandle& op,
                                                    const std::vector<c10::IValue>& arguments) {
  std::vector<std::vector<int64_t>> strides;
  try {
    torch::jit::Stack stack;
    stack.reserve(arguments.size());
    for (const c10::IValue& argument : arguments) stack.push_back(OnMeta(argument));
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &stack);
    for (const c10::IValue& result : stack) {
      if (result.isTensorList()) {  // foreach ops
        for (const at::Tensor& tensor : result.toTensorList()) {
          strides.push_back(tensor.strides().vec());
        }
        continue;
      }
      if (!result.isTensor()) return {};
      strides.push_back(result.toTensor().strides().vec());
    }
  } catch (const std::exception&) {
    return {};  // no meta kernel (or one that needs data): contiguous results
  }
  return strides;
}

}  // namespace torch_tpu::aten

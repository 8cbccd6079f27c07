#include "aten/output_layout.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_strided.h>
#include <c10/util/Exception.h>

#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>

#include "exec/program_builder.h"
#include "runtime/metrics.h"

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

// For each value, how many of `values` are smaller: the relative order, ties kept.
void AddRanks(std::ostringstream& out, c10::IntArrayRef values) {
  for (int64_t value : values) {
    int64_t rank = 0;
    for (int64_t other : values) rank += other < value;
    out << rank << ',';
  }
  out << ';';
}

void AddLayout(std::ostringstream& out, const at::Tensor& tensor) {
  if (!tensor.defined()) {
    out << "u|";
    return;
  }
  out << static_cast<int>(tensor.scalar_type()) << ':' << tensor.dim() << ':'
      << static_cast<int>(tensor.device().type()) << ':';
  AddRanks(out, tensor.sizes());
  AddRanks(out, tensor.strides());
  for (int64_t size : tensor.sizes()) out << (size == 0 ? '0' : size == 1 ? '1' : 'n');
  for (int64_t stride : tensor.strides()) out << (stride == 0 ? 'z' : 'n');
  out << tensor.is_contiguous() << tensor.is_non_overlapping_and_dense();
  if (tensor.dim() == 4) out << tensor.is_contiguous(at::MemoryFormat::ChannelsLast);
  if (tensor.dim() == 5) out << tensor.is_contiguous(at::MemoryFormat::ChannelsLast3d);
  out << '|';
}

std::string LayoutSignature(const c10::OperatorHandle& op,
                            const std::vector<c10::IValue>& arguments) {
  std::ostringstream out;
  out << op.operator_name() << '#' << op.schema().overload_name() << '|';
  for (const c10::IValue& argument : arguments) {
    if (argument.isTensor()) {
      AddLayout(out, argument.toTensor());
    } else if (argument.isTensorList()) {
      for (const at::Tensor& tensor : argument.toTensorList()) AddLayout(out, tensor);
      out << "]|";
    } else if (argument.isOptionalTensorList()) {
      for (const std::optional<at::Tensor>& tensor : argument.toOptionalTensorList()) {
        AddLayout(out, tensor.has_value() ? *tensor : at::Tensor());
      }
      out << "]|";
    } else {
      out << argument << '|';
    }
  }
  return out.str();
}

}  // namespace

std::vector<std::vector<int64_t>> MetaOutputDimOrders(const c10::OperatorHandle& op,
                                                      const std::vector<c10::IValue>& arguments) {
  static std::mutex mutex;
  using Orders = std::vector<std::vector<int64_t>>;
  static auto* remembered = new std::unordered_map<std::string, Orders>();
  const std::string signature = LayoutSignature(op, arguments);
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto found = remembered->find(signature);
    if (found != remembered->end()) return found->second;
  }
  std::vector<std::vector<int64_t>> orders;
  for (const std::vector<int64_t>& strides : MetaOutputStrides(op, arguments)) {
    orders.push_back(exec::OuterToInnerOrder(strides));
  }
  std::lock_guard<std::mutex> lock(mutex);
  if (remembered->size() >= 16384) remembered->clear();  // a bound, not an LRU: rarely reached
  remembered->emplace(signature, orders);
  return orders;
}

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
  } catch (const std::exception& error) {
    // Contiguous results, which may differ from CPU's strides: counted with the reason, so a
    // layout difference can be traced to its op.
    const std::string message(error.what());
    runtime::Metrics::Get().RecordReason(
        "contiguous_layout_fallbacks",
        c10::toString(op.operator_name()) + ": " + message.substr(0, message.find('\n')));
    return {};
  }
  return strides;
}

}  // namespace torch_tpu::aten

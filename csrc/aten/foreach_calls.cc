#include "aten/foreach_calls.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cctype>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace torch_tpu::aten {
namespace {

bool ConsumesArgument(char letter) { return std::isupper(static_cast<unsigned char>(letter)); }

// PyTorch's checks (ATen/native/ForeachUtils.h), with its messages. Returns the list length.
size_t CheckLengths(const lowering::ForeachForm& form, const std::vector<c10::IValue>& arguments) {
  std::optional<size_t> count;
  size_t position = 0;
  for (char letter : form.arguments) {
    if (!ConsumesArgument(letter)) continue;
    const c10::IValue& value = arguments.at(position++);
    if (letter == 'T') {
      const size_t size = value.toListRef().size();
      TORCH_CHECK(size > 0, "Tensor list must have at least one tensor.");
      TORCH_CHECK(!count || *count == size,
                  "Tensor lists must have the same number of tensors, got ", *count, " and ",
                  size);
      count = size;
    } else if (letter == 'L') {
      TORCH_CHECK(value.toListRef().size() == count.value_or(0),
                  "Tensor list must have same number of elements as scalar list.");
    }
  }
  TORCH_INTERNAL_ASSERT(count.has_value() && position == arguments.size(),
                        "foreach form does not fit its schema: ", form.element);
  return *count;
}

const c10::StorageImpl* StorageOf(const at::Tensor& tensor) {
  return tensor.storage().unsafeGetStorageImpl();
}

bool SameView(const at::Tensor& a, const at::Tensor& b) {
  return StorageOf(a) == StorageOf(b) && a.storage_offset() == b.storage_offset() &&
         a.sizes().equals(b.sizes()) && a.strides().equals(b.strides()) &&
         a.scalar_type() == b.scalar_type();
}

bool NeedsPerElement(const lowering::ForeachForm& form, bool in_place,
                     const std::vector<c10::IValue>& arguments) {
  std::optional<c10::Device> device;
  bool one_device = true;
  auto visit = [&](const at::Tensor& tensor) {
    if (!tensor.device().is_privateuseone()) {
      one_device = false;
    } else if (!device) {
      device = tensor.device();
    } else {
      one_device = one_device && *device == tensor.device();
    }
  };
  size_t position = 0;
  for (char letter : form.arguments) {
    if (!ConsumesArgument(letter)) continue;
    const c10::IValue& value = arguments[position++];
    if (letter == 'T') {
      for (const c10::IValue& tensor : value.toListRef()) visit(tensor.toTensor());
    } else if (letter == 'X' && value.isTensor()) {
      const at::Tensor& tensor = value.toTensor();
      // A 0-d CPU tensor is a scalar argument, as for the element op.
      if (tensor.device().is_privateuseone() || tensor.dim() != 0) visit(tensor);
    }
  }
  if (!one_device) return true;
  if (!in_place) return false;

  // The element ops write self[i] one after another; one program reads everything first.
  const auto written = arguments[0].toListRef();
  std::unordered_map<const c10::StorageImpl*, size_t> writer;
  for (size_t i = 0; i < written.size(); ++i) {
    const at::Tensor& tensor = written[i].toTensor();
    if (at::has_internal_overlap(tensor) == at::MemOverlap::Yes) return true;
    if (!writer.emplace(StorageOf(tensor), i).second) return true;
  }
  position = 0;
  for (char letter : form.arguments) {
    if (!ConsumesArgument(letter)) continue;
    const size_t argument = position++;
    if (argument == 0) continue;
    const c10::IValue& value = arguments[argument];
    if (letter == 'X' && value.isTensor() && writer.count(StorageOf(value.toTensor()))) {
      return true;
    }
    if (letter != 'T') continue;
    const auto list = value.toListRef();
    for (size_t i = 0; i < list.size(); ++i) {
      const at::Tensor& tensor = list[i].toTensor();
      auto it = writer.find(StorageOf(tensor));
      if (it == writer.end()) continue;
      if (it->second != i || !SameView(tensor, written[i].toTensor())) return true;
    }
  }
  return false;
}

// PyTorch's per-tensor loop: the element op (in-place or functional) for each element.
void RunPerElement(const lowering::ForeachForm& form, bool in_place, size_t count,
                   const std::vector<c10::IValue>& arguments, torch::jit::Stack* stack) {
  const std::string& name = in_place ? form.element_in_place : form.element;
  const size_t dot = name.find('.');
  const c10::OperatorHandle element = c10::Dispatcher::singleton().findSchemaOrThrow(
      name.substr(0, dot).c_str(), dot == std::string::npos ? "" : name.c_str() + dot + 1);
  const auto& declared = element.schema().arguments();
  std::vector<at::Tensor> results;
  for (size_t i = 0; i < count; ++i) {
    torch::jit::Stack call;
    size_t position = 0;
    for (char letter : form.arguments) {
      switch (letter) {
        case 'T':
        case 'L':
          call.push_back(arguments[position++].toListRef()[i]);
          break;
        case 'n':
          call.emplace_back();
          break;
        case 'f':
          call.emplace_back(false);
          break;
        default:
          call.push_back(arguments[position++]);
          break;
      }
    }
    for (size_t k = call.size(); k < declared.size(); ++k) {
      call.push_back(declared[k].default_value().value());
    }
    element.callBoxed(call);
    if (!in_place) results.push_back(call.at(0).toTensor());
  }
  if (!in_place) torch::jit::push(*stack, c10::List<at::Tensor>(results));
}

// Whether the element op carries ATen's pointwise tag (asked once per form).
bool ElementIsPointwise(const lowering::ForeachForm& form) {
  static std::mutex mutex;
  static std::unordered_map<const lowering::ForeachForm*, bool> known;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find(&form);
  if (it != known.end()) return it->second;
  const size_t dot = form.element.find('.');
  const auto element = c10::Dispatcher::singleton().findSchema(
      {form.element.substr(0, dot), dot == std::string::npos ? "" : form.element.substr(dot + 1)});
  const bool pointwise = element.has_value() && element->hasTag(at::Tag::pointwise);
  return known.emplace(&form, pointwise).first->second;
}

}  // namespace

std::optional<std::vector<std::vector<int64_t>>> FlattenedForeachShapes(
    const lowering::ForeachForm& form, const std::vector<c10::IValue>& arguments) {
  if (!ElementIsPointwise(form)) return std::nullopt;
  std::vector<std::vector<int64_t>> shapes;
  bool worth_it = false;
  size_t position = 0;
  for (char letter : form.arguments) {
    if (!ConsumesArgument(letter)) continue;
    const c10::IValue& value = arguments[position++];
    if (letter == 'X' && value.isTensor() && value.toTensor().dim() != 0) return std::nullopt;
    if (letter != 'T') continue;
    const auto list = value.toListRef();
    const bool first = shapes.empty();
    if (!first && list.size() != shapes.size()) return std::nullopt;
    for (size_t i = 0; i < list.size(); ++i) {
      const at::Tensor& tensor = list[i].toTensor();
      if (!tensor.is_contiguous()) return std::nullopt;
      if (first) {
        shapes.push_back(tensor.sizes().vec());
      } else if (!tensor.sizes().equals(shapes[i])) {
        return std::nullopt;
      }
      worth_it = worth_it || tensor.dim() >= 2;
    }
  }
  if (!worth_it) return std::nullopt;
  return shapes;
}

bool RunForeachPerElementWhereNeeded(const lowering::ForeachForm& form, bool in_place,
                                     const std::vector<c10::IValue>& arguments,
                                     torch::jit::Stack* stack) {
  const size_t count = CheckLengths(form, arguments);
  if (!NeedsPerElement(form, in_place, arguments)) return false;
  RunPerElement(form, in_place, count, arguments, stack);
  return true;
}

}  // namespace torch_tpu::aten

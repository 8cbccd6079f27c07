#include "aten/write_checks.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/copy_native.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_set>
#include <vector>

namespace torch_tpu::aten {
namespace {

enum class OverlapRule {
  kPartial,     // TensorIterator ops: only partial overlap of an output with an input raises
  kAnyButSelf,  // any overlap with an input raises, except `self`, which out= may name again
  kAny,         // any overlap of an output with any input raises
  kNone,        // CPU's kernel does not check: neither do we
};

// Ops named by their base name (no overload), matching what their CPU kernels check.
OverlapRule RuleFor(const std::string& name) {
  static const std::unordered_set<std::string> any = {"aten::cat",          "aten::stack",
                                                      "aten::index_select", "aten::gather",
                                                      "aten::take",         "aten::index"};
  static const std::unordered_set<std::string> any_but_self = {"aten::scatter",
                                                               "aten::scatter_",
                                                               "aten::scatter_add",
                                                               "aten::scatter_add_",
                                                               "aten::scatter_reduce",
                                                               "aten::scatter_reduce_",
                                                               "aten::index_add",
                                                               "aten::index_add_",
                                                               "aten::index_reduce",
                                                               "aten::index_reduce_",
                                                               "aten::index_put",
                                                               "aten::index_put_",
                                                               "aten::_index_put_impl",
                                                               "aten::_index_put_impl_",
                                                               "aten::index_copy",
                                                               "aten::index_copy_",
                                                               "aten::put",
                                                               "aten::put_",
                                                               "aten::masked_scatter",
                                                               "aten::masked_scatter_"};
  static const std::unordered_set<std::string> none = {
      // reductions
      "aten::sum", "aten::nansum", "aten::mean", "aten::amax", "aten::amin", "aten::prod",
      "aten::std", "aten::var", "aten::norm", "aten::linalg_vector_norm", "aten::logsumexp",
      "aten::all", "aten::any", "aten::argmax", "aten::argmin",
      // matrix products without checks
      "aten::mm", "aten::bmm", "aten::addmm", "aten::addmm_", "aten::dot", "aten::vdot",
      // others whose CPU kernels skip the check
      "aten::_softmax", "aten::_log_softmax", "aten::_softmax_backward_data",
      "aten::_log_softmax_backward_data", "aten::tril", "aten::tril_", "aten::triu", "aten::triu_",
      "aten::flip", "aten::avg_pool2d", "aten::_adaptive_avg_pool2d",
      "aten::max_pool2d_with_indices", "aten::max_pool3d_with_indices",
      "aten::binary_cross_entropy", "aten::isin", "aten::threshold", "aten::threshold_",
      // filling an expanded tensor with one value is well defined
      "aten::fill_", "aten::zero_", "aten::masked_fill_"};
  if (any.count(name)) return OverlapRule::kAny;
  if (any_but_self.count(name)) return OverlapRule::kAnyButSelf;
  if (none.count(name)) return OverlapRule::kNone;
  return OverlapRule::kPartial;
}

// index_put_ and masked_fill_ on expanded tensors only warn on CPU (a deprecation).
bool ChecksInternalOverlap(const std::string& name) {
  return name.rfind("aten::index_put", 0) != 0 && name.rfind("aten::_index_put_impl", 0) != 0;
}

bool IsWritten(const c10::Argument& argument) {
  return argument.alias_info() != nullptr && argument.alias_info()->isWrite();
}

// Whether two of `tensor`'s elements are one memory location. Exact, where ATen's
// has_internal_overlap only recognizes stride-0 dims and answers "too hard" otherwise (unfold,
// as_strided windows), so CPU's kernels compute those writes one element after another.
bool ElementsShareMemory(const at::Tensor& tensor) {
  if (tensor.is_non_overlapping_and_dense()) return false;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of dims with several elements
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    if (tensor.size(d) == 0) return false;
    if (tensor.size(d) > 1) dims.emplace_back(tensor.stride(d), tensor.size(d));
  }
  std::sort(dims.begin(), dims.end());
  // Strides that nest (each at least the extent of the smaller ones) never meet: slices,
  // transposes, steps. This decides nearly every written view without visiting its elements.
  int64_t extent = 1;
  bool nested = true;
  for (const auto& [stride, size] : dims) {
    if (stride == 0) return true;
    if (stride < extent) nested = false;
    extent = std::max(extent, stride * (size - 1) + extent);
  }
  if (nested) return false;
  // Otherwise list every element's offset and look for a repeat.
  std::vector<int64_t> offsets;
  offsets.reserve(static_cast<size_t>(tensor.numel()));
  std::vector<int64_t> index(dims.size(), 0);
  int64_t offset = 0;
  for (size_t d = 0; d < dims.size();) {
    offsets.push_back(offset);
    for (d = 0; d < dims.size(); ++d) {
      if (++index[d] < dims[d].second) {
        offset += dims[d].first;
        break;
      }
      offset -= dims[d].first * (dims[d].second - 1);
      index[d] = 0;
    }
  }
  std::sort(offsets.begin(), offsets.end());
  return std::adjacent_find(offsets.begin(), offsets.end()) != offsets.end();
}

// A write to `written` whose elements share memory, which CPU's kernels do not reject (they write
// element after element, so later elements see earlier writes; which answer that gives depends
// on their iteration order). Ours compute every element from the old values before writing any
// and write the aliased elements in no defined order, so no answer of ours would be CPU's.
void RejectSelfOverlappingWrite(const std::string& op, const at::Tensor& written) {
  if (!ElementsShareMemory(written)) return;
  std::ostringstream geometry;
  geometry << "sizes " << written.sizes() << ", strides " << written.strides()
           << ", storage offset " << written.storage_offset();
  TORCH_CHECK(false, op.substr(op.find("::") + 2),
              ": unsupported operation on tpu: more than one element of the written-to tensor ("
              , geometry.str(),
              ") refers to a single memory location, and tpu cannot reproduce the element-by-"
              "element result CPU computes for such a write. Please clone() the tensor before "
              "performing the operation.");
}

// Filling writes one value to every element, so aliased elements agree whatever the order.
bool WritesOneValue(const std::string& name) {
  return name == "aten::fill_" || name == "aten::zero_" || name == "aten::_foreach_zero_";
}

template <typename Visit>
void ForEachTensor(const c10::IValue& value, Visit&& visit) {
  if (value.isTensor()) {
    if (value.toTensor().defined()) visit(value.toTensor());
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) {
      if (element.isTensor() && element.toTensor().defined()) visit(element.toTensor());
    }
  }
}

// copy_ reaches our _copy_from without passing ATen's overlap checks (those sit behind the
// TensorIterator that only CPU/CUDA copies build), so this kernel adds them and otherwise runs
// ATen's own copy_.
at::Tensor& Copy(at::Tensor& self, const at::Tensor& source, bool non_blocking) {
  const bool same_view =
      self.is_alias_of(source) && self.storage_offset() == source.storage_offset() &&
      self.sizes().equals(source.sizes()) && self.strides().equals(source.strides()) &&
      self.scalar_type() == source.scalar_type();
  if (!self.is_same(source) && !same_view) {
    at::assert_no_internal_overlap(self);
    RejectSelfOverlappingWrite("aten::copy_", self);
    at::assert_no_partial_overlap(self, source);
  }
  return at::native::copy_(self, source, non_blocking);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("copy_", Copy); }

void CheckOverlap(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& arguments) {
  const auto& declared = schema.arguments();
  const std::string& name = schema.name();
  const OverlapRule rule = RuleFor(name);
  for (size_t w = 0; w < declared.size(); ++w) {
    if (!IsWritten(declared[w])) continue;
    if (arguments[w].isList() && !WritesOneValue(name)) {
      // Foreach lists: CPU runs the op tensor by tensor, with each one's checks.
      ForEachTensor(arguments[w], [&](const at::Tensor& written) {
        at::assert_no_internal_overlap(written);
        RejectSelfOverlappingWrite(name, written);
      });
    }
    if (!arguments[w].isTensor()) continue;
    const at::Tensor& written = arguments[w].toTensor();
    if (!written.defined()) continue;
    if (rule != OverlapRule::kNone && ChecksInternalOverlap(name)) {
      at::assert_no_internal_overlap(written);  // CPU's own error where CPU raises
    }
    if (!WritesOneValue(name)) RejectSelfOverlappingWrite(name, written);
    if (rule == OverlapRule::kNone) continue;
    for (size_t i = 0; i < declared.size(); ++i) {
      if (IsWritten(declared[i])) continue;
      const bool any_overlap = rule == OverlapRule::kAny ||
                               (rule == OverlapRule::kAnyButSelf && declared[i].name() != "self");
      ForEachTensor(arguments[i], [&](const at::Tensor& input) {
        if (any_overlap) {
          at::assert_no_overlap(written, input);
        } else {
          at::assert_no_partial_overlap(written, input);
        }
      });
    }
  }
}

bool IsIndexList(const c10::Argument& argument) {
  const auto list = argument.type()->cast<c10::ListType>();
  return list && list->getElementType()->cast<c10::OptionalType>();
}

void CheckDevices(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& arguments) {
  const auto& declared = schema.arguments();
  std::optional<c10::Device> device;
  for (const c10::IValue& value : arguments) {
    ForEachTensor(value, [&](const at::Tensor& tensor) {
      if (!device && tensor.device().is_privateuseone()) device = tensor.device();
    });
  }
  if (!device) return;
  for (size_t i = 0; i < declared.size(); ++i) {
    const bool written = IsWritten(declared[i]);
    if (!written && IsIndexList(declared[i])) continue;
    ForEachTensor(arguments[i], [&](const at::Tensor& tensor) {
      if (tensor.device().is_privateuseone()) return;
      if (!written && tensor.device().is_cpu() && tensor.dim() == 0) return;
      TORCH_CHECK(false, schema.name().substr(schema.name().find("::") + 2),
                  ": expected all tensors to be on the same device, "
                  "but found at least two devices, ",
                  *device, " and ", tensor.device(), " (",
                  written ? "the written-to argument '" : "argument '", declared[i].name(), "')");
    });
  }
}

}  // namespace

void CheckWrites(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& arguments) {
  bool writes = false;
  for (const auto& argument : schema.arguments()) writes = writes || IsWritten(argument);
  if (!writes) return;
  CheckDevices(schema, arguments);
  CheckOverlap(schema, arguments);
}

}  // namespace torch_tpu::aten

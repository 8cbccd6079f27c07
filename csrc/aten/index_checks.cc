#include "aten/index_checks.h"

#include <c10/util/Exception.h>

#include <unordered_map>

#include "exec/eager.h"
#include "lowering/registry.h"

namespace torch_tpu::aten {
namespace {

struct IndexRule {
  int index_argument;     // position of the index tensor (or Tensor?[] list)
  int dim_argument;       // position of the int dim argument; -1: dim 0; -2: flattened input
  bool allow_negative;    // negative indices count from the end
  bool is_list = false;   // Tensor?[]: entry k indexes dim k
};

const std::unordered_map<std::string, IndexRule>& Rules() {
  static const std::unordered_map<std::string, IndexRule> rules = {
      {"aten::index_select", {2, 1, false}},
      {"aten::gather", {2, 1, false}},
      {"aten::scatter.src", {2, 1, false}},
      {"aten::scatter.value", {2, 1, false}},
      {"aten::scatter_add", {2, 1, false}},
      {"aten::index_add", {2, 1, false}},
      {"aten::embedding", {1, -1, false}},
      {"aten::take", {1, -2, true}},
      {"aten::index.Tensor", {1, 0, true, true}},
      {"aten::index_put", {1, 0, true, true}},
      {"aten::_index_put_impl", {1, 0, true, true}},
  };
  return rules;
}

// [min, max] of an index tensor, computed on the device.
std::pair<int64_t, int64_t> IndexRange(const at::Tensor& index) {
  exec::EagerLaunch launch("torch_tpu::index_bounds");
  launch.AddTensor(index);
  at::Tensor bounds =
      launch.Run(lowering::LoweringRegistry::Get().Function("torch_tpu::index_bounds"))[0].cpu();
  return {bounds[0].item<int64_t>(), bounds[1].item<int64_t>()};
}

void Check(const std::string& op, const at::Tensor& index, int64_t dim, int64_t size,
           bool allow_negative) {
  if (index.numel() == 0 || index.scalar_type() == at::kBool || index.scalar_type() == at::kByte) {
    return;
  }
  const auto [lowest, highest] = IndexRange(index);
  const int64_t lower_bound = allow_negative ? -size : 0;
  const int64_t bad = lowest < lower_bound ? lowest : highest;
  const std::string short_name = op.substr(op.find("::") + 2);
  TORCH_CHECK_INDEX(lowest >= lower_bound && highest < size, short_name, ": index ", bad,
                    " is out of bounds for dimension ", dim, " with size ", size,
                    " (checked because TORCH_TPU_LAUNCH_BLOCKING=1)");
}

}  // namespace

void CheckIndicesInDebugMode(const std::string& op, const std::vector<c10::IValue>& arguments) {
  auto it = Rules().find(op);
  if (it == Rules().end()) return;
  const IndexRule& rule = it->second;
  const at::Tensor& self = arguments[0].toTensor();
  if (rule.is_list) {
    const auto indices = arguments[rule.index_argument].toOptionalTensorList().vec();
    for (size_t k = 0; k < indices.size() && static_cast<int64_t>(k) < self.dim(); ++k) {
      if (indices[k].has_value() && indices[k]->defined()) {
        Check(op, *indices[k], static_cast<int64_t>(k), self.size(static_cast<int64_t>(k)),
              rule.allow_negative);
      }
    }
    return;
  }
  const at::Tensor& index = arguments[rule.index_argument].toTensor();
  if (rule.dim_argument == -2) {
    Check(op, index, 0, self.numel(), rule.allow_negative);
    return;
  }
  int64_t dim = rule.dim_argument == -1 ? 0 : arguments[rule.dim_argument].toInt();
  if (self.dim() == 0) {
    Check(op, index, 0, 1, rule.allow_negative);
    return;
  }
  dim = c10::maybe_wrap_dim(dim, self.dim());
  Check(op, index, dim, self.size(dim), rule.allow_negative);
}

}  // namespace torch_tpu::aten

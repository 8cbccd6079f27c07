#include "aten/index_checks.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/any.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/masked_select.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/result_type.h>
#include <c10/util/Exception.h>

#include <unordered_map>

#include "exec/eager.h"
#include "lowering/registry.h"

namespace torch_tpu::aten {
namespace {

constexpr const char* kWhy = " (checked because TORCH_TPU_LAUNCH_BLOCKING=1)";

// Where an op's index lives and what bounds it.
struct IndexRule {
  enum class Bound {
    kDim,          // self.size(dim), dim from an int argument (dim_argument)
    kFirstDim,     // self.size(0)
    kNumel,        // self.numel(): the flattened input
    kClassDim,     // classes of a loss input (argument `self_argument`): dim 1, or 0 when 1-d
    kIntArgument,  // the value of the int argument `bound_argument`
    kList,         // Tensor?[]: entry k indexes self dim k
  };
  int index_argument;
  Bound bound;
  bool allow_negative = false;  // negative indices count from the end
  int dim_argument = -1;
  int self_argument = 0;
  int bound_argument = -1;
  int ignored_argument = -1;  // an int argument whose value is skipped (ignore_index, padding_idx)
  const char* noun = "index";
};

// Keyed by base name: no overload, no in-place underscore (argument positions are shared by the
// functional, in-place and out= variants).
const std::unordered_map<std::string, IndexRule>& Rules() {
  using Bound = IndexRule::Bound;
  static const std::unordered_map<std::string, IndexRule> rules = {
      {"aten::index_select", {2, Bound::kDim, false, 1}},
      {"aten::gather", {2, Bound::kDim, false, 1}},
      {"aten::scatter", {2, Bound::kDim, false, 1}},
      {"aten::scatter_add", {2, Bound::kDim, false, 1}},
      {"aten::scatter_reduce", {2, Bound::kDim, false, 1}},
      {"aten::index_add", {2, Bound::kDim, false, 1}},
      {"aten::index_reduce", {2, Bound::kDim, false, 1}},
      {"aten::index_copy", {2, Bound::kDim, false, 1}},
      {"aten::index_fill", {2, Bound::kDim, true, 1}},
      {"aten::embedding", {1, Bound::kFirstDim}},
      // (grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
      {"aten::embedding_dense_backward", {1, Bound::kIntArgument, false, -1, 0, 2, 3}},
      // (weight, indices, offsets, ...): padding_idx is a valid row, so it needs no skipping
      {"aten::_embedding_bag", {1, Bound::kFirstDim}},
      {"aten::_embedding_bag_forward_only", {1, Bound::kFirstDim}},
      // (grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights, ...,
      //  padding_idx)
      {"aten::_embedding_bag_backward", {1, Bound::kIntArgument, false, -1, 0, 6, 11}},
      // (grad, indices, offset2bag, bag_size, maximum_indices, num_weights, ..., padding_idx)
      {"aten::_embedding_bag_dense_backward", {1, Bound::kIntArgument, false, -1, 0, 5, 9}},
      // (grad, weight, indices, offsets, offset2bag, mode, padding_idx)
      {"aten::_embedding_bag_per_sample_weights_backward", {2, Bound::kFirstDim, false, -1, 1}},
      {"aten::take", {1, Bound::kNumel, true}},
      {"aten::put", {1, Bound::kNumel, true}},
      {"aten::index", {1, Bound::kList, true}},
      {"aten::index_put", {1, Bound::kList, true}},
      {"aten::_index_put_impl", {1, Bound::kList, true}},
      // (self, target, weight, reduction, ignore_index)
      {"aten::nll_loss_forward", {1, Bound::kClassDim, false, -1, 0, -1, 4, "target"}},
      {"aten::nll_loss2d_forward", {1, Bound::kClassDim, false, -1, 0, -1, 4, "target"}},
      // (grad_output, self, target, weight, reduction, ignore_index, total_weight)
      {"aten::nll_loss_backward", {2, Bound::kClassDim, false, -1, 1, -1, 5, "target"}},
      {"aten::nll_loss2d_backward", {2, Bound::kClassDim, false, -1, 1, -1, 5, "target"}},
  };
  return rules;
}

std::string BaseName(const std::string& op) {
  std::string name = op.substr(0, op.find('.'));
  if (!name.empty() && name.back() == '_') name.pop_back();
  return name;
}

std::string ShortName(const std::string& op) { return op.substr(op.find("::") + 2); }

// [min, max] of an index tensor, computed on the device.
std::pair<int64_t, int64_t> IndexRange(const at::Tensor& index) {
  exec::EagerLaunch launch("torch_tpu::index_bounds");
  launch.AddTensor(index);
  at::Tensor bounds =
      launch.Run(lowering::LoweringRegistry::Get().Function("torch_tpu::index_bounds"))[0].cpu();
  return {bounds[0].item<int64_t>(), bounds[1].item<int64_t>()};
}

void Check(const std::string& op, at::Tensor index, int64_t dim, int64_t size, bool allow_negative,
           std::optional<int64_t> ignored = std::nullopt, const char* noun = "index") {
  if (index.scalar_type() == at::kBool || index.scalar_type() == at::kByte) return;
  if (ignored.has_value() && index.numel() > 0)
    index = at::masked_select(index, at::ne(index, *ignored));
  if (index.numel() == 0) return;
  if (!index.device().is_privateuseone())
    index = index.to(c10::Device(c10::DeviceType::PrivateUse1));
  const auto [lowest, highest] = IndexRange(index);
  const int64_t lower_bound = allow_negative ? -size : 0;
  const int64_t bad = lowest < lower_bound ? lowest : highest;
  TORCH_CHECK_INDEX(lowest >= lower_bound && highest < size, ShortName(op), ": ", noun, " ", bad,
                    " is out of bounds for dimension ", dim, " with size ", size, kWhy);
}

// Integer div (with a rounding mode), floor_divide, remainder and fmod by zero: CPU raises
// "ZeroDivisionError"; the device would return an arbitrary value.
void CheckIntegerDivision(const std::string& op, const std::string& base,
                          const std::vector<c10::IValue>& arguments) {
  static const std::unordered_map<std::string, bool> divisions = {
      // name -> whether it divides only with a rounding mode (argument 2)
      {"aten::div", true},
      {"aten::floor_divide", false},
      {"aten::remainder", false},
      {"aten::fmod", false}};
  const auto it = divisions.find(base);
  if (it == divisions.end() || arguments.size() < 2 || !arguments[0].isTensor()) return;
  if (it->second && (arguments.size() < 3 || !arguments[2].isString())) return;
  const at::Tensor& self = arguments[0].toTensor();
  const c10::IValue& other = arguments[1];
  bool zero = false;
  if (other.isTensor()) {
    const at::Tensor& divisor = other.toTensor();
    if (!c10::isIntegralType(at::result_type(self, divisor), /*includeBool=*/false)) return;
    zero = divisor.numel() > 0 && at::eq(divisor, 0).any().item<bool>();
  } else if (other.isScalar()) {
    const c10::Scalar divisor = other.toScalar();
    if (!c10::isIntegralType(at::result_type(self, divisor), /*includeBool=*/false)) return;
    zero = divisor.toLong() == 0;
  }
  TORCH_CHECK(!zero || self.numel() == 0, "ZeroDivisionError: ", ShortName(op),
              ": integer division by zero", kWhy);
}

}  // namespace

void CheckIndicesInDebugMode(const std::string& op, const std::vector<c10::IValue>& arguments) {
  const std::string base = BaseName(op);
  CheckIntegerDivision(op, base, arguments);
  auto it = Rules().find(base);
  if (it == Rules().end()) return;
  using Bound = IndexRule::Bound;
  const IndexRule& rule = it->second;
  const at::Tensor& self = arguments[rule.self_argument].toTensor();
  const c10::IValue& index_value = arguments[rule.index_argument];
  if (rule.bound == Bound::kList) {
    const auto& indices = index_value.toListRef();
    for (size_t k = 0; k < indices.size() && static_cast<int64_t>(k) < self.dim(); ++k) {
      if (indices[k].isTensor() && indices[k].toTensor().defined()) {
        const auto dim = static_cast<int64_t>(k);
        Check(op, indices[k].toTensor(), dim, self.size(dim), rule.allow_negative);
      }
    }
    return;
  }
  if (!index_value.isTensor()) return;
  const at::Tensor& index = index_value.toTensor();
  std::optional<int64_t> ignored;
  if (rule.ignored_argument >= 0 && arguments[rule.ignored_argument].isInt()) {
    ignored = arguments[rule.ignored_argument].toInt();
  }
  switch (rule.bound) {
    case Bound::kNumel:
      return Check(op, index, 0, self.numel(), rule.allow_negative);
    case Bound::kFirstDim:
      return Check(op, index, 0, self.dim() == 0 ? 1 : self.size(0), rule.allow_negative);
    case Bound::kIntArgument:
      return Check(op, index, 0, arguments[rule.bound_argument].toInt(), rule.allow_negative,
                   ignored);
    case Bound::kClassDim: {
      const int64_t dim = self.dim() <= 1 ? 0 : 1;
      return Check(op, index, dim, self.dim() == 0 ? 1 : self.size(dim), rule.allow_negative,
                   ignored, rule.noun);
    }
    case Bound::kDim: {
      if (self.dim() == 0) return Check(op, index, 0, 1, rule.allow_negative);
      const int64_t dim = c10::maybe_wrap_dim(arguments[rule.dim_argument].toInt(), self.dim());
      return Check(op, index, dim, self.size(dim), rule.allow_negative);
    }
    case Bound::kList:
      return;
  }
}

}  // namespace torch_tpu::aten

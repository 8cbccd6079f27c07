// sort, argsort-by-sort and topk via stablehlo.sort with an index operand.
#include <c10/util/Exception.h>

#include "lowering/context.h"

namespace torch_tpu::lowering {
namespace {

using stablehlo::ElementType;
using stablehlo::FunctionBuilder;
using stablehlo::TensorType;
using stablehlo::Value;
using Direction = FunctionBuilder::ComparisonDirection;

// (values, indices) of `x` sorted along `dim`; NaNs sort as the largest values, like PyTorch.
std::pair<Value, Value> SortAlong(LoweringContext& context, Value x, int64_t dim, bool descending,
                                  bool stable) {
  auto& b = context.builder();
  Value indices = b.Iota(TensorType{ElementType::kS64, x.dims()}, dim);
  const bool is_float = stablehlo::IsFloat(x.element_type());
  auto sorted =
      b.Sort({x, indices}, dim, stable,
             [descending, is_float](FunctionBuilder& body, std::span<const Value> args) {
               Value lhs = args[0], rhs = args[1];
               if (descending) std::swap(lhs, rhs);
               return std::vector<Value>{body.Compare(lhs, rhs, Direction::kLt, is_float)};
             });
  return {sorted[0], sorted[1]};
}

// sort.stable(self, *, bool? stable, int dim=-1, bool descending=False) and
// sort(self, int dim=-1, bool descending=False)
std::vector<Value> Sort(LoweringContext& context, std::span<const Operand> operands) {
  Value x = operands[0].value;
  // sort.stable has a `stable` flag before dim; sorting stably satisfies either request.
  const int64_t dim_index = operands.size() == 4 ? 2 : 1;
  if (x.rank() == 0) return {x, context.ConstantInt(0, c10::kLong)};
  const int64_t dim = context.WrapDim(context.Int(operands[dim_index]), x.rank());
  auto [values, indices] = SortAlong(context, x, dim, context.Bool(operands[dim_index + 1]),
                                     /*stable=*/true);
  return {values, indices};
}
TORCH_TPU_LOWERING(Sort, "aten::sort.stable", "aten::sort.values_stable");
TORCH_TPU_LOWERING(Sort, "aten::sort", "aten::sort.values");

// topk(self, SymInt k, int dim=-1, bool largest=True, bool sorted=True)
std::vector<Value> TopK(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value x = operands[0].value;
  const int64_t k = context.Int(operands[1]);
  if (x.rank() == 0) {
    TORCH_CHECK(k <= 1, context.op_name(), ": selected index k out of range");
    return {x, context.ConstantInt(0, c10::kLong)};
  }
  const int64_t dim = context.WrapDim(context.Int(operands[2]), x.rank());
  TORCH_CHECK(k >= 0 && k <= x.dims()[dim], context.op_name(), ": selected index k out of range");
  auto [values, indices] = SortAlong(context, x, dim, context.Bool(operands[3]), true);
  std::vector<int64_t> start(x.rank(), 0), limit = x.dims(), steps(x.rank(), 1);
  limit[dim] = k;
  return {b.Slice(values, start, limit, steps), b.Slice(indices, start, limit, steps)};
}
TORCH_TPU_LOWERING(TopK, "aten::topk", "aten::topk.values");

// kthvalue(self, int k, int dim=-1, bool keepdim=False) -> (values, indices)
std::vector<Value> KthValue(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value x = operands[0].value;
  const int64_t k = context.Int(operands[1]);
  if (x.rank() == 0) {
    TORCH_CHECK(k == 1, context.op_name(), ": kthvalue(): selected number k out of range");
    return {x, context.ConstantInt(0, c10::kLong)};
  }
  const int64_t dim = context.WrapDim(context.Int(operands[2]), x.rank());
  TORCH_CHECK(k >= 1 && k <= x.dims()[dim], context.op_name(),
              ": kthvalue(): selected number k out of range for dimension ", dim);
  auto [values, indices] = SortAlong(context, x, dim, false, true);
  std::vector<int64_t> start(x.rank(), 0), limit = x.dims(), steps(x.rank(), 1);
  start[dim] = k - 1;
  limit[dim] = k;
  Value value = b.Slice(values, start, limit, steps);
  Value index = b.Slice(indices, start, limit, steps);
  if (!context.Bool(operands[3])) {
    std::vector<int64_t> reduced;
    for (int64_t d = 0; d < x.rank(); ++d) {
      if (d != dim) reduced.push_back(x.dims()[d]);
    }
    value = b.Reshape(value, reduced);
    index = b.Reshape(index, reduced);
  }
  return {value, index};
}
TORCH_TPU_LOWERING(KthValue, "aten::kthvalue", "aten::kthvalue.values");

}  // namespace

}  // namespace torch_tpu::lowering

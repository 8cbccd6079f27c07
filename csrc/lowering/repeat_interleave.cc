// repeat_interleave.Tensor(repeats): index i repeated repeats[i] times. The output length is the
// sum of repeats, known on the host (aten/data_dependent_kernels.cc reads it, or takes the
// caller's output_size), so this program gets it as a static `total`.
//
// result[j] = #{i : cumsum(repeats)[i] <= j}: a histogram of the running totals (those at or past
// `total` drop out) and its running sum, O(n + total) rather than a [total, n] comparison.
#include "lowering/context.h"
#include "lowering/reduction_ops.h"
#include "lowering/registry.h"

namespace torch_tpu::lowering {
namespace {

Value InclusiveSum(FunctionBuilder& b, Value x) {
  const int64_t length = x.dims()[0];
  return b.ReduceWindow({x}, {b.Constant(x.element_type(), 0.0)}, {length}, {}, {}, {},
                        {{length - 1, 0}},
                        [](FunctionBuilder& body, std::span<const Value> args) {
                          return std::vector<Value>{body.Add(args[0], args[1])};
                        })[0];
}

// (repeats, int total, bool check): `check` adds the device-side checks CPU makes on the host
// when the caller gave output_size (so the host never read the repeats).
std::vector<Value> RepeatInterleaveIndices(LoweringContext& context,
                                           std::span<const Operand> operands) {
  auto& b = context.builder();
  Value repeats = context.Convert(operands[0].value, c10::kLong);
  const int64_t total = context.Int(operands[1]);
  const int64_t n = repeats.dims()[0];
  const c10::ScalarType dtype = operands[0].dtype;
  if (n == 0) return {context.ConstantInt(0, dtype, {total})};
  Value running = InclusiveSum(b, repeats);
  if (context.Bool(operands[2])) {
    Value negative = b.Compare(repeats, b.ConstantInt(ElementType::kS64, 0, {n}), Direction::kLt);
    context.CheckNotViolated(ReduceOver(context, negative, {0}, ReduceKind::kOr, false),
                             "repeats can not be negative");
    Value sum = b.Reshape(b.Slice(running, {n - 1}, {n}, {1}), {});
    context.CheckNotViolated(
        b.Compare(sum, b.ConstantInt(ElementType::kS64, total), Direction::kNe),
        "allocated size does not match required size");
  }
  if (total == 0) return {context.ConstantInt(0, dtype, {0})};
  FunctionBuilder::ScatterDimensions dimensions;
  dimensions.inserted_window_dims = {0};
  dimensions.scatter_dims_to_operand_dims = {0};
  dimensions.index_vector_dim = 1;
  Value histogram =
      b.Scatter({b.ConstantInt(ElementType::kS64, 0, {total})}, b.Reshape(running, {n, 1}),
                {b.ConstantInt(ElementType::kS64, 1, {n})}, dimensions,
                [](FunctionBuilder& body, std::span<const Value> args) {
                  return std::vector<Value>{body.Add(args[0], args[1])};
                })[0];
  return {context.Convert(InclusiveSum(b, histogram), dtype)};
}
TORCH_TPU_LOWERING(RepeatInterleaveIndices, "torch_tpu::repeat_interleave");

}  // namespace
}  // namespace torch_tpu::lowering

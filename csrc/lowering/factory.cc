// Lowerings behind the factory functions whose output size the host decides (arange, linspace,
// eye): the size is static, the start/step/end values are runtime scalars.
#include <c10/util/Exception.h>

#include "lowering/context.h"

namespace torch_tpu::lowering {
namespace {

// (start, step, int size, bool floating): start + i * step, in f64 or s64.
std::vector<Value> Arange(LoweringContext& context, std::span<const Operand> operands) {
  const int64_t size = context.Int(operands[2]);
  const c10::ScalarType dtype = context.Bool(operands[3]) ? c10::kDouble : c10::kLong;
  auto& builder = context.builder();
  Value index = builder.Iota(TensorType{ToElementTypeOrThrow(dtype, "arange"), {size}}, 0);
  Value start = context.BroadcastTo(context.Convert(operands[0].value, dtype), {size});
  Value step = context.BroadcastTo(context.Convert(operands[1].value, dtype), {size});
  return {builder.Add(start, builder.Multiply(index, step))};
}
TORCH_TPU_LOWERING(Arange, "torch_tpu::arange");

// (start, end, int steps): evenly spaced, computed symmetrically from both ends like PyTorch.
std::vector<Value> Linspace(LoweringContext& context, std::span<const Operand> operands) {
  const int64_t steps = context.Int(operands[2]);
  auto& builder = context.builder();
  const std::vector<int64_t> dims = {steps};
  Value start = context.BroadcastTo(context.Convert(operands[0].value, c10::kDouble), dims);
  Value end = context.BroadcastTo(context.Convert(operands[1].value, c10::kDouble), dims);
  if (steps == 1) return {start};
  Value index = builder.Iota(TensorType{ElementType::kF64, dims}, 0);
  Value step = builder.Divide(builder.Subtract(end, start),
                              context.Constant(static_cast<double>(steps - 1), c10::kDouble, dims));
  Value from_start = builder.Add(start, builder.Multiply(index, step));
  Value from_end = builder.Subtract(
      end, builder.Multiply(
               builder.Subtract(
                   context.Constant(static_cast<double>(steps - 1), c10::kDouble, dims), index),
               step));
  Value first_half =
      builder.Compare(index, context.Constant(static_cast<double>(steps / 2), c10::kDouble, dims),
                      stablehlo::FunctionBuilder::ComparisonDirection::kLt);
  return {builder.Select(first_half, from_start, from_end)};
}
TORCH_TPU_LOWERING(Linspace, "torch_tpu::linspace");

// (int n, int m): identity matrix as bool (converted on write).
std::vector<Value> Eye(LoweringContext& context, std::span<const Operand> operands) {
  const int64_t n = context.Int(operands[0]);
  const int64_t m = context.Int(operands[1]);
  auto& builder = context.builder();
  Value rows = builder.Iota(TensorType{ElementType::kS64, {n, m}}, 0);
  Value columns = builder.Iota(TensorType{ElementType::kS64, {n, m}}, 1);
  return {builder.Compare(rows, columns, stablehlo::FunctionBuilder::ComparisonDirection::kEq)};
}
TORCH_TPU_LOWERING(Eye, "torch_tpu::eye");

}  // namespace

}  // namespace torch_tpu::lowering

// Lowerings behind the factory functions whose output size the host decides (arange, linspace,
// eye, tril_indices, triu_indices): the size is static, the start/step/end values are runtime
// scalars.
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

// (int row, int col, int offset, bool lower, int size): the [2, size] coordinates of the lower
// (upper) triangle of a row x col matrix in row-major order. Element k's row is the last row r
// whose preceding rows hold at most k elements: a binary search over rows, each step vectorized
// over k, on the exact integer count of elements before row r.
std::vector<Value> TriangleIndices(LoweringContext& context, std::span<const Operand> operands) {
  const int64_t row = context.Int(operands[0]);
  const int64_t col = context.Int(operands[1]);
  const int64_t offset = context.Int(operands[2]);
  const bool lower = context.Bool(operands[3]);
  const int64_t size = context.Int(operands[4]);
  auto& b = context.builder();
  const std::vector<int64_t> dims = {size};
  auto constant = [&](int64_t value) { return context.ConstantInt(value, c10::kLong, dims); };
  // Row i of the lower triangle with diagonal `shift` holds clamp(i + shift + 1, 0, col)
  // elements; `Before(n)` = sum over t <= n of clamp(t, 0, col).
  auto before = [&](Value n) {
    Value t = b.Clamp(constant(0), n, constant(col));
    Value triangle = b.ShiftRightArithmetic(b.Multiply(t, b.Add(t, constant(1))), constant(1));
    Value beyond = b.Multiply(b.Subtract(b.Maximum(n, constant(col)), constant(col)),
                              constant(col));
    return b.Add(triangle, beyond);
  };
  // Elements in the rows before r of the lower triangle with diagonal `shift`.
  auto lower_count = [&](Value r, int64_t shift) {
    return b.Subtract(before(b.Add(r, constant(shift))), before(constant(shift)));
  };
  // The upper triangle from diagonal `offset` is the complement of the lower one from
  // `offset - 1`.
  auto count = [&](Value r) {
    return lower ? lower_count(r, offset)
                 : b.Subtract(b.Multiply(r, constant(col)), lower_count(r, offset - 1));
  };
  Value k = b.Iota(TensorType{ElementType::kS64, dims}, 0);
  Value low = constant(0);
  Value high = constant(row);
  for (int64_t span = 1; span < row; span <<= 1) {
    Value middle = b.ShiftRightArithmetic(b.Add(low, high), constant(1));
    Value fits = b.Compare(count(middle), k, Direction::kLe);
    low = b.Select(fits, middle, low);
    high = b.Select(fits, high, middle);
  }
  Value first_column =
      lower ? constant(0) : b.Clamp(constant(0), b.Add(low, constant(offset)), constant(col));
  Value column = b.Add(b.Subtract(k, count(low)), first_column);
  const std::vector<int64_t> row_dims = {1, size};
  return {b.Concatenate({b.Reshape(low, row_dims), b.Reshape(column, row_dims)}, 0)};
}
TORCH_TPU_LOWERING(TriangleIndices, "torch_tpu::triangle_indices");

}  // namespace

}  // namespace torch_tpu::lowering

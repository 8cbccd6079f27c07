// unique and unique_consecutive (flattened or along a dim): the number of distinct elements (rows)
// is data dependent, so the host first reads it from `torch_tpu::unique_count`, then
// `torch_tpu::unique` computes values, inverse indices and counts for that size
// (aten/data_dependent_kernels.cc). Both sort the same way, so the count and the groups agree.
//
// Elements are compared like CPU's kernels do: NaN is never equal to anything (each NaN is its
// own group, sorted last), -0.0 equals 0.0 (the group keeps the first one in stable order).
#include <c10/util/Exception.h>

#include "lowering/context.h"
#include "lowering/gather_rows.h"

namespace torch_tpu::lowering {
namespace {

// The input as rows: flattened it is one element per row; along `dim` each row is the slice at
// one index of dim.
struct Rows {
  Value rows;                      // [N, M]
  std::vector<int64_t> perm;       // the transpose that brought dim to the front (empty: flat)
  std::vector<int64_t> row_shape;  // the transposed input's dims after the first
};

Rows AsRows(LoweringContext& context, Value self, const Operand& dim) {
  auto& b = context.builder();
  if (dim.is_none()) {
    const int64_t n = self.type().NumElements();
    return {b.Reshape(self, {n, 1}), {}, {}};
  }
  const int64_t d = context.WrapDim(context.Int(dim), self.rank());
  std::vector<int64_t> perm = {d};
  for (int64_t i = 0; i < self.rank(); ++i) {
    if (i != d) perm.push_back(i);
  }
  Value moved = b.Transpose(self, perm);
  std::vector<int64_t> row_shape(moved.dims().begin() + 1, moved.dims().end());
  int64_t m = 1;
  for (int64_t size : row_shape) m *= size;
  return {b.Reshape(moved, {moved.dims()[0], m}), perm, row_shape};
}

// The permutation that undoes the transpose by `perm`.
std::vector<int64_t> MovedBack(const std::vector<int64_t>& perm) {
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  return inverse;
}

// The row order of a stable lexicographic sort, NaN after every number (s64[N]).
Value SortedRowOrder(LoweringContext& context, Value rows) {
  auto& b = context.builder();
  const int64_t n = rows.dims()[0], m = rows.dims()[1];
  std::vector<Value> keys;
  for (int64_t j = 0; j < m; ++j) {
    Value column = b.Reshape(b.Slice(rows, {0, j}, {n, j + 1}, {1, 1}), {n});
    // pred has no order in every compiler: sort it as 0/1.
    if (column.element_type() == ElementType::kPred) column = b.Convert(column, ElementType::kU8);
    keys.push_back(column);
  }
  keys.push_back(b.Iota(TensorType{ElementType::kS64, {n}}, 0));
  const bool is_float = stablehlo::IsFloat(rows.element_type());
  auto sorted = b.Sort(keys, 0, /*is_stable=*/true,
                       [m, is_float](FunctionBuilder& body, std::span<const Value> args) {
                         Value less = body.ConstantInt(ElementType::kPred, 0);
                         for (int64_t j = m - 1; j >= 0; --j) {
                           Value lhs = args[2 * j], rhs = args[2 * j + 1];
                           Value lt = body.Compare(lhs, rhs, Direction::kLt);
                           Value eq = body.Compare(lhs, rhs, Direction::kEq);
                           if (is_float) {
                             Value lhs_nan = body.Compare(lhs, lhs, Direction::kNe);
                             Value rhs_nan = body.Compare(rhs, rhs, Direction::kNe);
                             lt = body.Or(lt, body.And(body.Not(lhs_nan), rhs_nan));
                             eq = body.Or(eq, body.And(lhs_nan, rhs_nan));
                           }
                           less = body.Or(lt, body.And(eq, less));
                         }
                         return std::vector<Value>{less};
                       });
  return sorted.back();
}

// Whether each (ordered) row starts a new group: the first row, and every row with an element
// that does not equal (==, so NaN never does) the one in the row before (pred[N], N > 0).
Value GroupStarts(FunctionBuilder& b, Value rows) {
  const int64_t n = rows.dims()[0], m = rows.dims()[1];
  Value differs = b.Compare(b.Slice(rows, {1, 0}, {n, m}, {1, 1}),
                            b.Slice(rows, {0, 0}, {n - 1, m}, {1, 1}), Direction::kNe);
  Value any = b.Reduce({differs}, {b.ConstantInt(ElementType::kPred, 0)}, {1},
                       [](FunctionBuilder& body, std::span<const Value> args) {
                         return std::vector<Value>{body.Or(args[0], args[1])};
                       })[0];
  return b.Concatenate({b.ConstantInt(ElementType::kPred, 1, {1}), any}, 0);
}

// The input's rows in group order, and their positions in the input (null when consecutive).
std::pair<Value, Value> OrderedRows(LoweringContext& context, Value rows, bool consecutive) {
  if (consecutive) return {rows, Value()};
  Value order = SortedRowOrder(context, rows);
  return {GatherRows(context.builder(), rows, order), order};
}

// (self, int? dim, bool consecutive): the number of groups, s64[].
std::vector<Value> UniqueCount(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Rows rows = AsRows(context, operands[0].value, operands[1]);
  if (rows.rows.dims()[0] == 0) return {b.ConstantInt(ElementType::kS64, 0)};
  Value ordered = OrderedRows(context, rows.rows, context.Bool(operands[2])).first;
  Value starts = b.Convert(GroupStarts(b, ordered), ElementType::kS64);
  return {b.Reduce({starts}, {b.ConstantInt(ElementType::kS64, 0)}, {0},
                   [](FunctionBuilder& body, std::span<const Value> args) {
                     return std::vector<Value>{body.Add(args[0], args[1])};
                   })[0]};
}
TORCH_TPU_LOWERING(UniqueCount, "torch_tpu::unique_count");

// (self, int count, int? dim, bool consecutive, bool return_inverse, bool return_counts):
// (values, inverse, counts). Flattened, inverse has self's shape; along dim, one entry per index
// of dim. Results not asked for are empty, as on CPU.
std::vector<Value> Unique(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value self = operands[0].value;
  const int64_t count = context.Int(operands[1]);
  const bool flat = operands[2].is_none(), consecutive = context.Bool(operands[3]);
  const bool return_inverse = context.Bool(operands[4]), return_counts = context.Bool(operands[5]);
  Rows rows = AsRows(context, self, operands[2]);
  const int64_t n = rows.rows.dims()[0];
  const std::vector<int64_t> inverse_shape = flat ? self.dims() : std::vector<int64_t>{n};
  Value no_indices = b.ConstantInt(ElementType::kS64, 0, {0});

  std::vector<int64_t> values_shape = {count};
  values_shape.insert(values_shape.end(), rows.row_shape.begin(), rows.row_shape.end());
  if (n == 0) {
    Value values = b.Reshape(rows.rows, values_shape);
    if (!flat) values = b.Transpose(values, MovedBack(rows.perm));
    return {values,
            return_inverse ? b.ConstantInt(ElementType::kS64, 0, inverse_shape) : no_indices,
            no_indices};
  }
  auto [ordered, order] = OrderedRows(context, rows.rows, consecutive);
  Value starts = GroupStarts(b, ordered);
  // Group of each ordered row: the starts so far, minus one.
  Value group = b.ReduceWindow({b.Convert(starts, ElementType::kS64)},
                               {b.ConstantInt(ElementType::kS64, 0)}, {n}, {}, {}, {},
                               {{n - 1, 0}},
                               [](FunctionBuilder& body, std::span<const Value> args) {
                                 return std::vector<Value>{body.Add(args[0], args[1])};
                               })[0];
  group = b.Subtract(group, b.ConstantInt(ElementType::kS64, 1, {n}));
  // First ordered row of each group; rows that start none go out of range and are skipped.
  Value first = b.Scatter1D(b.ConstantInt(ElementType::kS64, 0, {count}),
                            b.Select(starts, group, b.ConstantInt(ElementType::kS64, count, {n})),
                            b.Iota(TensorType{ElementType::kS64, {n}}, 0));
  Value values = b.Reshape(GatherRows(b, ordered, first), values_shape);
  if (!flat) values = b.Transpose(values, MovedBack(rows.perm));

  Value inverse = no_indices;
  if (return_inverse) {
    inverse = consecutive ? group
                          : b.Scatter1D(b.ConstantInt(ElementType::kS64, 0, {n}), order, group);
    inverse = b.Reshape(inverse, inverse_shape);
  }
  Value counts = no_indices;
  if (return_counts) {
    Value next_first = b.Concatenate(
        {b.Slice(first, {1}, {count}, {1}), b.ConstantInt(ElementType::kS64, n, {1})}, 0);
    counts = b.Subtract(next_first, first);
  }
  return {values, inverse, counts};
}
TORCH_TPU_LOWERING(Unique, "torch_tpu::unique");

}  // namespace
}  // namespace torch_tpu::lowering

// sort, argsort-by-sort, topk, kthvalue, median and mode via stablehlo.sort with an index operand;
// searchsorted and bucketize by counting comparisons.
#include <c10/util/Exception.h>

#include "lowering/context.h"
#include "lowering/reduction_ops.h"

namespace torch_tpu::lowering {
namespace {

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

// The element of `sorted` (and of `indices`) at `position` (s64, one per slice) along `dim`,
// with `dim` removed: a one-hot mask summed, so other elements (NaN included) never leak in.
std::pair<Value, Value> PickAlong(LoweringContext& context, Value sorted, Value indices,
                                  int64_t dim, Value position) {
  auto& b = context.builder();
  Value slot = b.Iota(TensorType{ElementType::kS64, sorted.dims()}, dim);
  std::vector<int64_t> broadcast_dims;
  for (int64_t d = 0; d < sorted.rank(); ++d) {
    if (d != dim) broadcast_dims.push_back(d);
  }
  Value chosen =
      b.Compare(slot, b.BroadcastInDim(position, sorted.dims(), broadcast_dims), Direction::kEq);
  Value zero_values = b.Constant(sorted.element_type(), 0.0, sorted.dims());
  Value zero_indices = b.ConstantInt(ElementType::kS64, 0, sorted.dims());
  Value value =
      ReduceOver(context, b.Select(chosen, sorted, zero_values), {dim}, ReduceKind::kSum, false);
  Value index =
      ReduceOver(context, b.Select(chosen, indices, zero_indices), {dim}, ReduceKind::kSum, false);
  return {value, index};
}

// The lower median along `dim` and its index. With kIgnoreNan (nanmedian) NaNs are left out;
// otherwise a slice holding a NaN has the NaN (its first one) as median, as on CPU.
template <bool kIgnoreNan>
std::pair<Value, Value> MedianAlong(LoweringContext& context, Value x, int64_t dim) {
  auto& b = context.builder();
  TORCH_CHECK(x.dims()[dim] > 0, context.op_name(),
              ": median() cannot compute median for an empty slice along dimension ", dim,
              " of input ", x.type().ToString());
  auto [sorted, indices] = SortAlong(context, x, dim, false, true);
  // NaNs sort last, so the count of numbers is the position of the first NaN.
  Value is_number = b.Convert(b.Compare(x, x, Direction::kEq), ElementType::kS64);
  Value numbers = ReduceOver(context, is_number, {dim}, ReduceKind::kSum, false);
  const int64_t n = x.dims()[dim];
  Value position;
  if (kIgnoreNan) {
    // (numbers - 1) / 2, and 0 for an all-NaN slice.
    Value one = b.ConstantInt(ElementType::kS64, 1, numbers.dims());
    position = b.Divide(
        b.Maximum(b.Subtract(numbers, one), b.ConstantInt(ElementType::kS64, 0, numbers.dims())),
        b.ConstantInt(ElementType::kS64, 2, numbers.dims()));
  } else {
    Value middle = b.ConstantInt(ElementType::kS64, (n - 1) / 2, numbers.dims());
    Value all = b.ConstantInt(ElementType::kS64, n, numbers.dims());
    position = b.Select(b.Compare(numbers, all, Direction::kLt), numbers, middle);
  }
  return PickAlong(context, sorted, indices, dim, position);
}

// median / nanmedian(self): over all elements.
template <bool kIgnoreNan>
std::vector<Value> MedianAll(LoweringContext& context, std::span<const Operand> operands) {
  Value x = operands[0].value;
  Value flat = context.builder().Reshape(x, {x.type().NumElements()});
  if (x.type().NumElements() == 0) return {context.Constant(NAN, operands[0].dtype)};
  return {MedianAlong<kIgnoreNan>(context, flat, 0).first};
}
TORCH_TPU_LOWERING(MedianAll<false>, "aten::median", "aten::median.out");
TORCH_TPU_LOWERING(MedianAll<true>, "aten::nanmedian", "aten::nanmedian.out");

// median.dim / nanmedian.dim(self, int dim, bool keepdim=False) -> (values, indices)
template <bool kIgnoreNan>
std::vector<Value> MedianDim(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value x = operands[0].value;
  if (x.rank() == 0) return {x, context.ConstantInt(0, c10::kLong)};
  const int64_t dim = context.WrapDim(context.Int(operands[1]), x.rank());
  auto [value, index] = MedianAlong<kIgnoreNan>(context, x, dim);
  if (context.Bool(operands[2])) {
    std::vector<int64_t> kept = x.dims();
    kept[dim] = 1;
    value = b.Reshape(value, kept);
    index = b.Reshape(index, kept);
  }
  return {value, index};
}
TORCH_TPU_LOWERING(MedianDim<false>, "aten::median.dim", "aten::median.dim_values");
TORCH_TPU_LOWERING(MedianDim<true>, "aten::nanmedian.dim", "aten::nanmedian.dim_values");

// mode(self, int dim=-1, bool keepdim=False) -> (values, indices). CPU sorts each slice and
// keeps the first longest run of equal values (so the smallest of the most frequent), with the
// index of the run's last element: after a stable sort, the value's last occurrence.
std::vector<Value> Mode(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value x = operands[0].value;
  if (x.rank() == 0) return {x, context.ConstantInt(0, c10::kLong)};
  const int64_t dim = context.WrapDim(context.Int(operands[1]), x.rank());
  const int64_t n = x.dims()[dim];
  TORCH_CHECK_INDEX(n > 0, context.op_name(), ": mode(): Expected reduction dim ", dim,
              " to have non-zero size.");
  auto [sorted, indices] = SortAlong(context, x, dim, false, true);
  auto shift = [&](Value v, int64_t from, int64_t to) {
    std::vector<int64_t> start(v.rank(), 0), limit = v.dims(), strides(v.rank(), 1);
    start[dim] = from;
    limit[dim] = to;
    return b.Slice(v, start, limit, strides);
  };
  Value slot = b.Iota(TensorType{ElementType::kS64, x.dims()}, dim);
  Value last_slot = b.ConstantInt(ElementType::kS64, n - 1, x.dims());
  // A run starts where the value differs from its predecessor (NaNs each start their own, as
  // CPU's != sees them) and ends where the next one starts.
  Value starts = b.Compare(sorted, b.Concatenate({shift(sorted, 0, 1), shift(sorted, 0, n - 1)},
                                                 dim),
                           Direction::kNe);
  starts = b.Or(starts, b.Compare(slot, b.ConstantInt(ElementType::kS64, 0, x.dims()),
                                  Direction::kEq));
  Value ends = b.Or(b.Concatenate({shift(starts, 1, n), shift(starts, 0, 1)}, dim),
                    b.Compare(slot, last_slot, Direction::kEq));
  std::vector<int64_t> window(x.rank(), 1);
  window[dim] = n;
  std::vector<std::pair<int64_t, int64_t>> padding(x.rank(), {0, 0});
  padding[dim] = {n - 1, 0};
  Value run_start =
      b.ReduceWindow({b.Select(starts, slot, b.ConstantInt(ElementType::kS64, 0, x.dims()))},
                     {b.ConstantInt(ElementType::kS64, 0)}, window, {}, {}, {}, padding,
                     [](FunctionBuilder& body, std::span<const Value> args) {
                       return std::vector<Value>{body.Maximum(args[0], args[1])};
                     })[0];
  Value length = b.Select(ends, b.Subtract(slot, run_start),
                          b.ConstantInt(ElementType::kS64, -1, x.dims()));
  Value longest = ReduceOver(context, length, {dim}, ReduceKind::kMax, true);
  Value is_longest = b.Compare(length, context.BroadcastTo(longest, x.dims()), Direction::kEq);
  Value position = ReduceOver(context, b.Select(is_longest, slot, last_slot), {dim},
                              ReduceKind::kMin, false);
  auto [value, index] = PickAlong(context, sorted, indices, dim, position);
  if (context.Bool(operands[2])) {
    std::vector<int64_t> kept = x.dims();
    kept[dim] = 1;
    value = b.Reshape(value, kept);
    index = b.Reshape(index, kept);
  }
  return {value, index};
}
TORCH_TPU_LOWERING(Mode, "aten::mode", "aten::mode.values");

// How many elements of each row of `sequence` ([..., M]) sort before each value ([..., K], same
// leading dims, or any shape for a 1-D sequence): the insertion point binary search finds, with
// CPU's comparisons (a NaN value goes after everything).
Value InsertionPoints(LoweringContext& context, Value sequence, Value values, bool right) {
  auto& b = context.builder();
  const int64_t m = sequence.dims().back();
  std::vector<int64_t> pair_dims = values.dims();
  pair_dims.push_back(m);
  std::vector<int64_t> value_dims(values.rank()), sequence_dims;
  for (int64_t d = 0; d < values.rank(); ++d) value_dims[d] = d;
  if (sequence.rank() == 1) {
    sequence_dims = {values.rank()};
  } else {
    for (int64_t d = 0; d + 1 < sequence.rank(); ++d) sequence_dims.push_back(d);
    sequence_dims.push_back(values.rank());
  }
  Value v = b.BroadcastInDim(values, pair_dims, value_dims);
  Value s = b.BroadcastInDim(sequence, pair_dims, sequence_dims);
  // Left: count s with !(s >= v); right: count s with !(s > v).
  Value before = b.Not(b.Compare(s, v, right ? Direction::kGt : Direction::kGe));
  return ReduceOver(context, b.Convert(before, ElementType::kS64), {values.rank()},
                    ReduceKind::kSum, false);
}

// searchsorted.Tensor(sorted_sequence, self, *, bool out_int32=False, bool right=False,
//   str? side=None, Tensor? sorter=None)
std::vector<Value> SearchSorted(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value sequence = operands[0].value;
  Value values = operands[1].value;
  bool right = context.Bool(operands[3]);
  if (!operands[4].is_none()) {
    const std::string& side = operands[4].ivalue.toStringRef();
    TORCH_CHECK(side == "left" || side == "right", context.op_name(),
                ": side can only be 'left' or 'right' but got ", side);
    TORCH_CHECK(!(side == "left" && right), context.op_name(),
                ": side and right can't be set to opposites, got side of left while right was "
                "True");
    right = side == "right";
  }
  TORCH_CHECK(sequence.rank() >= 1, context.op_name(),
              ": boundaries tensor should have positive dimension, but got 0 dimension");
  if (sequence.rank() > 1) {
    TORCH_CHECK(
        sequence.rank() == values.rank() &&
            std::equal(sequence.dims().begin(), sequence.dims().end() - 1, values.dims().begin()),
        context.op_name(),
        ": boundaries tensor should be 1 dimension or the first N-1 dimensions of "
        "boundaries tensor and input value tensor must match, but we got boundaries "
        "tensor ",
        sequence.type().ToString(), " and input value tensor ", values.type().ToString());
  }
  if (!operands[5].is_none()) {
    // Apply the sorter: sequence[..., sorter[..., j]] along the last dim, through a one-hot
    // product-free selection.
    Value sorter = context.Convert(operands[5].value, c10::kLong);
    TORCH_CHECK(sorter.dims() == sequence.dims(), context.op_name(),
                ": boundary and sorter must have the same size, but got boundary tensor ",
                sequence.type().ToString(), " and got sorter tensor ", sorter.type().ToString());
    context.CheckIndicesInRange(sorter, sequence.dims().back(), /*negative_wraps=*/false);
    const int64_t last = sequence.rank() - 1;
    std::vector<int64_t> expanded = sequence.dims();
    expanded.push_back(sequence.dims().back());
    std::vector<int64_t> keep(sequence.rank());
    for (int64_t d = 0; d < sequence.rank(); ++d) keep[d] = d;
    Value wanted = b.BroadcastInDim(sorter, expanded, keep);
    std::vector<int64_t> source_dims = keep;
    source_dims[last] = last + 1;
    Value source = b.BroadcastInDim(sequence, expanded, source_dims);
    Value slot = b.Iota(TensorType{ElementType::kS64, expanded}, last + 1);
    Value hit = b.Compare(slot, wanted, Direction::kEq);
    Value zero = b.Constant(source.element_type(), 0.0, expanded);
    sequence =
        ReduceOver(context, b.Select(hit, source, zero), {last + 1}, ReduceKind::kSum, false);
  }
  const c10::ScalarType dtype = context.PromotedType(operands.subspan(0, 2));
  Value points = InsertionPoints(context, context.Convert(sequence, dtype),
                                 context.Convert(values, dtype), right);
  return {context.Convert(points, context.Bool(operands[2]) ? c10::kInt : c10::kLong)};
}
TORCH_TPU_LOWERING(SearchSorted, "aten::searchsorted.Tensor", "aten::searchsorted.Tensor_out");

// bucketize.Tensor(self, boundaries, *, bool out_int32=False, bool right=False)
std::vector<Value> Bucketize(LoweringContext& context, std::span<const Operand> operands) {
  TORCH_CHECK(operands[1].value.rank() == 1, context.op_name(),
              ": boundaries tensor must be 1 dimension, but got dim(", operands[1].value.rank(),
              ")");
  const c10::ScalarType dtype = context.PromotedType(operands.subspan(0, 2));
  Value points =
      InsertionPoints(context, context.Convert(operands[1].value, dtype),
                      context.Convert(operands[0].value, dtype), context.Bool(operands[3]));
  return {context.Convert(points, context.Bool(operands[2]) ? c10::kInt : c10::kLong)};
}
TORCH_TPU_LOWERING(Bucketize, "aten::bucketize.Tensor", "aten::bucketize.Tensor_out");

}  // namespace

}  // namespace torch_tpu::lowering

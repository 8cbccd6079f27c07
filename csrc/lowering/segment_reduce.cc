// segment_reduce and its backward: data along `axis` split into consecutive segments (given by
// lengths or offsets per leading index), each reduced by sum, mean, prod, max or min, with CPU's
// identity for empty segments (or `initial`). Every (segment, position) pair is tested for
// membership, so the work is segments x positions: segment_reduce's segments are few and short.
#include <c10/util/Exception.h>

#include <limits>
#include <string>

#include "lowering/context.h"
#include "lowering/extremum.h"
#include "lowering/opmath.h"
#include "lowering/reduction_ops.h"

namespace torch_tpu::lowering {
namespace {

enum class SegmentReduction { kSum, kMean, kProd, kMax, kMin };

SegmentReduction ReductionOf(LoweringContext& context, const Operand& reduce) {
  const std::string name = reduce.ivalue.toStringRef();
  if (name == "sum") return SegmentReduction::kSum;
  if (name == "mean") return SegmentReduction::kMean;
  if (name == "prod") return SegmentReduction::kProd;
  if (name == "max" || name == "amax") return SegmentReduction::kMax;
  TORCH_CHECK(name == "min" || name == "amin", context.op_name(),
              ": reduce argument must be either sum, prod, mean, amax or amin, got ", name);
  return SegmentReduction::kMin;
}

// The data as [B, N, I] (leading dims, the segmented axis, trailing dims), the segments' bounds
// per leading index and which positions each segment holds.
struct Segments {
  Value data;         // [B, N, I], compute dtype
  Value lengths;      // s64 [B, S]
  Value members;      // pred [B, S, N]: position n lies in segment s
  std::vector<int64_t> result_dims;  // data's dims with the axis's size replaced by S
};

Segments SegmentsOf(LoweringContext& context, const Operand& data, const Operand& lengths,
                    const Operand& offsets, int64_t axis, bool unsafe) {
  auto& b = context.builder();
  TORCH_CHECK(!lengths.is_none() || !offsets.is_none(), context.op_name(),
              ": segment_reduce(): Either lengths or offsets must be defined.");
  CheckKernelDtype(context, c10::isFloatingType(data.dtype), "_segment_reduce_cpu", data.dtype);
  const Operand& bounds = lengths.is_none() ? offsets : lengths;
  CheckKernelDtype(context, bounds.dtype == c10::kInt || bounds.dtype == c10::kLong,
                   lengths.is_none() ? "_segment_reduce_offsets_cpu_kernel1"
                                     : "_segment_reduce_lengths_cpu_kernel1",
                   bounds.dtype);
  const auto& dims = data.value.dims();
  const int64_t rank = static_cast<int64_t>(dims.size());
  axis = context.WrapDim(axis, rank);
  TORCH_CHECK(axis == bounds.value.rank() - 1, context.op_name(),
              ": segment_reduce(): Expected axis to be the last dimension of ",
              lengths.is_none() ? "offsets" : "lengths", " but got ", axis, ".");
  int64_t batch = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) {
    TORCH_CHECK(bounds.value.dims()[d] == dims[d], context.op_name(),
                ": segment_reduce(): Expected data and lengths to match in dimension ", d);
    batch *= dims[d];
  }
  for (int64_t d = axis + 1; d < rank; ++d) inner *= dims[d];
  const int64_t positions = dims[axis];
  const int64_t count = bounds.value.dims()[axis] - (lengths.is_none() ? 1 : 0);

  Value flat_bounds = b.Reshape(context.Convert(bounds.value, c10::kLong),
                                {batch, bounds.value.dims()[axis]});
  Value starts, ends, segment_lengths;
  if (!lengths.is_none()) {
    segment_lengths = flat_bounds;
    // Ends are the inclusive running sum of the lengths.
    ends = b.ReduceWindow({segment_lengths}, {b.ConstantInt(ElementType::kS64, 0)}, {1, count},
                          {}, {}, {}, {{0, 0}, {count - 1, 0}},
                          [](FunctionBuilder& body, std::span<const Value> args) {
                            return std::vector<Value>{body.Add(args[0], args[1])};
                          })[0];
    starts = b.Subtract(ends, segment_lengths);
    if (!unsafe) {
      Value zeros = b.ConstantInt(ElementType::kS64, 0, {batch, count});
      context.CheckNotViolated(
          ReduceOver(context, b.Compare(segment_lengths, zeros, Direction::kLt), {0, 1},
                     ReduceKind::kOr, false),
          "lengths contains negative value!");
      Value totals = b.Slice(ends, {0, count - 1}, {batch, count}, {1, 1});
      context.CheckNotViolated(
          ReduceOver(context,
                     b.Compare(totals, b.ConstantInt(ElementType::kS64, positions, {batch, 1}),
                               Direction::kNe),
                     {0, 1}, ReduceKind::kOr, false),
          "segment_reduce(): Expected all rows of lengths along axis to sum to "
          "data.size(lengths.dim()-1) when !unsafe.");
    }
  } else {
    starts = b.Slice(flat_bounds, {0, 0}, {batch, count}, {1, 1});
    ends = b.Slice(flat_bounds, {0, 1}, {batch, count + 1}, {1, 1});
    segment_lengths = b.Subtract(ends, starts);
    context.CheckNotViolated(
        ReduceOver(context,
                   b.Compare(segment_lengths, b.ConstantInt(ElementType::kS64, 0, {batch, count}),
                             Direction::kLt),
                   {0, 1}, ReduceKind::kOr, false),
        "Expected segment_length >= 0 to be true, but got false.");
  }
  const std::vector<int64_t> grid = {batch, count, positions};
  Value position = b.Iota(TensorType{ElementType::kS64, grid}, 2);
  Value members = b.And(b.Compare(position, b.BroadcastInDim(starts, grid, {0, 1}), Direction::kGe),
                        b.Compare(position, b.BroadcastInDim(ends, grid, {0, 1}), Direction::kLt));
  std::vector<int64_t> result_dims = dims;
  result_dims[axis] = count;
  Value values = b.Reshape(context.Convert(data.value, ComputeDtype(data.dtype)),
                           {batch, positions, inner});
  return {values, segment_lengths, members, result_dims};
}

// `initial` as a scalar of `type`, or the reduction's identity without one.
Value InitialValue(LoweringContext& context, const Operand& initial, SegmentReduction reduction,
                   c10::ScalarType dtype) {
  if (!initial.is_none()) return context.Convert(initial.value, dtype);
  switch (reduction) {
    case SegmentReduction::kProd:
      return context.Constant(1.0, dtype);
    case SegmentReduction::kMax:
      return context.Constant(-std::numeric_limits<double>::infinity(), dtype);
    case SegmentReduction::kMin:
      return context.Constant(std::numeric_limits<double>::infinity(), dtype);
    default:
      return context.Constant(0.0, dtype);
  }
}

// segment_reduce(data, str reduce, *, Tensor? lengths, Tensor? indices, Tensor? offsets,
// int axis=0, bool unsafe=False, Scalar? initial=None)
std::vector<Value> SegmentReduce(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  TORCH_CHECK(operands[3].is_none(), context.op_name(),
              ": segment_reduce(): indices based reduction is not supported yet.");
  const SegmentReduction reduction = ReductionOf(context, operands[1]);
  Segments segments = SegmentsOf(context, operands[0], operands[2], operands[4],
                                 context.Int(operands[5]), context.Bool(operands[6]));
  const c10::ScalarType dtype = operands[0].dtype, compute = ComputeDtype(dtype);
  const int64_t batch = segments.data.dims()[0], positions = segments.data.dims()[1];
  const int64_t inner = segments.data.dims()[2], count = segments.lengths.dims()[1];
  const std::vector<int64_t> grid = {batch, count, positions, inner};
  Value initial = InitialValue(context, operands[7], reduction, compute);
  const ReduceKind kind = reduction == SegmentReduction::kProd  ? ReduceKind::kProduct
                          : reduction == SegmentReduction::kMax ? ReduceKind::kMax
                          : reduction == SegmentReduction::kMin ? ReduceKind::kMin
                                                                : ReduceKind::kSum;
  Value identity = InitialValue(context, Operand{}, reduction, compute);
  Value held = b.Select(b.BroadcastInDim(segments.members, grid, {0, 1, 2}),
                        b.BroadcastInDim(segments.data, grid, {0, 2, 3}),
                        b.BroadcastInDim(identity, grid, {}));
  Value reduced = ReduceOver(context, held, {2}, kind, false);  // [B, S, I]
  const std::vector<int64_t> out = reduced.dims();
  Value start = b.BroadcastInDim(initial, out, {});
  Value result;
  switch (reduction) {
    case SegmentReduction::kProd:
      result = b.Multiply(start, reduced);
      break;
    case SegmentReduction::kMax:
    case SegmentReduction::kMin:
      result = NanPropagatingExtremum(b, start, reduced, reduction == SegmentReduction::kMax);
      break;
    default:
      result = b.Add(start, reduced);
  }
  if (reduction == SegmentReduction::kMean) {
    Value lengths = b.BroadcastInDim(segments.lengths, out, {0, 1});
    Value empty = b.Compare(lengths, b.ConstantInt(ElementType::kS64, 0, out), Direction::kEq);
    Value mean = b.Divide(result, context.Convert(lengths, compute));
    Value empty_value = operands[7].is_none()
                            ? context.Constant(std::numeric_limits<double>::quiet_NaN(), compute,
                                               out)
                            : result;
    result = b.Select(empty, empty_value, mean);
  }
  return {context.Convert(b.Reshape(result, segments.result_dims), dtype)};
}
TORCH_TPU_LOWERING(SegmentReduce, "aten::segment_reduce", "aten::segment_reduce.out");

// _segment_reduce_backward(grad, output, data, str reduce, *, Tensor? lengths, Tensor? offsets,
// int axis=0, Scalar? initial=None): each position gets its segment's gradient; max/min split it
// evenly among the positions equal to the result (NaN matching NaN); prod divides the segment's
// product by the element, or multiplies the others where the element is zero or NaN.
std::vector<Value> SegmentReduceBackward(LoweringContext& context,
                                         std::span<const Operand> operands) {
  auto& b = context.builder();
  const SegmentReduction reduction = ReductionOf(context, operands[3]);
  Segments segments = SegmentsOf(context, operands[2], operands[4], operands[5],
                                 context.Int(operands[6]), /*unsafe=*/true);
  const c10::ScalarType dtype = operands[2].dtype, compute = ComputeDtype(dtype);
  const int64_t batch = segments.data.dims()[0], positions = segments.data.dims()[1];
  const int64_t inner = segments.data.dims()[2], count = segments.lengths.dims()[1];
  const std::vector<int64_t> grid = {batch, count, positions, inner};
  const std::vector<int64_t> per_segment = {batch, count, inner};
  auto segment_values = [&](const Operand& operand) {
    return b.BroadcastInDim(b.Reshape(context.Convert(operand.value, compute), per_segment), grid,
                            {0, 1, 3});
  };
  Value grad = segment_values(operands[0]), output = segment_values(operands[1]);
  Value data = b.BroadcastInDim(segments.data, grid, {0, 2, 3});
  Value members = b.BroadcastInDim(segments.members, grid, {0, 1, 2});
  Value zero = context.Constant(0.0, compute, grid);
  Value terms;  // [B, S, N, I]: the gradient of each position from the segment holding it
  switch (reduction) {
    case SegmentReduction::kSum:
      terms = grad;
      break;
    case SegmentReduction::kMean: {
      Value lengths = context.Convert(b.BroadcastInDim(segments.lengths, grid, {0, 1}), compute);
      terms = b.Divide(grad, lengths);
      break;
    }
    case SegmentReduction::kMax:
    case SegmentReduction::kMin: {
      Value output_nan = b.Compare(output, output, Direction::kNe);
      Value data_nan = b.Compare(data, data, Direction::kNe);
      Value chosen = b.And(members, b.Select(output_nan, data_nan,
                                             b.Compare(data, output, Direction::kEq)));
      Value ties = ReduceOver(context, b.Select(chosen, context.Constant(1.0, compute, grid), zero),
                              {2}, ReduceKind::kSum, true);
      terms = b.Select(chosen, b.Divide(grad, b.BroadcastInDim(ties, grid, {0, 1, 2, 3})), zero);
      break;
    }
    case SegmentReduction::kProd: {
      // The product of the segment's other positions: each position pairs with every other.
      const std::vector<int64_t> pairs = {batch, count, positions, positions, inner};
      Value others = b.And(
          b.BroadcastInDim(segments.members, pairs, {0, 1, 3}),
          b.Compare(b.Iota(TensorType{ElementType::kS64, pairs}, 2),
                    b.Iota(TensorType{ElementType::kS64, pairs}, 3), Direction::kNe));
      Value other_values = b.Select(others, b.BroadcastInDim(segments.data, pairs, {0, 3, 4}),
                                    context.Constant(1.0, compute, pairs));
      Value initial = b.BroadcastInDim(
          InitialValue(context, operands[7], SegmentReduction::kProd, compute), grid, {});
      Value exclusive =
          b.Multiply(initial, ReduceOver(context, other_values, {3}, ReduceKind::kProduct, false));
      Value direct = b.Divide(b.Multiply(grad, output), data);
      Value zero_or_nan =
          b.Or(b.Compare(data, data, Direction::kNe), b.Compare(data, zero, Direction::kEq));
      terms = b.Select(zero_or_nan, b.Multiply(grad, exclusive), direct);
      break;
    }
  }
  Value grad_data = ReduceOver(context, b.Select(members, terms, zero), {1}, ReduceKind::kSum,
                               false);  // [B, N, I]
  return {context.Convert(b.Reshape(grad_data, operands[2].value.dims()), dtype)};
}
TORCH_TPU_LOWERING(SegmentReduceBackward, "aten::_segment_reduce_backward",
                   "aten::_segment_reduce_backward.out");

}  // namespace
}  // namespace torch_tpu::lowering

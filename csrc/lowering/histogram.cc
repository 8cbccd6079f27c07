// histc: counts of the elements in `bins` equal-width bins between min and max (the data's own
// extremes when min == max), as a scatter-add of ones into the bins.
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>

#include "lowering/context.h"
#include "lowering/opmath.h"

namespace torch_tpu::lowering {
namespace {

Value ReduceAll(FunctionBuilder& b, Value x, double init, bool maximum) {
  std::vector<int64_t> dims(x.rank());
  for (int64_t d = 0; d < x.rank(); ++d) dims[d] = d;
  return b.Reduce({x}, {b.Constant(x.element_type(), init)}, dims,
                  [maximum](FunctionBuilder& body, std::span<const Value> args) {
                    return std::vector<Value>{maximum ? body.Maximum(args[0], args[1])
                                                      : body.Minimum(args[0], args[1])};
                  })[0];
}

// histc(self, bins=100, Scalar min=0, Scalar max=0). CPU computes the bin of x as
// int((x - min) * bins / (max - min)) in the input dtype (half types round every step), x == max
// falling in the last bin; elements outside [min, max] (and NaN) are not counted.
std::vector<Value> Histc(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[0].dtype;
  CheckKernelDtype(context, c10::isFloatingType(dtype), "histogram_cpu", dtype);
  const int64_t bins = context.Int(operands[1]);
  TORCH_CHECK(bins > 0, context.op_name(), ": torch.histogram(): bins must be > 0, but got ", bins,
              " for dimension 0");
  auto& b = context.builder();
  const c10::ScalarType compute = ComputeDtype(dtype);
  auto round = [&](Value v) { return RoundThrough(context, v, dtype); };
  int64_t n = 1;
  for (int64_t d : operands[0].value.dims()) n *= d;
  Value x = b.Reshape(context.Convert(operands[0].value, compute), {n});
  Value low = round(context.Convert(operands[2].value, compute));
  Value high = round(context.Convert(operands[3].value, compute));
  context.CheckNotViolated(b.Compare(low, high, Direction::kGt),
                           "torch.histc: max must be larger than min");
  // min == max: the data's extremes (NaN when any element is; the range check below fails),
  // widened by one on each side when they are equal too.
  Value use_data = b.Compare(low, high, Direction::kEq);
  if (n > 0) {
    // A NaN element makes both extremes NaN, as CPU's aminmax does.
    Value is_nan = b.Compare(x, x, Direction::kNe);
    Value data_low = ReduceAll(b, x, INFINITY, false);
    Value data_high = ReduceAll(b, x, -INFINITY, true);
    Value any_nan = b.Reduce({is_nan}, {b.Constant(ElementType::kPred, 0.0)}, {0},
                             [](FunctionBuilder& body, std::span<const Value> args) {
                               return std::vector<Value>{body.Or(args[0], args[1])};
                             })[0];
    Value nan_scalar = context.Constant(std::numeric_limits<double>::quiet_NaN(), compute);
    low = b.Select(use_data, b.Select(any_nan, nan_scalar, data_low), low);
    high = b.Select(use_data, b.Select(any_nan, nan_scalar, data_high), high);
  }
  Value equal = b.Compare(low, high, Direction::kEq);
  Value one = context.Constant(1.0, compute);
  low = b.Select(equal, round(b.Subtract(low, one)), low);
  high = b.Select(equal, round(b.Add(high, one)), high);
  Value finite = b.And(b.IsFinite(low), b.IsFinite(high));
  context.CheckNotViolated(b.Not(finite), "torch.histc: range of [min, max] is not finite");
  if (n == 0) return {context.Constant(0.0, dtype, {bins})};

  Value low_n = b.BroadcastInDim(low, {n}, {}), high_n = b.BroadcastInDim(high, {n}, {});
  Value scaled = round(b.Multiply(round(b.Subtract(x, low_n)),
                                  context.Constant(static_cast<double>(bins), compute, {n})));
  Value position = round(b.Divide(scaled, round(b.Subtract(high_n, low_n))));
  Value bin = b.Convert(position, ElementType::kS64);
  Value last = b.ConstantInt(ElementType::kS64, bins - 1, {n});
  bin = b.Select(b.Compare(bin, b.ConstantInt(ElementType::kS64, bins, {n}), Direction::kEq), last,
                 bin);
  Value inside =
      b.And(b.Compare(x, low_n, Direction::kGe), b.Compare(x, high_n, Direction::kLe));
  // Elements not counted go to index `bins`, outside the result: scatter skips them.
  bin = b.Select(inside, bin, b.ConstantInt(ElementType::kS64, bins, {n}));
  FunctionBuilder::ScatterDimensions dimensions;
  dimensions.inserted_window_dims = {0};
  dimensions.scatter_dims_to_operand_dims = {0};
  dimensions.index_vector_dim = 1;
  Value counts = b.Scatter({context.Constant(0.0, c10::kFloat, {bins})}, b.Reshape(bin, {n, 1}),
                           {context.Constant(1.0, c10::kFloat, {n})}, dimensions,
                           [](FunctionBuilder& body, std::span<const Value> args) {
                             return std::vector<Value>{body.Add(args[0], args[1])};
                           })[0];
  return {context.Convert(counts, dtype)};
}
TORCH_TPU_LOWERING(Histc, "aten::histc", "aten::histc.out");

}  // namespace
}  // namespace torch_tpu::lowering

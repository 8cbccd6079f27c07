// Inclusive scans along one dim beyond cumsum/cumprod: logcumsumexp, and cummax/cummin with the
// index of each running extremum (a window reduction over all preceding elements whose combiner
// is associative and commutative, so the reduction order XLA picks cannot matter).
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>

#include "lowering/context.h"
#include "lowering/opmath.h"

namespace torch_tpu::lowering {
namespace {

// Window and padding of an inclusive scan along `dim` of `dims`.
struct ScanWindow {
  std::vector<int64_t> window;
  std::vector<std::pair<int64_t, int64_t>> padding;
};
ScanWindow Scan(const std::vector<int64_t>& dims, int64_t dim) {
  ScanWindow scan{std::vector<int64_t>(dims.size(), 1),
                  std::vector<std::pair<int64_t, int64_t>>(dims.size(), {0, 0})};
  scan.window[dim] = dims[dim];
  scan.padding[dim] = {dims[dim] - 1, 0};
  return scan;
}

Value IsNan(FunctionBuilder& b, Value x) { return b.Compare(x, x, Direction::kNe); }

// A running log-sum carried as the unevaluated sum high + low of two floats: CPU accumulates
// float logcumsumexp in double and rounds each output once, and its backward (composite, of
// differences between the result and the input) magnifies any other rounding: near 1e4 one f32
// ulp of the result is a 1e-3 relative change of the gradient.
struct Compensated {
  Value high, low;
};

// a + b exactly, as the rounded sum and its rounding error (Knuth's TwoSum).
Compensated TwoSum(FunctionBuilder& b, Value x, Value y) {
  Value sum = b.Add(x, y);
  Value y_part = b.Subtract(sum, x);
  Value x_part = b.Subtract(sum, y_part);
  return {sum, b.Add(b.Subtract(x, x_part), b.Subtract(y, y_part))};
}

// log(exp(a) + exp(b)) as CPU's scan step computes it: NaN propagates, equal infinities return
// themselves (their difference would be NaN).
Compensated LogAddExp(FunctionBuilder& b, const Compensated& x, const Compensated& y) {
  Value x_larger = b.Compare(x.high, y.high, Direction::kGe);
  Value high = b.Select(x_larger, x.high, y.high), high_low = b.Select(x_larger, x.low, y.low);
  Value low = b.Select(x_larger, y.high, x.high), low_low = b.Select(x_larger, y.low, x.low);
  Value difference = b.Add(b.Subtract(low, high), b.Subtract(low_low, high_low));
  Compensated sum = TwoSum(b, high, b.Add(b.Log1p(b.Exp(difference)), high_low));
  Value same_infinity = b.And(b.Compare(low, high, Direction::kEq), b.Not(b.IsFinite(low)));
  Value nan = b.Constant(high.element_type(), std::numeric_limits<double>::quiet_NaN(),
                         high.dims());
  Value any_nan = b.Or(IsNan(b, x.high), IsNan(b, y.high));
  Value result = b.Select(any_nan, nan, b.Select(same_infinity, high, sum.high));
  // An infinite or NaN sum has no rounding error to carry (TwoSum's would be NaN).
  Value error = b.Select(b.IsFinite(result), sum.low,
                         b.Constant(high.element_type(), 0.0, high.dims()));
  return {result, error};
}

// _logcumsumexp(self, dim): accumulates as compensated pairs (in f32 for half types) and rounds
// each output once. The scan is log2(n) elementwise steps (each element combined with the one
// 2^k before it) rather than a window reduction: TPU compilers model only simple reduction
// bodies, not log-add-exp.
std::vector<Value> LogCumSumExp(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[0].dtype;
  CheckKernelDtype(context, c10::isFloatingType(dtype), "logcumsumexp_out_cpu", dtype);
  auto& b = context.builder();
  Value x = context.Convert(operands[0].value, ComputeDtype(dtype));
  if (x.rank() == 0) return {operands[0].value};
  const int64_t dim = context.WrapDim(context.Int(operands[1]), x.rank());
  const int64_t length = x.dims()[dim];
  Value minus_infinity = b.Constant(x.element_type(), -std::numeric_limits<double>::infinity());
  Value zero = b.Constant(x.element_type(), 0.0);
  Compensated scan{x, b.Constant(x.element_type(), 0.0, x.dims())};
  for (int64_t shift = 1; shift < length; shift *= 2) {
    std::vector<int64_t> low(x.rank(), 0), high(x.rank(), 0), interior(x.rank(), 0);
    low[dim] = shift;
    high[dim] = -shift;
    scan = LogAddExp(b, scan, {b.Pad(scan.high, minus_infinity, low, high, interior),
                               b.Pad(scan.low, zero, low, high, interior)});
  }
  return {context.Convert(b.Add(scan.high, scan.low), dtype)};
}
TORCH_TPU_LOWERING(LogCumSumExp, "aten::_logcumsumexp", "aten::_logcumsumexp.out");

// cummax / cummin(self, dim) -> (values, indices). CPU's scan replaces the running extremum when
// the new element is NaN or at least as large (small): ties and NaNs go to the later element, and
// a NaN is only replaced by a later NaN. As a combiner of two (value, index) pairs that rule asks
// which of the two is later, so it does not depend on the order XLA combines them in.
template <bool kMax>
std::vector<Value> CumulativeExtremum(LoweringContext& context,
                                      std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = operands[0].dtype;
  // pred has no ordering comparisons of its own; scan booleans as u8.
  Value x = dtype == c10::kBool ? context.Convert(operands[0].value, c10::kByte)
                                : operands[0].value;
  const int64_t dim = context.WrapDim(context.Int(operands[1]), std::max<int64_t>(x.rank(), 1));
  if (x.rank() == 0 || x.dims()[dim] == 0) {
    return {operands[0].value, b.ConstantInt(ElementType::kS64, 0, x.dims())};
  }
  const ScanWindow scan = Scan(x.dims(), dim);
  Value positions = b.Iota(TensorType{ElementType::kS64, x.dims()}, dim);
  const ElementType type = x.element_type();
  const bool is_float = c10::isFloatingType(dtype);
  Value init_value;
  if (is_float) {
    init_value = b.Constant(type, kMax ? -INFINITY : INFINITY);
  } else {
    // The lowest (highest) value of the integer type, so that any element replaces it.
    const auto limits = [&]() -> std::pair<int64_t, int64_t> {
      switch (dtype) {
        case c10::kByte: case c10::kBool: return {0, 255};
        case c10::kChar: return {INT8_MIN, INT8_MAX};
        case c10::kShort: return {INT16_MIN, INT16_MAX};
        case c10::kInt: return {INT32_MIN, INT32_MAX};
        default: return {INT64_MIN, INT64_MAX};
      }
    }();
    init_value = b.ConstantInt(type, kMax ? limits.first : limits.second);
  }
  auto results = b.ReduceWindow(
      {x, positions}, {init_value, b.ConstantInt(ElementType::kS64, -1)}, scan.window, {}, {}, {},
      scan.padding, [is_float](FunctionBuilder& body, std::span<const Value> args) {
        Value first_later = body.Compare(args[1], args[3], Direction::kGt);
        Value later = body.Select(first_later, args[0], args[2]);
        Value earlier = body.Select(first_later, args[2], args[0]);
        Value later_index = body.Select(first_later, args[1], args[3]);
        Value earlier_index = body.Select(first_later, args[3], args[1]);
        Value take_later = body.Compare(later, earlier, kMax ? Direction::kGe : Direction::kLe);
        if (is_float) {
          take_later = body.Or(IsNan(body, later), body.And(body.Not(IsNan(body, earlier)),
                                                            take_later));
        }
        return std::vector<Value>{body.Select(take_later, later, earlier),
                                  body.Select(take_later, later_index, earlier_index)};
      });
  return {dtype == c10::kBool ? context.Convert(results[0], c10::kBool) : results[0], results[1]};
}
TORCH_TPU_LOWERING(CumulativeExtremum<true>, "aten::cummax", "aten::cummax.out");
TORCH_TPU_LOWERING(CumulativeExtremum<false>, "aten::cummin", "aten::cummin.out");

}  // namespace
}  // namespace torch_tpu::lowering

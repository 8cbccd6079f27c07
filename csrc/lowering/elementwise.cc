// Elementwise arithmetic, comparisons and selection, with PyTorch's type promotion and
// broadcasting. Runtime scalars (Python numbers, alpha) arrive as 0-d f64/s64/pred values.
#include <c10/util/Exception.h>

#include "lowering/arithmetic_checks.h"
#include "lowering/context.h"
#include "lowering/extremum.h"
#include "lowering/opmath.h"

namespace torch_tpu::lowering {
namespace {

bool IsFloating(c10::ScalarType dtype) { return c10::isFloatingType(dtype); }
bool IsIntegral(c10::ScalarType dtype) { return c10::isIntegralType(dtype, /*includeBool=*/true); }

}  // namespace

void CheckSubtractionOperands(LoweringContext& context, const Operand& self,
                              const Operand& other) {
  const bool self_bool = self.dtype == c10::kBool;
  const bool other_bool = other.dtype == c10::kBool;
  TORCH_CHECK(!(self_bool && other_bool), context.op_name(),
              ": Subtraction, the `-` operator, with two bool tensors is not supported. Use the "
              "`^` or `logical_xor()` operator instead.");
  TORCH_CHECK(!(self_bool || other_bool), context.op_name(),
              ": Subtraction, the `-` operator, with a bool tensor is not supported. If you are "
              "trying to invert a mask, use the `~` or `logical_not()` operator instead.");
}

void CheckAlpha(LoweringContext& context, std::span<const Operand> operands,
                c10::ScalarType dtype) {
  if (operands.size() <= 2 || operands[2].is_none()) return;
  const c10::ScalarType alpha = operands[2].dtype;
  TORCH_CHECK(dtype == c10::kBool || alpha != c10::kBool, context.op_name(),
              ": Boolean alpha only supported for Boolean results.");
  TORCH_CHECK(IsFloating(dtype) || c10::isComplexType(dtype) ||
                  !(IsFloating(alpha) || c10::isComplexType(alpha)),
              context.op_name(),
              ": For integral input tensors, argument alpha must not be a floating point "
              "number.");
}

namespace {

// (self, other[, alpha]) -> self op alpha * other, in the promoted dtype. Like CPU, half types
// round Python numbers and alpha to their dtype, then compute in f32 and round once.
template <bool kSubtract>
std::vector<Value> AddOrSubtract(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = context.PromotedType(operands.subspan(0, 2));
  if (kSubtract) CheckSubtractionOperands(context, operands[0], operands[1]);
  CheckAlpha(context, operands, dtype);
  auto values =
      OpmathOperands(context, operands.subspan(0, 2), dtype, HalfScalars::kRoundedToDtype);
  auto& builder = context.builder();
  Value other = values[1];
  if (operands.size() > 2 && operands[2].is_value()) {
    Value alpha =
        OpmathScalar(context, operands[2], dtype, HalfScalars::kRoundedToDtype, other.dims());
    other = dtype == c10::kBool ? builder.And(other, alpha) : builder.Multiply(other, alpha);
  }
  Value result = kSubtract             ? builder.Subtract(values[0], other)
                 : dtype == c10::kBool ? builder.Or(values[0], other)
                                       : builder.Add(values[0], other);
  return {context.Convert(result, dtype)};
}
TORCH_TPU_LOWERING(AddOrSubtract<false>, "aten::add.Tensor", "aten::add_.Tensor", "aten::add.out");
TORCH_TPU_LOWERING(AddOrSubtract<false>, "aten::add.Scalar", "aten::add_.Scalar");
TORCH_TPU_LOWERING(AddOrSubtract<true>, "aten::sub.Tensor", "aten::sub_.Tensor", "aten::sub.out");
TORCH_TPU_LOWERING(AddOrSubtract<true>, "aten::sub.Scalar", "aten::sub_.Scalar");

// Half types multiply in f32 by the Python number's f32 value and round once, as on CPU.
std::vector<Value> Multiply(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = context.PromotedType(operands);
  auto values = OpmathOperands(context, operands, dtype, HalfScalars::kFloat);
  if (dtype == c10::kBool) return {context.builder().And(values[0], values[1])};
  return {context.Convert(context.builder().Multiply(values[0], values[1]), dtype)};
}
TORCH_TPU_LOWERING(Multiply, "aten::mul.Tensor", "aten::mul_.Tensor", "aten::mul.out");
TORCH_TPU_LOWERING(Multiply, "aten::mul.Scalar", "aten::mul_.Scalar");

// div.Tensor / div.Scalar (true division) and div.Tensor_mode / div.Scalar_mode.
std::vector<Value> Divide(LoweringContext& context, std::span<const Operand> operands) {
  std::optional<std::string> mode;
  if (operands.size() > 2 && !operands[2].is_none()) mode = operands[2].ivalue.toStringRef();
  c10::ScalarType dtype = context.PromotedType(operands.subspan(0, 2));
  if (!mode && IsIntegral(dtype)) dtype = c10::get_default_dtype_as_scalartype();
  // Half types divide in f32 by the Python number's f32 value and round once, as on CPU.
  auto values = OpmathOperands(context, operands.subspan(0, 2), dtype, HalfScalars::kFloat);
  auto& builder = context.builder();
  if (!mode) return {context.Convert(builder.Divide(values[0], values[1]), dtype)};
  TORCH_CHECK(*mode == "trunc" || *mode == "floor", context.op_name(),
              ": div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '",
              *mode, "'");
  CheckKernelDtype(context, dtype != c10::kBool,
                   *mode == "floor" ? "div_floor_cpu" : "div_trunc_cpu", dtype);
  if (*mode == "floor") return {context.Convert(FloorDivide(context, values[0], values[1]), dtype)};
  CheckIntegerDivisor(context, values[1]);
  Value quotient = builder.Divide(values[0], values[1]);
  if (!stablehlo::IsFloat(quotient.element_type())) return {quotient};
  // Truncation toward zero: floor of |q| with q's sign.
  return {context.Convert(
      builder.Multiply(builder.Sign(quotient), builder.Floor(builder.Abs(quotient))), dtype)};
}
TORCH_TPU_LOWERING(Divide, "aten::div.Tensor", "aten::div_.Tensor", "aten::div.out");
TORCH_TPU_LOWERING(Divide, "aten::div.Scalar", "aten::div_.Scalar");
TORCH_TPU_LOWERING(Divide, "aten::div.Tensor_mode", "aten::div_.Tensor_mode", "aten::div.out_mode");
TORCH_TPU_LOWERING(Divide, "aten::div.Scalar_mode", "aten::div_.Scalar_mode");

template <Direction kDirection>
std::vector<Value> Compare(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = context.PromotedType(operands);
  auto values = context.PromoteAndBroadcast(operands, dtype);
  return {context.builder().Compare(values[0], values[1], kDirection)};
}
TORCH_TPU_LOWERING(Compare<Direction::kEq>, "aten::eq.Tensor", "aten::eq_.Tensor",
                   "aten::eq.Tensor_out");
TORCH_TPU_LOWERING(Compare<Direction::kEq>, "aten::eq.Scalar", "aten::eq_.Scalar",
                   "aten::eq.Scalar_out");
TORCH_TPU_LOWERING(Compare<Direction::kNe>, "aten::ne.Tensor", "aten::ne_.Tensor",
                   "aten::ne.Tensor_out");
TORCH_TPU_LOWERING(Compare<Direction::kNe>, "aten::ne.Scalar", "aten::ne_.Scalar",
                   "aten::ne.Scalar_out");
TORCH_TPU_LOWERING(Compare<Direction::kLt>, "aten::lt.Tensor", "aten::lt_.Tensor",
                   "aten::lt.Tensor_out");
TORCH_TPU_LOWERING(Compare<Direction::kLt>, "aten::lt.Scalar", "aten::lt_.Scalar",
                   "aten::lt.Scalar_out");
TORCH_TPU_LOWERING(Compare<Direction::kLe>, "aten::le.Tensor", "aten::le_.Tensor",
                   "aten::le.Tensor_out");
TORCH_TPU_LOWERING(Compare<Direction::kLe>, "aten::le.Scalar", "aten::le_.Scalar",
                   "aten::le.Scalar_out");
TORCH_TPU_LOWERING(Compare<Direction::kGt>, "aten::gt.Tensor", "aten::gt_.Tensor",
                   "aten::gt.Tensor_out");
TORCH_TPU_LOWERING(Compare<Direction::kGt>, "aten::gt.Scalar", "aten::gt_.Scalar",
                   "aten::gt.Scalar_out");
TORCH_TPU_LOWERING(Compare<Direction::kGe>, "aten::ge.Tensor", "aten::ge_.Tensor",
                   "aten::ge.Tensor_out");
TORCH_TPU_LOWERING(Compare<Direction::kGe>, "aten::ge.Scalar", "aten::ge_.Scalar",
                   "aten::ge.Scalar_out");

std::vector<Value> Negate(LoweringContext& context, std::span<const Operand> operands) {
  TORCH_CHECK(operands[0].dtype != c10::kBool, context.op_name(),
              ": negation, the `-` operator, on a bool tensor is not supported. If you are "
              "trying to invert a mask, use the `~` or `logical_not()` operator instead.");
  return {context.builder().Negate(operands[0].value)};
}
TORCH_TPU_LOWERING(Negate, "aten::neg", "aten::neg_", "aten::neg.out");

std::vector<Value> Abs(LoweringContext& context, std::span<const Operand> operands) {
  CheckKernelDtype(context, operands[0].dtype != c10::kBool, "abs_cpu", operands[0].dtype);
  if (operands[0].dtype == c10::kBool ||
      (c10::isIntegralType(operands[0].dtype, false) && !c10::isSignedType(operands[0].dtype))) {
    return {operands[0].value};
  }
  return {context.builder().Abs(operands[0].value)};
}
TORCH_TPU_LOWERING(Abs, "aten::abs", "aten::abs_", "aten::abs.out");

// where.self(condition, self, other)
std::vector<Value> Where(LoweringContext& context, std::span<const Operand> operands) {
  TORCH_CHECK(operands[0].dtype == c10::kBool || operands[0].dtype == c10::kByte, context.op_name(),
              ": where expected condition to be a boolean tensor, but got a "
              "tensor with dtype ",
              operands[0].dtype);
  const c10::ScalarType dtype = context.PromotedType(operands.subspan(1, 2));
  std::vector<std::vector<int64_t>> shapes = {operands[0].value.dims(), operands[1].value.dims(),
                                              operands[2].value.dims()};
  const auto shape = context.BroadcastShape(shapes);
  Value condition = context.BroadcastTo(context.Convert(operands[0].value, c10::kBool), shape);
  Value on_true = context.BroadcastTo(context.Convert(operands[1].value, dtype), shape);
  Value on_false = context.BroadcastTo(context.Convert(operands[2].value, dtype), shape);
  return {context.builder().Select(condition, on_true, on_false)};
}
TORCH_TPU_LOWERING(Where, "aten::where.self", "aten::where.self_out");

// fill.Scalar / fill.Tensor (self, value): value broadcast to self's shape and dtype.
std::vector<Value> Fill(LoweringContext& context, std::span<const Operand> operands) {
  TORCH_CHECK(operands[1].value.rank() == 0, context.op_name(),
              ": fill_ only supports 0-dimension value tensor but got tensor with ",
              operands[1].value.rank(), " dimensions.");
  Value value = context.Convert(operands[1].value, operands[0].dtype);
  return {context.BroadcastTo(value, operands[0].value.dims())};
}
TORCH_TPU_LOWERING(Fill, "aten::fill.Scalar", "aten::fill_.Scalar");
TORCH_TPU_LOWERING(Fill, "aten::fill.Tensor", "aten::fill_.Tensor");

std::vector<Value> Zero(LoweringContext& context, std::span<const Operand> operands) {
  return {context.Constant(0.0, operands[0].dtype, operands[0].value.dims())};
}
TORCH_TPU_LOWERING(Zero, "aten::zero", "aten::zero_");

// masked_fill.Scalar / masked_fill.Tensor (self, mask, value)
std::vector<Value> MaskedFill(LoweringContext& context, std::span<const Operand> operands) {
  TORCH_CHECK(operands[1].dtype == c10::kBool, context.op_name(),
              ": masked_fill_ only supports boolean masks, but got mask with dtype ",
              operands[1].dtype);
  TORCH_CHECK(operands[2].value.rank() == 0, context.op_name(),
              ": masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              operands[2].value.rank(), " dimension(s).");
  const auto& dims = operands[0].value.dims();
  std::vector<std::vector<int64_t>> shapes = {dims, operands[1].value.dims()};
  const auto shape = context.BroadcastShape(shapes);
  Value self = context.BroadcastTo(operands[0].value, shape);
  Value mask = context.BroadcastTo(operands[1].value, shape);
  Value value = context.BroadcastTo(context.Convert(operands[2].value, operands[0].dtype), shape);
  return {context.builder().Select(mask, value, self)};
}
TORCH_TPU_LOWERING(MaskedFill, "aten::masked_fill.Scalar", "aten::masked_fill_.Scalar");
TORCH_TPU_LOWERING(MaskedFill, "aten::masked_fill.Tensor", "aten::masked_fill_.Tensor");

// clamp(self, Scalar? min, Scalar? max) and clamp.Tensor(self, Tensor? min, Tensor? max)
std::vector<Value> Clamp(LoweringContext& context, std::span<const Operand> operands) {
  TORCH_CHECK(!operands[1].is_none() || !operands[2].is_none(), context.op_name(),
              ": clamp: At least one of 'min' or 'max' must not be None");
  const c10::ScalarType dtype = context.PromotedType(operands);
  if (operands[1].kind != Operand::Kind::kTensor && operands[2].kind != Operand::Kind::kTensor) {
    // CPU's kernel runs in the promoted type: a bool tensor clamped by integers is clamped as
    // integers.
    const char* kernel = operands[2].is_none()   ? "clamp_min_scalar_cpu"
                         : operands[1].is_none() ? "clamp_max_scalar_cpu"
                                                 : "clamp_scalar_cpu";
    CheckKernelDtype(context, dtype != c10::kBool, kernel, dtype);
  }
  auto values = context.PromoteAndBroadcast(operands, dtype);
  auto& builder = context.builder();
  Value result = values[0];
  size_t next = 1;
  // A NaN input or bound gives NaN, as on CPU.
  if (!operands[1].is_none()) {
    result = NanPropagatingExtremum(builder, result, values[next++], /*maximum=*/true);
  }
  if (!operands[2].is_none()) {
    result = NanPropagatingExtremum(builder, result, values[next++], /*maximum=*/false);
  }
  return {result};
}
TORCH_TPU_LOWERING(Clamp, "aten::clamp", "aten::clamp_", "aten::clamp.out");
TORCH_TPU_LOWERING(Clamp, "aten::clamp.Tensor", "aten::clamp_.Tensor", "aten::clamp.Tensor_out");

}  // namespace

}  // namespace torch_tpu::lowering

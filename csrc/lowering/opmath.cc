#include "lowering/opmath.h"

namespace torch_tpu::lowering {

bool IsCpuScalar(std::span<const Operand> operands, size_t index) {
  const Operand& operand = operands[index];
  if (operand.kind == Operand::Kind::kScalar || operand.wrapped_number) return true;
  return index > 0 && operand.kind == Operand::Kind::kTensor && operand.value.rank() == 0;
}

namespace {

Value ToCompute(LoweringContext& context, const Operand& operand, bool scalar,
                c10::ScalarType dtype, HalfScalars scalars) {
  const bool via_dtype = !scalar || scalars == HalfScalars::kRoundedToDtype;
  Value value = via_dtype ? context.Convert(operand.value, dtype) : operand.value;
  return context.Convert(value, ComputeDtype(dtype));
}

}  // namespace

std::vector<Value> OpmathOperands(LoweringContext& context, std::span<const Operand> operands,
                                  c10::ScalarType dtype, HalfScalars scalars) {
  std::vector<std::vector<int64_t>> shapes;
  for (const Operand& operand : operands) {
    if (operand.is_value()) shapes.push_back(operand.value.dims());
  }
  const std::vector<int64_t> shape = context.BroadcastShape(shapes);
  std::vector<Value> values;
  for (size_t i = 0; i < operands.size(); ++i) {
    if (!operands[i].is_value()) continue;
    const bool scalar = IsCpuScalar(operands, i);
    values.push_back(
        context.BroadcastTo(ToCompute(context, operands[i], scalar, dtype, scalars), shape));
  }
  return values;
}

void CheckKernelDtype(LoweringContext& context, bool supported, const char* kernel,
                      c10::ScalarType dtype) {
  TORCH_CHECK_NOT_IMPLEMENTED(supported, context.op_name(), ": \"", kernel,
                              "\" not implemented for '", c10::toString(dtype), "'");
}

Value FloorDivide(LoweringContext& context, Value a, Value b) {
  using Direction = stablehlo::FunctionBuilder::ComparisonDirection;
  auto& builder = context.builder();
  const stablehlo::ElementType type = a.element_type();
  auto splat = [&](double value) { return builder.Constant(type, value, a.dims()); };
  Value zero = splat(0.0), one = splat(1.0);
  if (!stablehlo::IsFloat(type)) {
    CheckIntegerDivisor(context, b);
    // Integer division truncates; step down when the remainder is non-zero and signs differ.
    Value quotient = builder.Divide(a, b);
    Value nonzero = builder.Compare(builder.Remainder(a, b), zero, Direction::kNe);
    Value signs_differ = builder.Compare(builder.Compare(a, zero, Direction::kLt),
                                         builder.Compare(b, zero, Direction::kLt), Direction::kNe);
    return builder.Select(builder.And(nonzero, signs_differ), builder.Subtract(quotient, one),
                          quotient);
  }
  Value mod = builder.Remainder(a, b);
  Value division = builder.Divide(builder.Subtract(a, mod), b);
  Value mod_nonzero = builder.Compare(mod, zero, Direction::kNe);
  Value signs_differ = builder.Compare(builder.Compare(b, zero, Direction::kLt),
                                       builder.Compare(mod, zero, Direction::kLt), Direction::kNe);
  division = builder.Select(builder.And(mod_nonzero, signs_differ), builder.Subtract(division, one),
                            division);
  Value floored = builder.Floor(division);
  floored = builder.Select(
      builder.Compare(builder.Subtract(division, floored), splat(0.5), Direction::kGt),
      builder.Add(floored, one), floored);
  // A zero quotient keeps the sign of a / b; a zero divisor gives IEEE's a / b.
  Value quotient = builder.Divide(a, b);
  const stablehlo::ElementType bits =
      type == stablehlo::ElementType::kF64   ? stablehlo::ElementType::kS64
      : type == stablehlo::ElementType::kF32 ? stablehlo::ElementType::kS32
                                             : stablehlo::ElementType::kS16;
  Value negative = builder.Compare(builder.BitcastConvert(quotient, bits),
                                   builder.ConstantInt(bits, 0, a.dims()), Direction::kLt);
  Value signed_zero = builder.Select(negative, splat(-0.0), zero);
  Value result =
      builder.Select(builder.Compare(division, zero, Direction::kEq), signed_zero, floored);
  return builder.Select(builder.Compare(b, zero, Direction::kEq), quotient, result);
}

void CheckIntegerDivisor(LoweringContext& context, Value divisor) {
  const stablehlo::ElementType type = divisor.element_type();
  if (stablehlo::IsFloat(type) || stablehlo::IsPred(type)) return;
  if (divisor.type().NumElements() == 0) return;
  auto& builder = context.builder();
  Value zero = builder.ConstantInt(type, 0, divisor.dims());
  Value is_zero =
      builder.Compare(divisor, zero, stablehlo::FunctionBuilder::ComparisonDirection::kEq);
  std::vector<int64_t> all_dims(divisor.rank());
  for (int64_t d = 0; d < divisor.rank(); ++d) all_dims[d] = d;
  Value any = is_zero;
  if (!all_dims.empty()) {
    any =
        builder.Reduce({is_zero}, {builder.Constant(stablehlo::ElementType::kPred, 0.0)}, all_dims,
                       [](stablehlo::FunctionBuilder& body, std::span<const Value> args) {
                         return std::vector<Value>{body.Or(args[0], args[1])};
                       })[0];
  }
  context.CheckNotViolated(any, "ZeroDivisionError");
}

Value OpmathScalar(LoweringContext& context, const Operand& operand, c10::ScalarType dtype,
                   HalfScalars scalars, const std::vector<int64_t>& dims) {
  return context.BroadcastTo(ToCompute(context, operand, /*scalar=*/true, dtype, scalars), dims);
}

Value RoundThrough(LoweringContext& context, Value value, c10::ScalarType dtype) {
  if (ComputeDtype(dtype) == dtype) return value;
  return context.Convert(context.Convert(value, dtype), ComputeDtype(dtype));
}

}  // namespace torch_tpu::lowering

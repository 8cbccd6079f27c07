#include "lowering/opmath.h"

namespace torch_tpu::lowering {

using stablehlo::Value;

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

Value OpmathScalar(LoweringContext& context, const Operand& operand, c10::ScalarType dtype,
                   HalfScalars scalars, const std::vector<int64_t>& dims) {
  return context.BroadcastTo(ToCompute(context, operand, /*scalar=*/true, dtype, scalars), dims);
}

}  // namespace torch_tpu::lowering

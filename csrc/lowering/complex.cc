// Complex numbers: building them from parts (complex, polar) and conjugation. Parts (real, imag,
// view_as_real) are views, not lowerings: they reinterpret the storage (exec/view_io).
#include "lowering/complex.h"

#include <c10/util/Exception.h>

#include "lowering/context.h"

namespace torch_tpu::lowering {

Value Conjugate(FunctionBuilder& builder, Value value) {
  if (!stablehlo::IsComplex(value.element_type())) return value;
  return builder.Complex(builder.Real(value), builder.Negate(builder.Imag(value)));
}

Value ApplyViewBits(FunctionBuilder& builder, Value stored, bool conjugate, bool negative) {
  Value shown = conjugate ? Conjugate(builder, stored) : stored;
  return negative ? builder.Negate(shown) : shown;
}

namespace {

// CPU's dtype rules for building complex numbers from two real tensors.
void CheckParts(LoweringContext& context, const Operand& a, const Operand& b) {
  auto is_part = [](c10::ScalarType dtype) {
    return dtype == c10::kFloat || dtype == c10::kDouble || dtype == c10::kHalf;
  };
  TORCH_CHECK_TYPE(is_part(a.dtype) && is_part(b.dtype), context.op_name(),
                   ": Expected both inputs to be Half, Float or Double tensors but got ", a.dtype,
                   " and ", b.dtype);
  TORCH_CHECK_TYPE(a.dtype != c10::kHalf, context.op_name(), ": dtype ComplexHalf is not ",
                   "supported on the tpu device");
  TORCH_CHECK_TYPE(a.dtype == b.dtype, context.op_name(), ": Expected object of scalar type ",
                   a.dtype, " but got scalar type ", b.dtype, " for second argument");
}

// Both parts broadcast to their common shape.
std::pair<Value, Value> BroadcastParts(LoweringContext& context, const Operand& a,
                                       const Operand& b) {
  const std::vector<int64_t> shapes[] = {a.value.dims(), b.value.dims()};
  const std::vector<int64_t> shape = context.BroadcastShape(shapes);
  return {context.BroadcastTo(a.value, shape), context.BroadcastTo(b.value, shape)};
}

// complex(real, imag)
std::vector<Value> Complex(LoweringContext& context, std::span<const Operand> operands) {
  CheckParts(context, operands[0], operands[1]);
  auto [real, imag] = BroadcastParts(context, operands[0], operands[1]);
  return {context.builder().Complex(real, imag)};
}
TORCH_TPU_LOWERING(Complex, "aten::complex", "aten::complex.out");

// polar(abs, angle) = abs * (cos(angle) + i sin(angle))
std::vector<Value> Polar(LoweringContext& context, std::span<const Operand> operands) {
  CheckParts(context, operands[0], operands[1]);
  auto [modulus, angle] = BroadcastParts(context, operands[0], operands[1]);
  auto& b = context.builder();
  return {b.Complex(b.Multiply(modulus, b.Cosine(angle)), b.Multiply(modulus, b.Sine(angle)))};
}
TORCH_TPU_LOWERING(Polar, "aten::polar", "aten::polar.out");

// _conj_physical(self): the conjugate in new storage (what resolve_conj materializes).
std::vector<Value> ConjPhysical(LoweringContext& context, std::span<const Operand> operands) {
  return {Conjugate(context.builder(), operands[0].value)};
}
TORCH_TPU_LOWERING(ConjPhysical, "aten::_conj_physical", "aten::conj_physical_",
                   "aten::conj_physical.out");

}  // namespace
}  // namespace torch_tpu::lowering

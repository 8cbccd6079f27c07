// Elementwise math: transcendental and rounding functions, activations and their backward
// formulas, logical/bitwise ops, pow/min/max/remainder, lerp/addcmul/addcdiv.
//
// Half-precision inputs are computed in f32 and rounded once at the end, as PyTorch's CPU kernels
// do, so results match CPU bit-for-bit in most cases.
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>

#include "lowering/arithmetic_checks.h"
#include "lowering/context.h"
#include "lowering/extremum.h"
#include "lowering/opmath.h"

namespace torch_tpu::lowering {
namespace {

// Result dtype of a float function of `dtype`: integers and bool become the default float.
c10::ScalarType FloatResult(c10::ScalarType dtype) {
  return c10::isFloatingType(dtype) || c10::isComplexType(dtype)
             ? dtype
             : c10::get_default_dtype_as_scalartype();
}

using UnaryMath = Value (*)(LoweringContext&, Value);

// Applies `function` to one float operand (after promotion), in f32 for half types.
template <UnaryMath function>
std::vector<Value> FloatUnary(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType result = FloatResult(operands[0].dtype);
  Value input = context.Convert(operands[0].value, ComputeDtype(result));
  return {context.Convert(function(context, input), result)};
}

#define TORCH_TPU_UNARY(name, expression)         \
  Value name(LoweringContext& context, Value x) { \
    [[maybe_unused]] auto& b = context.builder(); \
    return expression;                            \
  }

TORCH_TPU_UNARY(ExpOf, b.Exp(x))
TORCH_TPU_LOWERING(FloatUnary<ExpOf>, "aten::exp", "aten::exp_", "aten::exp.out");
TORCH_TPU_UNARY(Exp2Of, b.Exp(b.Multiply(x, FullLike(context, M_LN2, x))))
TORCH_TPU_LOWERING(FloatUnary<Exp2Of>, "aten::exp2", "aten::exp2_", "aten::exp2.out");
TORCH_TPU_UNARY(Expm1Of, b.Expm1(x))
TORCH_TPU_LOWERING(FloatUnary<Expm1Of>, "aten::expm1", "aten::expm1_", "aten::expm1.out");
TORCH_TPU_UNARY(LogOf, b.Log(x))
TORCH_TPU_LOWERING(FloatUnary<LogOf>, "aten::log", "aten::log_", "aten::log.out");
TORCH_TPU_UNARY(Log2Of, b.Divide(b.Log(x), FullLike(context, M_LN2, x)))
TORCH_TPU_LOWERING(FloatUnary<Log2Of>, "aten::log2", "aten::log2_", "aten::log2.out");
TORCH_TPU_UNARY(Log10Of, b.Divide(b.Log(x), FullLike(context, M_LN10, x)))
TORCH_TPU_LOWERING(FloatUnary<Log10Of>, "aten::log10", "aten::log10_", "aten::log10.out");
TORCH_TPU_UNARY(Log1pOf, b.Log1p(x))
TORCH_TPU_LOWERING(FloatUnary<Log1pOf>, "aten::log1p", "aten::log1p_", "aten::log1p.out");
TORCH_TPU_UNARY(SqrtOf, b.Sqrt(x))
TORCH_TPU_LOWERING(FloatUnary<SqrtOf>, "aten::sqrt", "aten::sqrt_", "aten::sqrt.out");
// 1 / sqrt(x), both correctly rounded, as on CPU; rsqrt may be an approximation.
TORCH_TPU_UNARY(RsqrtOf, b.Divide(FullLike(context, 1.0, x), b.Sqrt(x)))
TORCH_TPU_LOWERING(FloatUnary<RsqrtOf>, "aten::rsqrt", "aten::rsqrt_", "aten::rsqrt.out");
TORCH_TPU_UNARY(SinOf, b.Sine(x))
TORCH_TPU_LOWERING(FloatUnary<SinOf>, "aten::sin", "aten::sin_", "aten::sin.out");
TORCH_TPU_UNARY(CosOf, b.Cosine(x))
TORCH_TPU_LOWERING(FloatUnary<CosOf>, "aten::cos", "aten::cos_", "aten::cos.out");
TORCH_TPU_UNARY(TanOf, b.Tan(x))
TORCH_TPU_LOWERING(FloatUnary<TanOf>, "aten::tan", "aten::tan_", "aten::tan.out");
TORCH_TPU_UNARY(TanhOf, b.Tanh(x))
TORCH_TPU_LOWERING(FloatUnary<TanhOf>, "aten::tanh", "aten::tanh_", "aten::tanh.out");
TORCH_TPU_UNARY(SigmoidOf, b.Logistic(x))
TORCH_TPU_LOWERING(FloatUnary<SigmoidOf>, "aten::sigmoid", "aten::sigmoid_", "aten::sigmoid.out");
TORCH_TPU_UNARY(ErfOf, b.Erf(x))
TORCH_TPU_LOWERING(FloatUnary<ErfOf>, "aten::erf", "aten::erf_", "aten::erf.out");
TORCH_TPU_UNARY(ErfcOf, b.Subtract(FullLike(context, 1.0, x), b.Erf(x)))
TORCH_TPU_LOWERING(FloatUnary<ErfcOf>, "aten::erfc", "aten::erfc_", "aten::erfc.out");
TORCH_TPU_UNARY(ErfInvOf, b.ErfInv(x))
TORCH_TPU_LOWERING(FloatUnary<ErfInvOf>, "aten::erfinv", "aten::erfinv_", "aten::erfinv.out");
TORCH_TPU_UNARY(AsinOf, b.Asin(x))
TORCH_TPU_LOWERING(FloatUnary<AsinOf>, "aten::asin", "aten::asin_", "aten::asin.out");
TORCH_TPU_UNARY(AcosOf, b.Acos(x))
TORCH_TPU_LOWERING(FloatUnary<AcosOf>, "aten::acos", "aten::acos_", "aten::acos.out");
TORCH_TPU_UNARY(AtanOf, b.Atan(x))
TORCH_TPU_LOWERING(FloatUnary<AtanOf>, "aten::atan", "aten::atan_", "aten::atan.out");
TORCH_TPU_UNARY(SinhOf, b.Sinh(x))
TORCH_TPU_LOWERING(FloatUnary<SinhOf>, "aten::sinh", "aten::sinh_", "aten::sinh.out");
TORCH_TPU_UNARY(CoshOf, b.Cosh(x))
TORCH_TPU_LOWERING(FloatUnary<CoshOf>, "aten::cosh", "aten::cosh_", "aten::cosh.out");
TORCH_TPU_UNARY(AsinhOf, b.Asinh(x))
TORCH_TPU_LOWERING(FloatUnary<AsinhOf>, "aten::asinh", "aten::asinh_", "aten::asinh.out");
TORCH_TPU_UNARY(AcoshOf, b.Acosh(x))
TORCH_TPU_LOWERING(FloatUnary<AcoshOf>, "aten::acosh", "aten::acosh_", "aten::acosh.out");
TORCH_TPU_UNARY(AtanhOf, b.Atanh(x))
TORCH_TPU_LOWERING(FloatUnary<AtanhOf>, "aten::atanh", "aten::atanh_", "aten::atanh.out");
TORCH_TPU_UNARY(LgammaOf, b.Lgamma(x))
TORCH_TPU_LOWERING(FloatUnary<LgammaOf>, "aten::lgamma", "aten::lgamma_", "aten::lgamma.out");
TORCH_TPU_UNARY(ReciprocalOf, b.Divide(FullLike(context, 1.0, x), x))
TORCH_TPU_LOWERING(FloatUnary<ReciprocalOf>, "aten::reciprocal", "aten::reciprocal_",
                   "aten::reciprocal.out");
TORCH_TPU_UNARY(LogSigmoidOf, b.Negate(b.Add(b.Maximum(b.Negate(x), FullLike(context, 0.0, x)),
                                             b.Log1p(b.Exp(b.Negate(b.Abs(x)))))))
TORCH_TPU_UNARY(SiluOf, b.Multiply(x, b.Logistic(x)))
TORCH_TPU_LOWERING(FloatUnary<SiluOf>, "aten::silu", "aten::silu_", "aten::silu.out");
TORCH_TPU_UNARY(MishOf, b.Multiply(x, b.Tanh(b.Add(b.Maximum(x, FullLike(context, 0.0, x)),
                                                   b.Log1p(b.Exp(b.Negate(b.Abs(x))))))))
TORCH_TPU_LOWERING(FloatUnary<MishOf>, "aten::mish", "aten::mish_", "aten::mish.out");
TORCH_TPU_UNARY(HardsigmoidOf,
                b.Divide(b.Clamp(FullLike(context, 0.0, x), b.Add(x, FullLike(context, 3.0, x)),
                                 FullLike(context, 6.0, x)),
                         FullLike(context, 6.0, x)))
TORCH_TPU_LOWERING(FloatUnary<HardsigmoidOf>, "aten::hardsigmoid", "aten::hardsigmoid_",
                   "aten::hardsigmoid.out");
TORCH_TPU_UNARY(HardswishOf, b.Multiply(x, b.Divide(b.Clamp(FullLike(context, 0.0, x),
                                                            b.Add(x, FullLike(context, 3.0, x)),
                                                            FullLike(context, 6.0, x)),
                                                    FullLike(context, 6.0, x))))
TORCH_TPU_LOWERING(FloatUnary<HardswishOf>, "aten::hardswish", "aten::hardswish_",
                   "aten::hardswish.out");
TORCH_TPU_UNARY(SincOf, ([&] {
                  Value pix = b.Multiply(x, FullLike(context, M_PI, x));
                  Value zero = b.Compare(x, FullLike(context, 0.0, x), Direction::kEq);
                  return b.Select(zero, FullLike(context, 1.0, x), b.Divide(b.Sine(pix), pix));
                }()))
TORCH_TPU_LOWERING(FloatUnary<SincOf>, "aten::sinc", "aten::sinc_", "aten::sinc.out");

#undef TORCH_TPU_UNARY

// log_sigmoid_forward(self) -> (output, buffer): the buffer is an empty tensor on this device,
// as CUDA returns it.
std::vector<Value> LogSigmoidForward(LoweringContext& context, std::span<const Operand> operands) {
  Value result = FloatUnary<LogSigmoidOf>(context, operands)[0];
  return {result, context.Constant(0.0, operands[0].dtype, {0})};
}
TORCH_TPU_LOWERING(LogSigmoidForward, "aten::log_sigmoid_forward",
                   "aten::log_sigmoid_forward.output");

// The operator's base name ("aten::floor_" -> "floor_"), from which CPU names some kernels.
std::string BaseName(const LoweringContext& context) {
  const std::string& name = context.op_name();
  const size_t start = name.find("::") == std::string::npos ? 0 : name.find("::") + 2;
  return name.substr(start, name.find('.', start) - start);
}

// CPU has no bool kernel for floor/ceil/trunc ("floor_vml_cpu").
void CheckRoundingDtype(LoweringContext& context, c10::ScalarType dtype) {
  TORCH_CHECK_NOT_IMPLEMENTED(!c10::isComplexType(dtype), context.op_name(), ": ",
                              BaseName(context), " is not supported for complex inputs");
  const std::string kernel = BaseName(context) + "_vml_cpu";
  CheckKernelDtype(context, dtype != c10::kBool, kernel.c_str(), dtype);
}

// Ops that keep integer dtypes unchanged (rounding is the identity on integers).
template <Value (FunctionBuilder::*kRound)(Value)>
std::vector<Value> Rounding(LoweringContext& context, std::span<const Operand> operands) {
  CheckRoundingDtype(context, operands[0].dtype);
  if (!c10::isFloatingType(operands[0].dtype)) return {operands[0].value};
  return {(context.builder().*kRound)(operands[0].value)};
}
TORCH_TPU_LOWERING(Rounding<&FunctionBuilder::Floor>, "aten::floor", "aten::floor_",
                   "aten::floor.out");
TORCH_TPU_LOWERING(Rounding<&FunctionBuilder::Ceil>, "aten::ceil", "aten::ceil_", "aten::ceil.out");

std::vector<Value> Trunc(LoweringContext& context, std::span<const Operand> operands) {
  CheckRoundingDtype(context, operands[0].dtype);
  if (!c10::isFloatingType(operands[0].dtype)) return {operands[0].value};
  auto& b = context.builder();
  Value x = operands[0].value;
  return {b.Multiply(b.Sign(x), b.Floor(b.Abs(x)))};
}
TORCH_TPU_LOWERING(Trunc, "aten::trunc", "aten::trunc_", "aten::trunc.out");

std::vector<Value> Frac(LoweringContext& context, std::span<const Operand> operands) {
  CheckKernelDtype(context, c10::isFloatingType(operands[0].dtype), "frac_cpu", operands[0].dtype);
  auto& b = context.builder();
  Value x = operands[0].value;
  return {b.Subtract(x, b.Multiply(b.Sign(x), b.Floor(b.Abs(x))))};
}
TORCH_TPU_LOWERING(Frac, "aten::frac", "aten::frac_", "aten::frac.out");

// round(self) and round.decimals(self, *, int decimals)
std::vector<Value> Round(LoweringContext& context, std::span<const Operand> operands) {
  const bool decimals = operands.size() >= 2;
  CheckKernelDtype(context, !decimals || c10::isFloatingType(operands[0].dtype), "round_cpu",
                   operands[0].dtype);
  CheckKernelDtype(context, !c10::isComplexType(operands[0].dtype), "round_vml_cpu",
                   operands[0].dtype);
  if (!c10::isFloatingType(operands[0].dtype)) return {operands[0].value};
  auto& b = context.builder();
  Value x = operands[0].value;
  if (operands.size() < 2 || context.Int(operands[1]) == 0) return {b.RoundNearestEven(x)};
  // As CPU: in the op-math type (f32 for half types), scaled by 10^|decimals| and unscaled.
  const int64_t places = context.Int(operands[1]);
  Value v = context.Convert(x, ComputeDtype(operands[0].dtype));
  // A true division, as CPU's: behind the barrier XLA cannot turn it into a multiplication by
  // the factor's reciprocal (1 ulp off, e.g. 123.456789 to 3 places).
  Value factor =
      b.OptimizationBarrier(FullLike(context.builder(), std::pow(10.0, std::abs(places)), v));
  Value rounded = places > 0 ? b.Divide(b.RoundNearestEven(b.Multiply(v, factor)), factor)
                             : b.Multiply(b.RoundNearestEven(b.Divide(v, factor)), factor);
  return {context.Convert(rounded, operands[0].dtype)};
}
TORCH_TPU_LOWERING(Round, "aten::round", "aten::round_", "aten::round.out");
TORCH_TPU_LOWERING(Round, "aten::round.decimals", "aten::round_.decimals",
                   "aten::round.decimals_out");

std::vector<Value> Sign(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[0].dtype;
  auto& b = context.builder();
  Value x = operands[0].value;
  if (dtype == c10::kBool) return {x};
  if (c10::isComplexType(dtype)) {
    TORCH_CHECK_NOT_IMPLEMENTED(context.op_name().rfind("aten::sgn", 0) == 0, context.op_name(),
                ": Unlike NumPy, torch.sign is not intended to support complex numbers. Please "
                "use torch.sgn instead.");
    // z / |z|, and 0 for 0.
    Value modulus = b.Abs(x);
    Value zero = FullLike(context, 0.0, modulus);
    Value is_zero = b.Compare(modulus, zero, Direction::kEq);
    Value safe = b.Select(is_zero, FullLike(context, 1.0, modulus), modulus);
    Value unit = b.Divide(x, b.Complex(safe, zero));
    return {b.Select(is_zero, FullLike(context, 0.0, x), unit)};
  }
  if (!c10::isSignedType(dtype)) {
    return {context.Convert(b.Compare(x, FullLike(context, 0.0, x), Direction::kNe), dtype)};
  }
  if (!c10::isFloatingType(dtype)) return {b.Sign(x)};
  // CPU's (0 < x) - (x < 0): NaN gives 0 and -0.0 gives +0.0, where StableHLO's sign would
  // return NaN and -0.0.
  Value zero = FullLike(context, 0.0, x);
  return {b.Subtract(context.Convert(b.Compare(x, zero, Direction::kGt), dtype),
                     context.Convert(b.Compare(x, zero, Direction::kLt), dtype))};
}
TORCH_TPU_LOWERING(Sign, "aten::sign", "aten::sign_", "aten::sign.out");
TORCH_TPU_LOWERING(Sign, "aten::sgn", "aten::sgn_", "aten::sgn.out");

template <bool kNan, bool kInfinite>
std::vector<Value> FloatClass(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value x = operands[0].value;
  if (!c10::isFloatingType(operands[0].dtype)) {
    return {b.Constant(ElementType::kPred, kNan || kInfinite ? 0.0 : 1.0, x.dims())};
  }
  if (kNan) return {b.Compare(x, x, Direction::kNe)};
  if (kInfinite) {
    Value infinity = FullLike(context, INFINITY, x);
    return {b.Compare(b.Abs(x), infinity, Direction::kEq)};
  }
  return {b.IsFinite(x)};
}
TORCH_TPU_LOWERING((FloatClass<true, false>), "aten::isnan");
TORCH_TPU_LOWERING((FloatClass<false, true>), "aten::isinf");
TORCH_TPU_LOWERING((FloatClass<false, false>), "aten::isfinite");

template <bool kPositive>
std::vector<Value> InfinityTest(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value x = operands[0].value;
  if (!c10::isFloatingType(operands[0].dtype)) return {b.Constant(ElementType::kPred, 0, x.dims())};
  return {b.Compare(x, FullLike(context, kPositive ? INFINITY : -INFINITY, x), Direction::kEq)};
}
TORCH_TPU_LOWERING(InfinityTest<true>, "aten::isposinf", "aten::isposinf.out");
TORCH_TPU_LOWERING(InfinityTest<false>, "aten::isneginf", "aten::isneginf.out");

std::vector<Value> LogicalNot(LoweringContext& context, std::span<const Operand> operands) {
  return {context.builder().Not(context.Convert(operands[0].value, c10::kBool))};
}
TORCH_TPU_LOWERING(LogicalNot, "aten::logical_not", "aten::logical_not_", "aten::logical_not.out");

template <Value (FunctionBuilder::*kOp)(Value, Value)>
std::vector<Value> Logical(LoweringContext& context, std::span<const Operand> operands) {
  std::vector<std::vector<int64_t>> shapes = {operands[0].value.dims(), operands[1].value.dims()};
  auto shape = context.BroadcastShape(shapes);
  Value a = context.BroadcastTo(context.Convert(operands[0].value, c10::kBool), shape);
  Value c = context.BroadcastTo(context.Convert(operands[1].value, c10::kBool), shape);
  return {(context.builder().*kOp)(a, c)};
}
TORCH_TPU_LOWERING(Logical<&FunctionBuilder::And>, "aten::logical_and", "aten::logical_and_",
                   "aten::logical_and.out");
TORCH_TPU_LOWERING(Logical<&FunctionBuilder::Or>, "aten::logical_or", "aten::logical_or_",
                   "aten::logical_or.out");
TORCH_TPU_LOWERING(Logical<&FunctionBuilder::Xor>, "aten::logical_xor", "aten::logical_xor_",
                   "aten::logical_xor.out");

std::vector<Value> BitwiseNot(LoweringContext& context, std::span<const Operand> operands) {
  CheckKernelDtype(context, !c10::isFloatingType(operands[0].dtype), "bitwise_not_cpu",
                   operands[0].dtype);
  return {context.builder().Not(operands[0].value)};
}
TORCH_TPU_LOWERING(BitwiseNot, "aten::bitwise_not", "aten::bitwise_not_", "aten::bitwise_not.out");

template <Value (FunctionBuilder::*kOp)(Value, Value)>
std::vector<Value> Bitwise(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = context.PromotedType(operands.subspan(0, 2));
  const std::string kernel = BaseName(context) + "_cpu";
  CheckKernelDtype(context, !c10::isFloatingType(dtype), kernel.c_str(), dtype);
  auto values = context.PromoteAndBroadcast(operands.subspan(0, 2), dtype);
  return {(context.builder().*kOp)(values[0], values[1])};
}
TORCH_TPU_LOWERING(Bitwise<&FunctionBuilder::And>, "aten::bitwise_and.Tensor",
                   "aten::bitwise_and_.Tensor", "aten::bitwise_and.Tensor_out");
TORCH_TPU_LOWERING(Bitwise<&FunctionBuilder::Or>, "aten::bitwise_or.Tensor",
                   "aten::bitwise_or_.Tensor", "aten::bitwise_or.Tensor_out");
TORCH_TPU_LOWERING(Bitwise<&FunctionBuilder::Xor>, "aten::bitwise_xor.Tensor",
                   "aten::bitwise_xor_.Tensor", "aten::bitwise_xor.Tensor_out");
TORCH_TPU_LOWERING(Bitwise<&FunctionBuilder::And>, "aten::bitwise_and.Scalar",
                   "aten::bitwise_and_.Scalar", "aten::bitwise_and.Scalar_out");
TORCH_TPU_LOWERING(Bitwise<&FunctionBuilder::Or>, "aten::bitwise_or.Scalar",
                   "aten::bitwise_or_.Scalar", "aten::bitwise_or.Scalar_out");
TORCH_TPU_LOWERING(Bitwise<&FunctionBuilder::Xor>, "aten::bitwise_xor.Scalar",
                   "aten::bitwise_xor_.Scalar", "aten::bitwise_xor.Scalar_out");

// bitwise_left_shift / bitwise_right_shift with CPU's rule for amounts outside [0, bits): a left
// shift gives 0, a right shift what shifting by every bit but the sign bit gives (the sign for
// signed types, 0 for unsigned ones). StableHLO leaves such amounts to the implementation.
template <bool kLeft>
std::vector<Value> Shift(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = context.PromotedType(operands.subspan(0, 2));
  CheckKernelDtype(context, c10::isIntegralType(dtype, /*includeBool=*/false),
                   kLeft ? "lshift_cpu" : "rshift_cpu", dtype);
  auto values = context.PromoteAndBroadcast(operands.subspan(0, 2), dtype);
  Value x = values[0], amount = values[1];
  const bool is_signed = c10::isSignedType(dtype);
  const int64_t bits = static_cast<int64_t>(c10::elementSize(dtype)) * 8;
  const int64_t max_shift = kLeft || !is_signed ? bits : bits - 1;
  Value in_range = b.And(b.Compare(amount, FullLike(context, 0.0, amount), Direction::kGe),
                         b.Compare(amount, FullLike(context, max_shift, amount), Direction::kLt));
  if (kLeft) return {b.Select(in_range, b.ShiftLeft(x, amount), FullLike(context, 0.0, x))};
  if (!is_signed) {
    return {b.Select(in_range, b.ShiftRightLogical(x, amount), FullLike(context, 0.0, x))};
  }
  return {b.Select(in_range, b.ShiftRightArithmetic(x, amount),
                   b.ShiftRightArithmetic(x, FullLike(context, max_shift, x)))};
}
TORCH_TPU_LOWERING(Shift<true>, "aten::bitwise_left_shift.Tensor",
                   "aten::bitwise_left_shift_.Tensor", "aten::bitwise_left_shift.Tensor_out");
TORCH_TPU_LOWERING(Shift<true>, "aten::bitwise_left_shift.Tensor_Scalar",
                   "aten::bitwise_left_shift_.Tensor_Scalar",
                   "aten::bitwise_left_shift.Tensor_Scalar_out");
TORCH_TPU_LOWERING(Shift<true>, "aten::bitwise_left_shift.Scalar_Tensor",
                   "aten::bitwise_left_shift.Scalar_Tensor_out");
TORCH_TPU_LOWERING(Shift<false>, "aten::bitwise_right_shift.Tensor",
                   "aten::bitwise_right_shift_.Tensor", "aten::bitwise_right_shift.Tensor_out");
TORCH_TPU_LOWERING(Shift<false>, "aten::bitwise_right_shift.Tensor_Scalar",
                   "aten::bitwise_right_shift_.Tensor_Scalar",
                   "aten::bitwise_right_shift.Tensor_Scalar_out");
TORCH_TPU_LOWERING(Shift<false>, "aten::bitwise_right_shift.Scalar_Tensor",
                   "aten::bitwise_right_shift.Scalar_Tensor_out");
// Python's `<<` / `>>` operators: the same kernels on CPU (lshift/rshift), so the same rule.
TORCH_TPU_LOWERING(Shift<true>, "aten::__lshift__.Tensor", "aten::__ilshift__.Tensor",
                   "aten::__lshift__.Tensor_out");
TORCH_TPU_LOWERING(Shift<true>, "aten::__lshift__.Scalar", "aten::__ilshift__.Scalar",
                   "aten::__lshift__.Scalar_out");
TORCH_TPU_LOWERING(Shift<false>, "aten::__rshift__.Tensor", "aten::__irshift__.Tensor",
                   "aten::__rshift__.Tensor_out");
TORCH_TPU_LOWERING(Shift<false>, "aten::__rshift__.Scalar", "aten::__irshift__.Scalar",
                   "aten::__rshift__.Scalar_out");

// gcd of |a| and |b| by Euclid's algorithm, unrolled: consecutive Fibonacci numbers are its worst
// case, and fewer than bits * 3 / 2 + 2 steps reach any value of the type. Steps past the end
// keep the result (a zero `a` divides by one instead of zero and changes nothing).
Value Gcd(LoweringContext& context, Value a, Value b_value) {
  auto& b = context.builder();
  const c10::ScalarType dtype = LoweringContext::DtypeOf(a);
  if (c10::isSignedType(dtype)) {
    a = b.Abs(a);
    b_value = b.Abs(b_value);
  }
  const int64_t bits = static_cast<int64_t>(c10::elementSize(dtype)) * 8;
  Value zero = FullLike(context, 0.0, a), one = FullLike(context, 1.0, a);
  for (int64_t step = 0; step < bits * 3 / 2 + 2; ++step) {
    Value done = b.Compare(a, zero, Direction::kEq);
    Value remainder = b.Remainder(b_value, b.Select(done, one, a));
    b_value = b.Select(done, b_value, a);
    a = b.Select(done, zero, remainder);
  }
  return b_value;
}

// gcd(self, other) and lcm(self, other) of integers: lcm is |a / gcd * b|, 0 when gcd is. CPU
// computes it in C++'s int for narrower types, so an overflowing product wraps after the |.|.
template <bool kLcm>
std::vector<Value> GcdOrLcm(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = context.PromotedType(operands);
  CheckKernelDtype(context, c10::isIntegralType(dtype, /*includeBool=*/false),
                   kLcm ? "lcm_cpu" : "gcd_cpu", dtype);
  auto values = context.PromoteAndBroadcast(operands, dtype);
  Value gcd = Gcd(context, values[0], values[1]);
  if (!kLcm) return {gcd};
  const c10::ScalarType wide = c10::elementSize(dtype) < 4 ? c10::kInt : dtype;
  Value a = context.Convert(values[0], wide), other = context.Convert(values[1], wide);
  Value divisor = context.Convert(gcd, wide);
  Value zero = FullLike(context, 0.0, divisor);
  Value is_zero = b.Compare(divisor, zero, Direction::kEq);
  Value lcm =
      b.Multiply(b.Divide(a, b.Select(is_zero, FullLike(context, 1.0, divisor), divisor)), other);
  if (c10::isSignedType(wide)) lcm = b.Abs(lcm);
  return {context.Convert(b.Select(is_zero, zero, lcm), dtype)};
}
TORCH_TPU_LOWERING(GcdOrLcm<false>, "aten::gcd", "aten::gcd_", "aten::gcd.out");
TORCH_TPU_LOWERING(GcdOrLcm<true>, "aten::lcm", "aten::lcm_", "aten::lcm.out");

// maximum/minimum (Tensor, Tensor): NaN when either is NaN.
template <bool kMaximum>
std::vector<Value> Extremum(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = context.PromotedType(operands);
  auto values = context.PromoteAndBroadcast(operands, dtype);
  return {NanPropagatingExtremum(context.builder(), values[0], values[1], kMaximum)};
}
TORCH_TPU_LOWERING(Extremum<true>, "aten::maximum", "aten::maximum.out");
TORCH_TPU_LOWERING(Extremum<false>, "aten::minimum", "aten::minimum.out");

// clamp_min(self, Scalar min) / clamp_max(self, Scalar max) and .Tensor forms.
template <bool kMin>
std::vector<Value> ClampOneSide(LoweringContext& context, std::span<const Operand> operands) {
  return Extremum<kMin>(context, operands);
}
TORCH_TPU_LOWERING(ClampOneSide<true>, "aten::clamp_min", "aten::clamp_min_",
                   "aten::clamp_min.out");
TORCH_TPU_LOWERING(ClampOneSide<false>, "aten::clamp_max", "aten::clamp_max_",
                   "aten::clamp_max.out");
TORCH_TPU_LOWERING(ClampOneSide<true>, "aten::clamp_min.Tensor", "aten::clamp_min_.Tensor",
                   "aten::clamp_min.Tensor_out");
TORCH_TPU_LOWERING(ClampOneSide<false>, "aten::clamp_max.Tensor", "aten::clamp_max_.Tensor",
                   "aten::clamp_max.Tensor_out");

// Integer x ** e, wrapping on overflow as CPU does. XLA's integer power only looks at an
// exponent's low 6 bits (exponents up to 63), so larger ones are split into 6-bit digits:
// x^e = prod_k (x^(64^k))^digit_k, each factor a power below 64.
Value IntegerPower(LoweringContext& context, Value base, Value exponent) {
  auto& b = context.builder();
  const c10::ScalarType dtype = LoweringContext::DtypeOf(base);
  auto splat = [&](int64_t value) { return context.ConstantInt(value, dtype, exponent.dims()); };
  const int bits = static_cast<int>(c10::elementSize(dtype)) * 8;
  Value digits = b.Power(base, b.And(exponent, splat(63)));
  Value power = base;  // x^(64^k)
  for (int shift = 6; shift < bits; shift += 6) {
    for (int square = 0; square < 6; ++square) power = b.Multiply(power, power);
    Value digit = b.And(b.ShiftRightLogical(exponent, splat(shift)), splat(63));
    digits = b.Multiply(digits, b.Power(power, digit));
  }
  // Exponents below 64, negative ones included, are XLA's own.
  Value small = b.Compare(exponent, splat(64), Direction::kLt);
  return b.Select(small, b.Power(base, exponent), digits);
}

std::vector<Value> Pow(LoweringContext& context, std::span<const Operand> operands) {
  c10::ScalarType dtype = context.PromotedType(operands);
  // CPU rounds a Python base or exponent to a half dtype before computing in f32.
  CheckKernelDtype(context, dtype != c10::kBool, "pow", dtype);
  auto values = OpmathOperands(context, operands, dtype, HalfScalars::kRoundedToDtype);
  auto& b = context.builder();
  if (c10::isIntegralType(dtype, false) && operands[1].kind == Operand::Kind::kScalar &&
      c10::isIntegralType(operands[1].dtype, true)) {
    // A negative Python integer exponent of an integer tensor (x ** -1) is an error on CPU; the
    // exponent is a runtime value, so the check runs on the device.
    Value exponent = context.Convert(operands[1].value, c10::kLong);
    context.CheckNotViolated(
        b.Compare(exponent, context.ConstantInt(0, c10::kLong), Direction::kLt),
        "Integers to negative integer powers are not allowed.");
  }
  if (c10::isIntegralType(dtype, false)) return {IntegerPower(context, values[0], values[1])};
  return {context.Convert(b.Power(values[0], values[1]), dtype)};
}
TORCH_TPU_LOWERING(Pow, "aten::pow.Tensor_Tensor", "aten::pow_.Tensor",
                   "aten::pow.Tensor_Tensor_out");
TORCH_TPU_LOWERING(Pow, "aten::pow.Tensor_Scalar", "aten::pow_.Scalar",
                   "aten::pow.Tensor_Scalar_out");
TORCH_TPU_LOWERING(Pow, "aten::pow.Scalar", "aten::pow.Scalar_out");

// remainder: Python-style modulus (result has the divisor's sign); fmod: C-style.
template <bool kPython>
std::vector<Value> Remainder(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = context.PromotedType(operands);
  CheckKernelDtype(context, dtype != c10::kBool, kPython ? "remainder_cpu" : "fmod_cpu", dtype);
  auto values = OpmathOperands(context, operands, dtype, HalfScalars::kRoundedToDtype);
  CheckIntegerDivisor(context, values[1]);
  auto& b = context.builder();
  Value r = b.Remainder(values[0], values[1]);
  if (kPython) {
    Value zero = FullLike(context, 0.0, r);
    Value adjust = b.And(b.Compare(r, zero, Direction::kNe),
                         b.Compare(b.Compare(r, zero, Direction::kLt),
                                   b.Compare(values[1], zero, Direction::kLt), Direction::kNe));
    r = b.Select(adjust, b.Add(r, values[1]), r);
  }
  return {context.Convert(r, dtype)};
}
TORCH_TPU_LOWERING(Remainder<true>, "aten::remainder.Tensor", "aten::remainder_.Tensor",
                   "aten::remainder.Tensor_out");
TORCH_TPU_LOWERING(Remainder<true>, "aten::remainder.Scalar", "aten::remainder_.Scalar",
                   "aten::remainder.Scalar_out");
TORCH_TPU_LOWERING(Remainder<false>, "aten::fmod.Tensor", "aten::fmod_.Tensor",
                   "aten::fmod.Tensor_out");
TORCH_TPU_LOWERING(Remainder<false>, "aten::fmod.Scalar", "aten::fmod_.Scalar",
                   "aten::fmod.Scalar_out");

std::vector<Value> Atan2(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType result = FloatResult(context.PromotedType(operands));
  auto values = context.PromoteAndBroadcast(operands, ComputeDtype(result));
  return {context.Convert(context.builder().Atan2(values[0], values[1]), result)};
}
TORCH_TPU_LOWERING(Atan2, "aten::atan2", "aten::atan2_", "aten::atan2.out");

// rsub(self, other, alpha): other - alpha * self
std::vector<Value> Rsub(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = context.PromotedType(operands.subspan(0, 2));
  CheckSubtractionOperands(context, operands[0], operands[1]);
  CheckAlpha(context, operands, dtype);
  auto values =
      OpmathOperands(context, operands.subspan(0, 2), dtype, HalfScalars::kRoundedToDtype);
  auto& b = context.builder();
  Value alpha =
      OpmathScalar(context, operands[2], dtype, HalfScalars::kRoundedToDtype, values[0].dims());
  return {context.Convert(b.Subtract(values[1], b.Multiply(alpha, values[0])), dtype)};
}
TORCH_TPU_LOWERING(Rsub, "aten::rsub.Tensor");
TORCH_TPU_LOWERING(Rsub, "aten::rsub.Scalar");

// lerp.Scalar / lerp.Tensor (self, end, weight): CPU's two-sided formula, exact at both ends
// (weight 1 gives `end`): self + w * (end - self) for |w| < 0.5, else end - (end - self) * (1 - w).
std::vector<Value> Lerp(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[0].dtype;
  CheckKernelDtype(
      context, c10::isFloatingType(dtype),
      operands[2].kind == Operand::Kind::kTensor ? "lerp_kernel_tensor" : "lerp_kernel_scalar",
      dtype);
  // CPU takes no promotion here: `end`, and a weight tensor with dimensions, have self's dtype.
  auto name = [](c10::ScalarType type) { return c10::scalarTypeToTypeMeta(type).name(); };
  TORCH_CHECK(operands[1].dtype == dtype, context.op_name(), ": expected dtype ", name(dtype),
              " for `end` but got dtype ", name(operands[1].dtype));
  TORCH_CHECK(operands[2].kind != Operand::Kind::kTensor || operands[2].value.rank() == 0 ||
                  operands[2].dtype == dtype,
              context.op_name(), ": expected dtype ", name(dtype), " for `weight` but got dtype ",
              name(operands[2].dtype));
  auto values = OpmathOperands(context, operands, dtype, HalfScalars::kFloat);
  auto& b = context.builder();
  Value self = values[0], end = values[1], weight = values[2];
  Value difference = b.Subtract(end, self);
  Value from_self = b.Add(self, b.Multiply(weight, difference));
  Value from_end =
      b.Subtract(end, b.Multiply(difference, b.Subtract(FullLike(context, 1.0, weight), weight)));
  Value near_self = b.Compare(b.Abs(weight), FullLike(context, 0.5, weight), Direction::kLt);
  return {context.Convert(b.Select(near_self, from_self, from_end), dtype)};
}
TORCH_TPU_LOWERING(Lerp, "aten::lerp.Scalar", "aten::lerp_.Scalar", "aten::lerp.Scalar_out");
TORCH_TPU_LOWERING(Lerp, "aten::lerp.Tensor", "aten::lerp_.Tensor", "aten::lerp.Tensor_out");

// addcmul / addcdiv (self, tensor1, tensor2, *, Scalar value)
template <bool kDivide>
std::vector<Value> AddcOp(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = context.PromotedType(operands.subspan(0, 3));
  if (kDivide) {
    TORCH_CHECK(!c10::isIntegralType(operands[1].dtype, true) ||
                    !c10::isIntegralType(operands[2].dtype, true),
                context.op_name(),
                ": Integer division with addcdiv is no longer supported, and in a future  release "
                "addcdiv will perform a true division of tensor1 and tensor2. The historic addcdiv "
                "behavior can be implemented as (input + value * torch.trunc(tensor1 / "
                "tensor2)).to(input.dtype) for integer inputs and as (input + value * tensor1 / "
                "tensor2) for float inputs. The future addcdiv behavior is just the latter "
                "implementation: (input + value * tensor1 / tensor2), for all dtypes.");
  } else {
    CheckKernelDtype(context, dtype != c10::kBool, "addcmul_cpu_out", dtype);
  }
  auto values = context.PromoteAndBroadcast(operands, ComputeDtype(dtype));
  auto& b = context.builder();
  // CPU's evaluation order, value * tensor1 first: float products do not associate.
  Value scaled = b.Multiply(values[3], values[1]);
  Value combined = kDivide ? b.Divide(scaled, values[2]) : b.Multiply(scaled, values[2]);
  return {context.Convert(b.Add(values[0], combined), dtype)};
}
TORCH_TPU_LOWERING(AddcOp<false>, "aten::addcmul", "aten::addcmul_", "aten::addcmul.out");
TORCH_TPU_LOWERING(AddcOp<true>, "aten::addcdiv", "aten::addcdiv_", "aten::addcdiv.out");

// nan_to_num(self, float? nan, float? posinf, float? neginf)
std::vector<Value> NanToNum(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[0].dtype;
  Value x = operands[0].value;
  if (!c10::isFloatingType(dtype)) return {x};
  auto& b = context.builder();
  const double largest = dtype == c10::kDouble     ? std::numeric_limits<double>::max()
                         : dtype == c10::kHalf     ? 65504.0
                         : dtype == c10::kBFloat16 ? 3.3895313892515355e38
                                                   : std::numeric_limits<float>::max();
  auto value_or = [&](const Operand& operand, double fallback) {
    return operand.is_none() ? fallback : context.Double(operand);
  };
  Value nan = FullLike(context, value_or(operands[1], 0.0), x);
  Value positive = FullLike(context, value_or(operands[2], largest), x);
  Value negative = FullLike(context, value_or(operands[3], -largest), x);
  Value result = b.Select(b.Compare(x, x, Direction::kNe), nan, x);
  result = b.Select(b.Compare(x, FullLike(context, INFINITY, x), Direction::kEq), positive, result);
  return {b.Select(b.Compare(x, FullLike(context, -INFINITY, x), Direction::kEq), negative, result)};
}
TORCH_TPU_LOWERING(NanToNum, "aten::nan_to_num", "aten::nan_to_num_", "aten::nan_to_num.out");

// ---- activations ----------------------------------------------------------------------------

std::vector<Value> Relu(LoweringContext& context, std::span<const Operand> operands) {
  TORCH_CHECK(operands[0].dtype != c10::kBool, context.op_name(),
              ": \"clamp_min_scalar_cpu\" not implemented for 'Bool'");
  Value x = operands[0].value;
  return {NanPropagatingExtremum(context.builder(), x, FullLike(context, 0.0, x), true)};
}
TORCH_TPU_LOWERING(Relu, "aten::relu", "aten::relu_");

// threshold(self, Scalar threshold, Scalar value): x > threshold ? x : value
std::vector<Value> Threshold(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[0].dtype;
  Value x = context.Convert(operands[0].value, ComputeDtype(dtype));
  auto& b = context.builder();
  Value threshold = OpmathScalar(context, operands[1], dtype, HalfScalars::kFloat, x.dims());
  Value value = OpmathScalar(context, operands[2], dtype, HalfScalars::kFloat, x.dims());
  return {context.Convert(b.Select(b.Compare(x, threshold, Direction::kGt), x, value), dtype)};
}
TORCH_TPU_LOWERING(Threshold, "aten::threshold", "aten::threshold_", "aten::threshold.out");

// threshold_backward(grad_output, self, Scalar threshold): self > threshold ? grad : 0
std::vector<Value> ThresholdBackward(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = context.PromotedType(operands.subspan(0, 2));
  auto values = context.PromoteAndBroadcast(operands.subspan(0, 2), dtype);
  auto& b = context.builder();
  Value threshold =
      context.BroadcastTo(context.Convert(operands[2].value, dtype), values[1].dims());
  return {b.Select(b.Compare(values[1], threshold, Direction::kGt), values[0],
                   FullLike(context, 0.0, values[0]))};
}
TORCH_TPU_LOWERING(ThresholdBackward, "aten::threshold_backward",
                   "aten::threshold_backward.grad_input");

Value GeluValue(LoweringContext& context, Value x, bool tanh_approximation) {
  auto& b = context.builder();
  Value half = FullLike(context, 0.5, x);
  Value one = FullLike(context, 1.0, x);
  if (tanh_approximation) {
    Value inner = b.Multiply(
        FullLike(context, std::sqrt(2.0 / M_PI), x),
        b.Add(x, b.Multiply(FullLike(context, 0.044715, x), b.Multiply(x, b.Multiply(x, x)))));
    return b.Multiply(half, b.Multiply(x, b.Add(one, b.Tanh(inner))));
  }
  return b.Multiply(half,
                    b.Multiply(x, b.Add(one, b.Erf(b.Multiply(x, FullLike(context, M_SQRT1_2, x))))));
}

bool TanhApproximation(LoweringContext& context, std::span<const Operand> operands, size_t index) {
  if (operands.size() <= index || operands[index].is_none()) return false;
  const std::string& mode = operands[index].ivalue.toStringRef();
  TORCH_CHECK(mode == "none" || mode == "tanh", context.op_name(),
              ": approximate argument must be either none or tanh.");
  return mode == "tanh";
}

// gelu(self, *, str approximate='none')
std::vector<Value> Gelu(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[0].dtype;
  CheckKernelDtype(context, c10::isFloatingType(dtype), "GeluKernelImpl", dtype);
  Value x = context.Convert(operands[0].value, ComputeDtype(dtype));
  return {context.Convert(GeluValue(context, x, TanhApproximation(context, operands, 1)), dtype)};
}
TORCH_TPU_LOWERING(Gelu, "aten::gelu", "aten::gelu_", "aten::gelu.out");

// gelu_backward(grad_output, self, *, str approximate='none')
std::vector<Value> GeluBackward(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[1].dtype;
  auto& b = context.builder();
  Value grad = context.Convert(operands[0].value, ComputeDtype(dtype));
  Value x = context.Convert(operands[1].value, ComputeDtype(dtype));
  Value half = FullLike(context, 0.5, x), one = FullLike(context, 1.0, x);
  Value derivative;
  if (TanhApproximation(context, operands, 2)) {
    const double k = std::sqrt(2.0 / M_PI);
    Value x2 = b.Multiply(x, x);
    Value inner = b.Multiply(FullLike(context, k, x),
                             b.Add(x, b.Multiply(FullLike(context, 0.044715, x), b.Multiply(x2, x))));
    Value t = b.Tanh(inner);
    Value inner_derivative = b.Multiply(
        FullLike(context, k, x), b.Add(one, b.Multiply(FullLike(context, 3 * 0.044715, x), x2)));
    derivative = b.Add(b.Multiply(half, b.Add(one, t)),
                       b.Multiply(b.Multiply(half, x),
                                  b.Multiply(b.Subtract(one, b.Multiply(t, t)), inner_derivative)));
  } else {
    Value cdf = b.Multiply(half, b.Add(one, b.Erf(b.Multiply(x, FullLike(context, M_SQRT1_2, x)))));
    Value pdf = b.Multiply(FullLike(context, 0.5 * M_2_SQRTPI * M_SQRT1_2, x),
                           b.Exp(b.Multiply(FullLike(context, -0.5, x), b.Multiply(x, x))));
    derivative = b.Add(cdf, b.Multiply(x, pdf));
  }
  return {context.Convert(b.Multiply(grad, derivative), dtype)};
}
TORCH_TPU_LOWERING(GeluBackward, "aten::gelu_backward", "aten::gelu_backward.grad_input");

// silu_backward(grad_output, self)
std::vector<Value> SiluBackward(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[1].dtype;
  auto& b = context.builder();
  Value grad = context.Convert(operands[0].value, ComputeDtype(dtype));
  Value x = context.Convert(operands[1].value, ComputeDtype(dtype));
  Value s = b.Logistic(x);
  Value one = FullLike(context, 1.0, x);
  Value derivative = b.Multiply(s, b.Add(one, b.Multiply(x, b.Subtract(one, s))));
  return {context.Convert(b.Multiply(grad, derivative), dtype)};
}
TORCH_TPU_LOWERING(SiluBackward, "aten::silu_backward", "aten::silu_backward.grad_input");

// sigmoid_backward(grad_output, output), tanh_backward(grad_output, output)
template <bool kTanh>
std::vector<Value> OutputBackward(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[1].dtype;
  auto& b = context.builder();
  Value grad = context.Convert(operands[0].value, ComputeDtype(dtype));
  Value y = context.Convert(operands[1].value, ComputeDtype(dtype));
  Value one = FullLike(context, 1.0, y);
  Value derivative = kTanh ? b.Subtract(one, b.Multiply(y, y)) : b.Multiply(y, b.Subtract(one, y));
  return {context.Convert(b.Multiply(grad, derivative), dtype)};
}
TORCH_TPU_LOWERING(OutputBackward<false>, "aten::sigmoid_backward",
                   "aten::sigmoid_backward.grad_input");
TORCH_TPU_LOWERING(OutputBackward<true>, "aten::tanh_backward", "aten::tanh_backward.grad_input");

// leaky_relu(self, Scalar negative_slope=0.01)
std::vector<Value> LeakyRelu(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[0].dtype;
  CheckKernelDtype(context, c10::isFloatingType(dtype), "leaky_relu_cpu", dtype);
  Value x = context.Convert(operands[0].value, ComputeDtype(dtype));
  auto& b = context.builder();
  Value slope = OpmathScalar(context, operands[1], dtype, HalfScalars::kFloat, x.dims());
  return {context.Convert(
      b.Select(b.Compare(x, FullLike(context, 0.0, x), Direction::kGt), x, b.Multiply(x, slope)),
      dtype)};
}
TORCH_TPU_LOWERING(LeakyRelu, "aten::leaky_relu", "aten::leaky_relu_", "aten::leaky_relu.out");

// leaky_relu_backward(grad_output, self, Scalar negative_slope, bool self_is_result)
std::vector<Value> LeakyReluBackward(LoweringContext& context, std::span<const Operand> operands) {
  Value grad = operands[0].value;
  Value x = context.Convert(operands[1].value, operands[0].dtype);
  auto& b = context.builder();
  Value slope =
      context.BroadcastTo(context.Convert(operands[2].value, operands[0].dtype), x.dims());
  return {b.Select(b.Compare(x, FullLike(context, 0.0, x), Direction::kGt), grad,
                   b.Multiply(grad, slope))};
}
TORCH_TPU_LOWERING(LeakyReluBackward, "aten::leaky_relu_backward",
                   "aten::leaky_relu_backward.grad_input");

// hardtanh(self, Scalar min_val=-1, Scalar max_val=1)
std::vector<Value> Hardtanh(LoweringContext& context, std::span<const Operand> operands) {
  TORCH_CHECK(operands[0].dtype != c10::kBool, context.op_name(),
              ": Bool inputs not supported for hardtanh");
  Value x = operands[0].value;
  auto& b = context.builder();
  Value low = context.BroadcastTo(context.Convert(operands[1].value, operands[0].dtype), x.dims());
  Value high = context.BroadcastTo(context.Convert(operands[2].value, operands[0].dtype), x.dims());
  return {NanPropagatingExtremum(b, NanPropagatingExtremum(b, x, low, true), high, false)};
}
TORCH_TPU_LOWERING(Hardtanh, "aten::hardtanh", "aten::hardtanh_", "aten::hardtanh.out");

// hardtanh_backward(grad_output, self, Scalar min_val, Scalar max_val)
std::vector<Value> HardtanhBackward(LoweringContext& context, std::span<const Operand> operands) {
  Value grad = operands[0].value;
  Value x = context.Convert(operands[1].value, operands[0].dtype);
  auto& b = context.builder();
  Value low = context.BroadcastTo(context.Convert(operands[2].value, operands[0].dtype), x.dims());
  Value high = context.BroadcastTo(context.Convert(operands[3].value, operands[0].dtype), x.dims());
  Value inside = b.And(b.Compare(x, low, Direction::kGt), b.Compare(x, high, Direction::kLt));
  return {b.Select(inside, grad, FullLike(context, 0.0, grad))};
}
TORCH_TPU_LOWERING(HardtanhBackward, "aten::hardtanh_backward",
                   "aten::hardtanh_backward.grad_input");

// softplus(self, Scalar beta=1, Scalar threshold=20)
std::vector<Value> Softplus(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[0].dtype;
  CheckKernelDtype(context, c10::isFloatingType(dtype), "softplus_cpu", dtype);
  const c10::ScalarType compute = ComputeDtype(dtype);
  Value x = context.Convert(operands[0].value, compute);
  auto& b = context.builder();
  Value beta = context.BroadcastTo(context.Convert(operands[1].value, compute), x.dims());
  Value threshold = context.BroadcastTo(context.Convert(operands[2].value, compute), x.dims());
  Value scaled = b.Multiply(x, beta);
  Value soft = b.Divide(b.Log1p(b.Exp(scaled)), beta);
  return {context.Convert(b.Select(b.Compare(scaled, threshold, Direction::kGt), x, soft), dtype)};
}
TORCH_TPU_LOWERING(Softplus, "aten::softplus", "aten::softplus.out");

// softplus_backward(grad_output, self, Scalar beta, Scalar threshold)
std::vector<Value> SoftplusBackward(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[0].dtype;
  const c10::ScalarType compute = ComputeDtype(dtype);
  Value grad = context.Convert(operands[0].value, compute);
  Value x = context.Convert(operands[1].value, compute);
  auto& b = context.builder();
  Value beta = context.BroadcastTo(context.Convert(operands[2].value, compute), x.dims());
  Value threshold = context.BroadcastTo(context.Convert(operands[3].value, compute), x.dims());
  Value scaled = b.Multiply(x, beta);
  Value derivative = b.Logistic(scaled);
  Value result =
      b.Select(b.Compare(scaled, threshold, Direction::kGt), grad, b.Multiply(grad, derivative));
  return {context.Convert(result, dtype)};
}
TORCH_TPU_LOWERING(SoftplusBackward, "aten::softplus_backward",
                   "aten::softplus_backward.grad_input");

// elu(self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1)
std::vector<Value> Elu(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[0].dtype;
  CheckKernelDtype(context, c10::isFloatingType(dtype), "elu_cpu", dtype);
  const c10::ScalarType compute = ComputeDtype(dtype);
  Value x = context.Convert(operands[0].value, compute);
  auto& b = context.builder();
  auto scalar = [&](size_t i) {
    return context.BroadcastTo(context.Convert(operands[i].value, compute), x.dims());
  };
  Value negative = b.Multiply(scalar(1), b.Expm1(b.Multiply(x, scalar(3))));
  Value result = b.Multiply(
      scalar(2), b.Select(b.Compare(x, FullLike(context, 0.0, x), Direction::kGt), x, negative));
  return {context.Convert(result, dtype)};
}
TORCH_TPU_LOWERING(Elu, "aten::elu", "aten::elu_", "aten::elu.out");

// Binary float functions of the promoted operands (computed in f32 for halves).
template <int kKind>
std::vector<Value> FloatBinary(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType promoted = context.PromotedType(operands.subspan(0, 2));
  if (kKind == 0 || kKind == 1) {
    CheckKernelDtype(context, c10::isFloatingType(promoted),
                     kKind == 0 ? "logaddexp_cpu" : "logaddexp2_cpu", promoted);
  }
  const c10::ScalarType result = FloatResult(promoted);
  auto values =
      OpmathOperands(context, operands.subspan(0, 2), result, HalfScalars::kRoundedToDtype);
  auto& b = context.builder();
  Value x = values[0], y = values[1];
  Value r;
  if (kKind == 0 || kKind == 1) {  // logaddexp, logaddexp2
    Value scale = FullLike(context, kKind == 0 ? 1.0 : M_LN2, x);
    Value xs = b.Multiply(x, scale), ys = b.Multiply(y, scale);
    Value m = b.Maximum(xs, ys);
    Value same_infinity = b.And(b.Compare(xs, ys, Direction::kEq),
                                b.Compare(b.Abs(xs), FullLike(context, INFINITY, x), Direction::kEq));
    Value sum = b.Add(m, b.Log1p(b.Exp(b.Negate(b.Abs(b.Subtract(xs, ys))))));
    r = b.Divide(b.Select(same_infinity, xs, sum), scale);
  } else if (kKind == 2) {  // xlogy: 0 where x == 0 (unless y is NaN)
    Value zero = FullLike(context, 0.0, x);
    Value product = b.Multiply(x, b.Log(y));
    Value x_zero = b.And(b.Compare(x, zero, Direction::kEq), b.Compare(y, y, Direction::kEq));
    r = b.Select(x_zero, zero, product);
  } else if (kKind == 4) {  // special_xlog1py: 0 where x == 0 (unless y is NaN)
    Value zero = FullLike(context, 0.0, x);
    Value x_zero = b.And(b.Compare(x, zero, Direction::kEq), b.Compare(y, y, Direction::kEq));
    // Half types round log1p(y) before the product, as CPU's kernel does.
    r = b.Select(x_zero, zero, b.Multiply(x, RoundThrough(context, b.Log1p(y), result)));
  } else if (kKind == 5) {  // hypot: scaled by the larger magnitude so that squares never overflow
    Value ax = b.Abs(x), ay = b.Abs(y);
    Value big = b.Maximum(ax, ay), small = b.Minimum(ax, ay);
    Value zero = FullLike(context, 0.0, x);
    Value ratio = b.Select(b.Compare(big, zero, Direction::kEq), zero, b.Divide(small, big));
    Value scaled = b.Multiply(big, b.Sqrt(b.Add(FullLike(context, 1.0, x), b.Multiply(ratio, ratio))));
    // An infinite operand wins over a NaN in the other one (C's hypot).
    Value infinite = b.Or(b.Compare(ax, FullLike(context, INFINITY, x), Direction::kEq),
                          b.Compare(ay, FullLike(context, INFINITY, x), Direction::kEq));
    Value unordered = b.Or(b.Compare(x, x, Direction::kNe), b.Compare(y, y, Direction::kNe));
    r = b.Select(infinite, FullLike(context, INFINITY, x),
                 b.Select(unordered, FullLike(context, NAN, x), scaled));
  } else if (kKind == 3) {  // copysign: the sign bit of y, so -0.0 and -NaN count as negative
    const ElementType bits =
        y.element_type() == ElementType::kF64 ? ElementType::kS64 : ElementType::kS32;
    Value negative =
        b.Compare(b.BitcastConvert(y, bits), b.ConstantInt(bits, 0, y.dims()), Direction::kLt);
    Value magnitude = b.Abs(x);
    r = b.Select(negative, b.Negate(magnitude), magnitude);
  }
  return {context.Convert(r, result)};
}
TORCH_TPU_LOWERING(FloatBinary<0>, "aten::logaddexp", "aten::logaddexp.out");
TORCH_TPU_LOWERING(FloatBinary<1>, "aten::logaddexp2", "aten::logaddexp2.out");
TORCH_TPU_LOWERING(FloatBinary<2>, "aten::xlogy.Tensor", "aten::xlogy_.Tensor",
                   "aten::xlogy.OutTensor");
TORCH_TPU_LOWERING(FloatBinary<3>, "aten::copysign.Tensor", "aten::copysign_.Tensor",
                   "aten::copysign.out");
TORCH_TPU_LOWERING(FloatBinary<4>, "aten::special_xlog1py", "aten::special_xlog1py.out");
TORCH_TPU_LOWERING(FloatBinary<5>, "aten::hypot", "aten::hypot_", "aten::hypot.out");

// Integer type of the same width as a float type, for bit manipulation.
ElementType SameWidthInteger(ElementType type) {
  switch (type) {
    case ElementType::kF64:
      return ElementType::kS64;
    case ElementType::kF32:
      return ElementType::kS32;
    default:
      return ElementType::kS16;
  }
}

// signbit(self): the sign bit, so -0.0 and -NaN are negative; integers compare with 0.
std::vector<Value> Signbit(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value x = operands[0].value;
  if (!c10::isFloatingType(operands[0].dtype)) {
    return {b.Compare(x, context.Constant(0.0, operands[0].dtype, x.dims()), Direction::kLt)};
  }
  const ElementType bits = SameWidthInteger(x.element_type());
  return {b.Compare(b.BitcastConvert(x, bits), b.ConstantInt(bits, 0, x.dims()), Direction::kLt)};
}
TORCH_TPU_LOWERING(Signbit, "aten::signbit", "aten::signbit.out");

// nextafter(self, other): the next representable value of self's dtype toward other, found by
// stepping the bit pattern (floats are sign-magnitude, so the step direction depends on the sign).
std::vector<Value> Nextafter(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = context.PromotedType(operands.subspan(0, 2));
  CheckKernelDtype(context, c10::isFloatingType(dtype), "nextafter_cpu", dtype);
  auto values = context.PromoteAndBroadcast(operands.subspan(0, 2), dtype);
  auto& b = context.builder();
  Value x = values[0], y = values[1];
  const ElementType bits = SameWidthInteger(x.element_type());
  Value zero = FullLike(context, 0.0, x);
  Value x_bits = b.BitcastConvert(x, bits);
  Value one = b.ConstantInt(bits, 1, x.dims());
  // Away from zero when moving toward y means a larger magnitude.
  Value grows = b.Compare(b.Compare(x, y, Direction::kLt), b.Compare(x, zero, Direction::kGt),
                          Direction::kEq);
  Value stepped = b.BitcastConvert(b.Select(grows, b.Add(x_bits, one), b.Subtract(x_bits, one)),
                                   x.element_type());
  // From zero the next value is the smallest subnormal with y's sign.
  Value tiny = b.BitcastConvert(one, x.element_type());
  Value from_zero = b.Select(b.Compare(y, zero, Direction::kLt), b.Negate(tiny), tiny);
  Value result = b.Select(b.Compare(x, zero, Direction::kEq), from_zero, stepped);
  Value unordered = b.Or(b.Compare(x, x, Direction::kNe), b.Compare(y, y, Direction::kNe));
  result = b.Select(b.Compare(x, y, Direction::kEq), y, result);
  return {b.Select(unordered, b.Add(x, y), result)};
}
TORCH_TPU_LOWERING(Nextafter, "aten::nextafter", "aten::nextafter_", "aten::nextafter.out");

// frexp(self) -> (mantissa, exponent): x = mantissa * 2^exponent with 0.5 <= |mantissa| < 1,
// read from the bit pattern with integer ops only (float arithmetic may flush subnormals to zero
// on the device); zero, infinity and NaN keep x with exponent 0 (C's frexp).
std::vector<Value> Frexp(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[0].dtype;
  TORCH_CHECK(c10::isFloatingType(dtype), context.op_name(),
              ": torch.frexp() only supports floating-point dtypes");
  auto& b = context.builder();
  Value x = operands[0].value;
  const bool wide = dtype == c10::kDouble;
  const ElementType bits = wide ? ElementType::kS64 : ElementType::kS32;
  const ElementType float_type = wide ? ElementType::kF64 : ElementType::kF32;
  Value raw;
  if (dtype == c10::kBFloat16) {
    // bf16 is the top half of an f32: widen the bits, not the value.
    raw = b.ShiftLeft(b.Convert(b.BitcastConvert(x, ElementType::kU16), bits),
                      b.ConstantInt(bits, 16, x.dims()));
  } else {
    raw = b.BitcastConvert(context.Convert(x, wide ? c10::kDouble : c10::kFloat), bits);
  }
  const int64_t fraction_bits = wide ? 52 : 23;
  const int64_t field_mask = wide ? 0x7ff : 0xff;
  const int64_t bias = wide ? 1022 : 126;  // exponent of a mantissa in [0.5, 1)
  auto constant = [&](int64_t v) { return b.ConstantInt(bits, v, x.dims()); };
  Value sign = b.And(raw, constant(std::numeric_limits<int64_t>::min() >> (wide ? 0 : 32)));
  Value magnitude = b.Xor(raw, sign);
  Value field = b.ShiftRightLogical(magnitude, constant(fraction_bits));
  Value fraction = b.And(magnitude, constant((int64_t{1} << fraction_bits) - 1));
  // Normal numbers: replace the exponent field.
  Value normal_exponent = b.Subtract(field, constant(bias));
  Value normal_fraction = fraction;
  // Subnormals: fraction * 2^(1 - bias - fraction_bits - 1); normalize by the fraction's length.
  const int64_t width = wide ? 64 : 32;
  Value length = b.Subtract(constant(width), b.CountLeadingZeros(fraction));
  Value subnormal_exponent = b.Subtract(length, constant(bias + fraction_bits));
  Value shifted = b.ShiftLeft(fraction, b.Subtract(constant(fraction_bits + 1), length));
  Value subnormal_fraction = b.And(shifted, constant((int64_t{1} << fraction_bits) - 1));
  Value is_subnormal = b.Compare(field, constant(0), Direction::kEq);
  Value exponent = b.Select(is_subnormal, subnormal_exponent, normal_exponent);
  Value mantissa_bits = b.Or(b.Or(sign, constant(bias << fraction_bits)),
                             b.Select(is_subnormal, subnormal_fraction, normal_fraction));
  Value mantissa = b.BitcastConvert(mantissa_bits, float_type);
  // Zero, infinity and NaN come back unchanged with exponent 0.
  Value special = b.Or(b.Compare(magnitude, constant(0), Direction::kEq),
                       b.Compare(field, constant(field_mask), Direction::kEq));
  Value original = b.BitcastConvert(raw, float_type);
  mantissa = b.Select(special, original, mantissa);
  exponent = b.Select(special, constant(0), exponent);
  Value result =
      dtype == c10::kBFloat16
          ? b.BitcastConvert(
                b.Convert(b.ShiftRightLogical(b.BitcastConvert(mantissa, bits), constant(16)),
                          ElementType::kU16),
                ElementType::kBF16)
          : context.Convert(mantissa, dtype);
  return {result, context.Convert(exponent, c10::kInt)};
}
TORCH_TPU_LOWERING(Frexp, "aten::frexp.Tensor", "aten::frexp.Tensor_out");

// fmax / fmin: like maximum/minimum, but a NaN loses to a number.
template <bool kMaximum>
std::vector<Value> FmaxFmin(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = context.PromotedType(operands);
  auto values = context.PromoteAndBroadcast(operands, dtype);
  return {NanAwareExtremum(context.builder(), values[0], values[1], kMaximum, NanRule::kIgnore)};
}
TORCH_TPU_LOWERING(FmaxFmin<true>, "aten::fmax", "aten::fmax.out");
TORCH_TPU_LOWERING(FmaxFmin<false>, "aten::fmin", "aten::fmin.out");

// floor_divide(self, other): rounds the quotient toward negative infinity.
std::vector<Value> FloorDivideOp(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = context.PromotedType(operands);
  CheckKernelDtype(context, dtype != c10::kBool, "div_floor_cpu", dtype);
  auto values = context.PromoteAndBroadcast(operands, ComputeDtype(dtype));
  return {context.Convert(FloorDivide(context, values[0], values[1]), dtype)};
}
TORCH_TPU_LOWERING(FloorDivideOp, "aten::floor_divide", "aten::floor_divide_.Tensor",
                   "aten::floor_divide.out");

// heaviside(self, values): 0 for x < 0, values for x == 0, 1 for x > 0.
std::vector<Value> Heaviside(LoweringContext& context, std::span<const Operand> operands) {
  TORCH_CHECK(operands[0].dtype == operands[1].dtype, context.op_name(),
              ": heaviside is not yet implemented for tensors with different dtypes.");
  const c10::ScalarType dtype = context.PromotedType(operands);
  auto values = context.PromoteAndBroadcast(operands, dtype);
  auto& b = context.builder();
  Value x = values[0];
  Value zero = FullLike(context, 0.0, x), one = FullLike(context, 1.0, x);
  return {b.Select(b.Compare(x, zero, Direction::kEq), values[1],
                   b.Select(b.Compare(x, zero, Direction::kGt), one, zero))};
}
TORCH_TPU_LOWERING(Heaviside, "aten::heaviside", "aten::heaviside_", "aten::heaviside.out");

// glu(self, int dim=-1): first half * sigmoid(second half)
std::vector<Value> Glu(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = operands[0].dtype;
  Value x = context.Convert(operands[0].value, ComputeDtype(dtype));
  const int64_t dim = context.WrapDim(context.Int(operands[1]), x.rank());
  const int64_t size = x.dims()[dim];
  TORCH_CHECK(size % 2 == 0, context.op_name(), ": Halving dimension must be even, but dimension ",
              dim, " is size ", size);
  std::vector<int64_t> start(x.rank(), 0), limit = x.dims(), steps(x.rank(), 1);
  limit[dim] = size / 2;
  Value first = b.Slice(x, start, limit, steps);
  start[dim] = size / 2;
  limit[dim] = size;
  Value second = b.Slice(x, start, limit, steps);
  return {context.Convert(b.Multiply(first, b.Logistic(second)), dtype)};
}
TORCH_TPU_LOWERING(Glu, "aten::glu", "aten::glu.out");

// softshrink / hardshrink(self, Scalar lambd=0.5)
template <bool kSoft>
std::vector<Value> Shrink(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = operands[0].dtype;
  Value x = context.Convert(operands[0].value, ComputeDtype(dtype));
  Value lambda = OpmathScalar(context, operands[1], dtype, HalfScalars::kFloat, x.dims());
  Value above = b.Compare(x, lambda, Direction::kGt);
  Value below = b.Compare(x, b.Negate(lambda), Direction::kLt);
  Value zero = FullLike(context, 0.0, x);
  if (!kSoft) return {context.Convert(b.Select(b.Or(above, below), x, zero), dtype)};
  return {context.Convert(
      b.Select(above, b.Subtract(x, lambda), b.Select(below, b.Add(x, lambda), zero)), dtype)};
}
TORCH_TPU_LOWERING(Shrink<true>, "aten::softshrink", "aten::softshrink.out");
TORCH_TPU_LOWERING(Shrink<false>, "aten::hardshrink", "aten::hardshrink.out");

// _prelu_kernel(self, weight): x > 0 ? x : weight * x (weight broadcast over channels)
std::vector<Value> Prelu(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value x = operands[0].value;
  Value weight =
      context.BroadcastTo(context.Convert(operands[1].value, operands[0].dtype), x.dims());
  return {b.Select(b.Compare(x, FullLike(context, 0.0, x), Direction::kGt), x, b.Multiply(weight, x))};
}
TORCH_TPU_LOWERING(Prelu, "aten::_prelu_kernel");

// angle(self): atan2(imag, real) for complex inputs; for real ones pi for negative numbers, NaN
// for NaN, else 0.
std::vector<Value> Angle(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  if (c10::isComplexType(operands[0].dtype)) {
    return {b.Atan2(b.Imag(operands[0].value), b.Real(operands[0].value))};
  }
  const c10::ScalarType result = FloatResult(operands[0].dtype);
  Value x = context.Convert(operands[0].value, ComputeDtype(result));
  Value zero = FullLike(context, 0.0, x);
  Value angle = b.Select(b.Compare(x, zero, Direction::kLt), FullLike(context, M_PI, x), zero);
  return {context.Convert(b.Select(b.Compare(x, x, Direction::kNe), x, angle), result)};
}
TORCH_TPU_LOWERING(Angle, "aten::angle", "aten::angle.out");

// The input of logit clamped to [eps, 1 - eps] (both in the result dtype) when eps is given.
Value LogitInput(LoweringContext& context, Value x, const Operand& eps, c10::ScalarType dtype) {
  if (eps.is_none()) return x;
  const double e = context.Double(eps);
  return context.builder().Clamp(RoundThrough(context, FullLike(context, e, x), dtype), x,
                                 RoundThrough(context, FullLike(context, 1.0 - e, x), dtype));
}

// logit(self, float? eps=None): log(x / (1 - x)); half types round every step, as CPU's kernel.
std::vector<Value> Logit(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType result = FloatResult(operands[0].dtype);
  auto& b = context.builder();
  Value x = context.Convert(operands[0].value, ComputeDtype(result));
  x = LogitInput(context, x, operands[1], result);
  auto r = [&](Value value) { return RoundThrough(context, value, result); };
  return {context.Convert(b.Log(r(b.Divide(x, r(b.Subtract(FullLike(context, 1.0, x), x))))), result)};
}
TORCH_TPU_LOWERING(Logit, "aten::logit", "aten::logit_", "aten::logit.out");

// logit_backward(grad_output, self, float? eps=None): grad / (x (1 - x)), 0 outside [eps, 1 - eps]
// when eps is given, NaN outside [0, 1] otherwise.
std::vector<Value> LogitBackward(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[1].dtype;
  auto& b = context.builder();
  Value grad = context.Convert(operands[0].value, ComputeDtype(dtype));
  Value x = context.Convert(operands[1].value, ComputeDtype(dtype));
  Value zero = FullLike(context, 0.0, x), one = FullLike(context, 1.0, x);
  Value result = b.Divide(grad, b.Multiply(x, b.Subtract(one, x)));
  if (operands[2].is_none()) {
    Value outside = b.Or(b.Compare(x, zero, Direction::kLt), b.Compare(x, one, Direction::kGt));
    result = b.Select(outside, FullLike(context, NAN, x), result);
  } else {
    const double e = context.Double(operands[2]);
    Value outside = b.Or(b.Compare(x, FullLike(context, e, x), Direction::kLt),
                         b.Compare(x, FullLike(context, 1.0 - e, x), Direction::kGt));
    result = b.Select(outside, zero, result);
  }
  return {context.Convert(result, dtype)};
}
TORCH_TPU_LOWERING(LogitBackward, "aten::logit_backward", "aten::logit_backward.grad_input");

// special_entr(self): -x log x, 0 at 0, -inf for negative x.
std::vector<Value> Entr(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType result = FloatResult(operands[0].dtype);
  auto& b = context.builder();
  Value x = context.Convert(operands[0].value, ComputeDtype(result));
  Value zero = FullLike(context, 0.0, x);
  // Half types round the logarithm before the product, as CPU's kernel does.
  Value value = b.Negate(b.Multiply(x, RoundThrough(context, b.Log(x), result)));
  value = b.Select(b.Compare(x, zero, Direction::kEq), zero, value);
  value = b.Select(b.Compare(x, zero, Direction::kLt), FullLike(context, -INFINITY, x), value);
  return {context.Convert(value, result)};
}
TORCH_TPU_LOWERING(Entr, "aten::special_entr", "aten::special_entr.out");

// elu_backward(grad_output, alpha, scale, input_scale, bool is_result, self_or_result)
std::vector<Value> EluBackward(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[0].dtype;
  const c10::ScalarType compute = ComputeDtype(dtype);
  auto& b = context.builder();
  Value grad = context.Convert(operands[0].value, compute);
  Value x = context.Convert(operands[5].value, compute);
  auto scalar = [&](size_t i) {
    return context.BroadcastTo(context.Convert(operands[i].value, compute), x.dims());
  };
  Value alpha = scalar(1), scale = scalar(2), input_scale = scalar(3);
  Value zero = FullLike(context, 0.0, x);
  // With is_result, x is the output and the negative side's derivative is written through it.
  Value negative =
      context.Bool(operands[4])
          ? b.Multiply(b.Multiply(grad, input_scale), b.Add(x, b.Multiply(alpha, scale)))
          : b.Multiply(b.Multiply(grad, b.Multiply(input_scale, b.Multiply(alpha, scale))),
                       b.Exp(b.Multiply(x, input_scale)));
  return {context.Convert(
      b.Select(b.Compare(x, zero, Direction::kLe), negative, b.Multiply(grad, scale)), dtype)};
}
TORCH_TPU_LOWERING(EluBackward, "aten::elu_backward", "aten::elu_backward.grad_input");

// log_sigmoid_backward(grad_output, self, buffer): grad * sigmoid(-x); the buffer is unused.
std::vector<Value> LogSigmoidBackward(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[1].dtype;
  auto& b = context.builder();
  Value grad = context.Convert(operands[0].value, ComputeDtype(dtype));
  Value x = context.Convert(operands[1].value, ComputeDtype(dtype));
  return {context.Convert(b.Multiply(grad, b.Logistic(b.Negate(x))), dtype)};
}
TORCH_TPU_LOWERING(LogSigmoidBackward, "aten::log_sigmoid_backward",
                   "aten::log_sigmoid_backward.grad_input");

// isin.Tensor_Tensor(elements, test_elements, *, bool assume_unique=False, bool invert=False)
std::vector<Value> IsIn(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = context.PromotedType(operands.subspan(0, 2));
  Value elements = context.Convert(operands[0].value, dtype);
  Value tests = context.Convert(operands[1].value, dtype);
  const int64_t n = elements.type().NumElements(), m = tests.type().NumElements();
  if (m == 0) {
    return {b.Constant(ElementType::kPred, context.Bool(operands[3]) ? 1.0 : 0.0, elements.dims())};
  }
  Value rows = context.BroadcastTo(b.Reshape(elements, {n, 1}), {n, m});
  Value columns = context.BroadcastTo(b.Reshape(tests, {1, m}), {n, m});
  Value equal = b.Compare(rows, columns, Direction::kEq);
  Value any = b.Reduce({equal}, {b.Constant(ElementType::kPred, 0.0)}, {1},
                       [](FunctionBuilder& body, std::span<const Value> args) {
                         return std::vector<Value>{body.Or(args[0], args[1])};
                       })[0];
  if (context.Bool(operands[3])) any = b.Not(any);
  return {b.Reshape(any, elements.dims())};
}
TORCH_TPU_LOWERING(IsIn, "aten::isin.Tensor_Tensor", "aten::isin.Tensor_Tensor_out");

}  // namespace

}  // namespace torch_tpu::lowering

// Operands for arithmetic the way PyTorch's CPU kernels feed it: half-precision dtypes compute in
// f32 ("opmath") and round once at the end, and each op decides whether a Python number joins
// that computation rounded to the tensor dtype first (add, sub, pow, remainder) or in f32 (mul,
// div, activations' parameters). Getting this wrong is a silent one-ulp drift on every element.
#pragma once

#include <span>
#include <vector>

#include "lowering/context.h"

namespace torch_tpu::lowering {

enum class HalfScalars {
  kRoundedToDtype,  // x_bf16 + 0.1 adds bf16(0.1)
  kFloat,           // x_bf16 * 1.004 multiplies by f32(1.004)
};

// Whether PyTorch's CPU kernels treat `operands[index]` as a scalar: a Python number or runtime
// scalar, or a 0-d tensor after the first operand (TensorIterator's "cpu scalar", whose original
// value, not its cast to the common dtype, reaches the kernel).
bool IsCpuScalar(std::span<const Operand> operands, size_t index);

// The value operands of `operands` converted to ComputeDtype(dtype) and broadcast to their common
// shape. Tensors go through `dtype` first (CPU casts them to the common dtype); scalars go
// through it only when `scalars` is kRoundedToDtype.
std::vector<stablehlo::Value> OpmathOperands(LoweringContext& context,
                                             std::span<const Operand> operands,
                                             c10::ScalarType dtype, HalfScalars scalars);

// One value operand (a scalar parameter such as alpha or a slope) converted the same way and
// broadcast to `dims`.
stablehlo::Value OpmathScalar(LoweringContext& context, const Operand& operand,
                              c10::ScalarType dtype, HalfScalars scalars,
                              const std::vector<int64_t>& dims);

// `value` (in ComputeDtype(dtype)) rounded to `dtype` and back: the intermediate rounding of CPU
// kernels that compute half types step by step in the half type itself (logit, entr, renorm,
// mse_loss, ...). The identity for float and double.
stablehlo::Value RoundThrough(LoweringContext& context, stablehlo::Value value,
                              c10::ScalarType dtype);

// CPU's NotImplementedError for a dtype its kernel is not compiled for; `kernel` is the name that
// CPU's message quotes ("frac_cpu"), so the error reads the same on both devices.
void CheckKernelDtype(LoweringContext& context, bool supported, const char* kernel,
                      c10::ScalarType dtype);

// a // b with CPU's semantics for same-typed a and b. Floats use CPU's fmod-based formula, which
// differs from floor(a / b) where the quotient rounds up to an integer (1 // 0.1 is 9, not 10);
// integers round toward negative infinity and declare their zero divisors (CheckIntegerDivisor).
stablehlo::Value FloorDivide(LoweringContext& context, stablehlo::Value a, stablehlo::Value b);

// Integer division and remainder by zero trap on CPU (RuntimeError "ZeroDivisionError"); declares
// the condition as a device check when `divisor` is an integer tensor. Floats divide by zero.
void CheckIntegerDivisor(LoweringContext& context, stablehlo::Value divisor);

}  // namespace torch_tpu::lowering

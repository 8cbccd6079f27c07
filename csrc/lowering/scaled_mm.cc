// torch._scaled_mm: float8 matrix product with float32 scales, as torchao's float8 training
// calls it. PyTorch's CPU kernel defines the results: tensor-wise scales (one element each) or
// row-wise ones (scale_a [M, 1], scale_b [1, N]), an optional bias of N elements, the product
// accumulated in float32, scale_result dividing float8 results only, then one rounding to
// out_dtype (default: self's dtype).
#include <c10/util/Exception.h>

#include <sstream>

#include "lowering/context.h"

namespace torch_tpu::lowering {
namespace {

std::string Dims(const Value& value) {
  std::ostringstream text;
  text << '[';
  for (size_t i = 0; i < value.dims().size(); ++i) text << (i ? ", " : "") << value.dims()[i];
  text << ']';
  return text.str();
}

// Whether the scales are one of the layouts CPU accepts; otherwise CPU's ValueError.
void CheckScaling(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& a = operands[0];
  const Operand& b = operands[1];
  const Operand& scale_a = operands[2];
  const Operand& scale_b = operands[3];
  const bool float8 = c10::isFloat8Type(a.dtype) && c10::isFloat8Type(b.dtype);
  const bool float_scales = scale_a.dtype == c10::kFloat && scale_b.dtype == c10::kFloat;
  const auto elements = [](const Value& value) {
    int64_t count = 1;
    for (int64_t size : value.dims()) count *= size;
    return count;
  };
  const int64_t m = a.value.dims()[0];
  const int64_t n = b.value.dims()[1];
  const bool tensor_wise = elements(scale_a.value) == 1 && elements(scale_b.value) == 1;
  const bool row_wise = scale_a.value.dims() == std::vector<int64_t>{m, 1} &&
                        scale_b.value.dims() == std::vector<int64_t>{1, n};
  TORCH_CHECK_VALUE(float8 && float_scales && (tensor_wise || row_wise),
                    "Invalid scaling configuration.\n", context.op_name(),
                    " on tpu takes float8 a and b with float32 scales, either tensor-wise (one "
                    "element each) or row-wise (scale_a of size (", m, ", 1), scale_b of size (1, ",
                    n, ")). Got a: ", a.dtype, ", b: ", b.dtype, ", scale_a: ", scale_a.dtype,
                    Dims(scale_a.value), ", scale_b: ", scale_b.dtype, Dims(scale_b.value));
}

// A [M, 1] or one-element scale as a [rows, columns] factor of the product.
Value ScaleFactor(LoweringContext& context, const Value& scale, const std::vector<int64_t>& dims,
                  bool rows) {
  auto& b = context.builder();
  int64_t count = 1;
  for (int64_t size : scale.dims()) count *= size;
  if (count == 1) return b.BroadcastInDim(b.Reshape(scale, {}), dims, {});
  const int64_t length = rows ? dims[0] : dims[1];
  return b.BroadcastInDim(b.Reshape(scale, {length}), dims, {rows ? 0 : 1});
}

// _scaled_mm(self, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum)
std::vector<Value> ScaledMm(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const Operand& a = operands[0];
  const Operand& mat2 = operands[1];
  TORCH_CHECK(a.value.rank() == 2, context.op_name(), ": mat1 must be a matrix");
  TORCH_CHECK(mat2.value.rank() == 2, context.op_name(), ": mat2 must be a matrix");
  const int64_t m = a.value.dims()[0];
  const int64_t k = a.value.dims()[1];
  const int64_t n = mat2.value.dims()[1];
  TORCH_CHECK(k == mat2.value.dims()[0], context.op_name(),
              ": mat_a and mat_b shapes cannot be multiplied (", m, "x", k, " and ",
              mat2.value.dims()[0], "x", n, ")");
  CheckScaling(context, operands);
  const std::vector<int64_t> dims = {m, n};
  // Every float8 value is exact in bfloat16, so a bfloat16 product accumulated in float32 is
  // exact per term on every backend and runs on TPUs' matrix units without extra passes (the
  // float32 accumulation is what use_fast_accum would trade away; it is always kept here).
  FunctionBuilder::DotDimensions contraction;
  contraction.lhs_contracting = {1};
  contraction.rhs_contracting = {0};
  Value product = b.DotGeneral(context.Convert(a.value, c10::kBFloat16),
                               context.Convert(mat2.value, c10::kBFloat16), contraction,
                               ElementType::kF32);
  product = b.Multiply(product, ScaleFactor(context, operands[2].value, dims, /*rows=*/true));
  product = b.Multiply(product, ScaleFactor(context, operands[3].value, dims, /*rows=*/false));
  if (!operands[4].is_none()) {
    const Value& bias = operands[4].value;
    int64_t count = 1;
    for (int64_t size : bias.dims()) count *= size;
    TORCH_CHECK(bias.rank() == 1 && count == n, context.op_name(), ": Bias must be size ", n,
                " but got ", count);
    product = b.Add(product, b.BroadcastInDim(context.Convert(bias, c10::kFloat), dims, {1}));
  }
  const c10::ScalarType out_dtype = context.OptionalDtype(operands[6]).value_or(a.dtype);
  if (!operands[5].is_none() && c10::isFloat8Type(out_dtype)) {
    const Value scale = b.Reshape(context.Convert(operands[5].value, c10::kFloat), {});
    product = b.Divide(product, b.BroadcastInDim(scale, dims, {}));
  }
  return {context.Convert(product, out_dtype)};
}
TORCH_TPU_LOWERING(ScaledMm, "aten::_scaled_mm", "aten::_scaled_mm.out");

}  // namespace
}  // namespace torch_tpu::lowering

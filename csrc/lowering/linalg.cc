// Matrix products: mm, bmm, addmm (what nn.Linear and matmul decompose into).
#include <c10/util/Exception.h>

#include "lowering/context.h"

namespace torch_tpu::lowering {
namespace {

using stablehlo::FunctionBuilder;
using stablehlo::Value;

void CheckSameDtype(LoweringContext& context, const Operand& a, const Operand& b) {
  TORCH_CHECK(a.dtype == b.dtype, context.op_name(),
              ": expected m1 and m2 to have the same dtype, but got: ", a.dtype, " != ", b.dtype);
  TORCH_CHECK(a.dtype != c10::kBool, context.op_name(), ": \"addmm\" not implemented for 'Bool'");
}

Value MatrixProduct(LoweringContext& context, const Operand& a, const Operand& b) {
  CheckSameDtype(context, a, b);
  TORCH_CHECK(a.value.rank() == 2 && b.value.rank() == 2, context.op_name(),
              ": expected 2-D matrices, got ", a.value.rank(), "-D and ", b.value.rank(), "-D");
  TORCH_CHECK(a.value.dims()[1] == b.value.dims()[0], context.op_name(),
              ": mat1 and mat2 shapes cannot be multiplied (", a.value.dims()[0], "x",
              a.value.dims()[1], " and ", b.value.dims()[0], "x", b.value.dims()[1], ")");
  FunctionBuilder::DotDimensions dimensions;
  dimensions.lhs_contracting = {1};
  dimensions.rhs_contracting = {0};
  return context.builder().DotGeneral(a.value, b.value, dimensions, std::nullopt,
                                      FunctionBuilder::Precision::kHighest);
}

// mm(self, mat2)
std::vector<Value> Mm(LoweringContext& context, std::span<const Operand> operands) {
  return {MatrixProduct(context, operands[0], operands[1])};
}

// bmm(self, mat2)
std::vector<Value> Bmm(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& a = operands[0];
  const Operand& b = operands[1];
  CheckSameDtype(context, a, b);
  TORCH_CHECK(a.value.rank() == 3 && b.value.rank() == 3, context.op_name(),
              ": batch1 and batch2 must be 3D tensors");
  TORCH_CHECK(a.value.dims()[0] == b.value.dims()[0] && a.value.dims()[2] == b.value.dims()[1],
              context.op_name(), ": Expected size for first two dimensions of batch2 tensor to be: [",
              a.value.dims()[0], ", ", a.value.dims()[2], "] but got: [", b.value.dims()[0], ", ",
              b.value.dims()[1], "].");
  FunctionBuilder::DotDimensions dimensions;
  dimensions.lhs_batch = {0};
  dimensions.rhs_batch = {0};
  dimensions.lhs_contracting = {2};
  dimensions.rhs_contracting = {1};
  return {context.builder().DotGeneral(a.value, b.value, dimensions, std::nullopt,
                                       FunctionBuilder::Precision::kHighest)};
}

// addmm(self, mat1, mat2, *, Scalar beta=1, Scalar alpha=1): beta * self + alpha * (mat1 @ mat2)
std::vector<Value> Addmm(LoweringContext& context, std::span<const Operand> operands) {
  auto& builder = context.builder();
  Value product = MatrixProduct(context, operands[1], operands[2]);
  const c10::ScalarType dtype = operands[1].dtype;
  const auto& dims = product.dims();
  Value alpha = context.BroadcastTo(context.Convert(operands[4].value, dtype), dims);
  Value beta = context.BroadcastTo(context.Convert(operands[3].value, dtype), dims);
  Value self = context.BroadcastTo(context.Convert(operands[0].value, dtype), dims);
  return {builder.Add(builder.Multiply(beta, self), builder.Multiply(alpha, product))};
}

}  // namespace

TORCH_TPU_REGISTER_LOWERINGS(linalg) {
  registry.Register("aten::mm", Mm, "", "aten::mm.out");
  registry.Register("aten::bmm", Bmm, "", "aten::bmm.out");
  registry.Register("aten::addmm", Addmm, "aten::addmm_", "aten::addmm.out");
}

}  // namespace torch_tpu::lowering

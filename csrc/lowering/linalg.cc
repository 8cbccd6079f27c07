// Matrix products: mm, bmm, addmm (what nn.Linear and matmul decompose into), and the vector
// cross product.
#include <c10/core/ScalarTypeToTypeMeta.h>
#include <c10/util/Exception.h>

#include "lowering/complex.h"
#include "lowering/context.h"
#include "lowering/matmul_precision.h"

namespace torch_tpu::lowering {
namespace {

void CheckSameDtype(LoweringContext& context, const Operand& a, const Operand& b) {
  TORCH_CHECK(a.dtype == b.dtype, context.op_name(),
              ": expected m1 and m2 to have the same dtype, but got: ",
              c10::scalarTypeToTypeMeta(a.dtype).name(),
              " != ", c10::scalarTypeToTypeMeta(b.dtype).name());
  TORCH_CHECK(a.dtype != c10::kBool, context.op_name(), ": \"addmm\" not implemented for 'Bool'");
}

// Products in ComputeDtype: half types accumulate in f32, as CPU's gemm does, and the caller
// rounds once (after the addmm-style epilogue, if any).
Value ComputeProduct(LoweringContext& context, const Operand& a, const Operand& b,
                     const FunctionBuilder::DotDimensions& dimensions) {
  const stablehlo::ElementType compute =
      ToElementTypeOrThrow(ComputeDtype(a.dtype), context.op_name().c_str());
  return context.builder().DotGeneral(a.value, b.value, dimensions, compute,
                                      MatmulPrecisionFor(a.dtype));
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
  return ComputeProduct(context, a, b, dimensions);
}

// beta * self + alpha * product, the epilogue of addmm/addmv/baddbmm/addbmm (operands: self at 0,
// beta at 3, alpha at 4).
// Half types: `product` is in f32 (see MatrixProduct) and the epilogue runs in f32 with alpha
// and beta in f32, rounding once, as CPU's gemm does.
Value ScaledSum(LoweringContext& context, std::span<const Operand> operands, Value product,
                c10::ScalarType dtype) {
  auto& builder = context.builder();
  const c10::ScalarType compute = ComputeDtype(dtype);
  const auto& dims = product.dims();
  Value alpha = context.BroadcastTo(context.Convert(operands[4].value, compute), dims);
  Value beta = context.BroadcastTo(context.Convert(operands[3].value, compute), dims);
  Value self = context.BroadcastTo(
      context.Convert(context.Convert(operands[0].value, dtype), compute), dims);
  // With beta == 0 PyTorch ignores self entirely, so NaN/inf in it must not leak through.
  Value zero = context.Constant(0.0, compute, dims);
  Value scaled_self =
      builder.Select(builder.Compare(beta, zero, FunctionBuilder::ComparisonDirection::kEq), zero,
                     builder.Multiply(beta, self));
  return context.Convert(builder.Add(scaled_self, builder.Multiply(alpha, product)), dtype);
}

// mm(self, mat2)
std::vector<Value> Mm(LoweringContext& context, std::span<const Operand> operands) {
  return {context.Convert(MatrixProduct(context, operands[0], operands[1]), operands[0].dtype)};
}
TORCH_TPU_LOWERING(Mm, "aten::mm", "aten::mm.out");

Value BatchProduct(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& a = operands[0];
  const Operand& b = operands[1];
  CheckSameDtype(context, a, b);
  TORCH_CHECK(a.value.rank() == 3 && b.value.rank() == 3, context.op_name(),
              ": batch1 and batch2 must be 3D tensors");
  TORCH_CHECK(a.value.dims()[0] == b.value.dims()[0] && a.value.dims()[2] == b.value.dims()[1],
              context.op_name(),
              ": Expected size for first two dimensions of batch2 tensor to be: [",
              a.value.dims()[0], ", ", a.value.dims()[2], "] but got: [", b.value.dims()[0], ", ",
              b.value.dims()[1], "].");
  FunctionBuilder::DotDimensions dimensions;
  dimensions.lhs_batch = {0};
  dimensions.rhs_batch = {0};
  dimensions.lhs_contracting = {2};
  dimensions.rhs_contracting = {1};
  return ComputeProduct(context, a, b, dimensions);
}

// bmm(self, mat2)
std::vector<Value> Bmm(LoweringContext& context, std::span<const Operand> operands) {
  return {context.Convert(BatchProduct(context, operands), operands[0].dtype)};
}
TORCH_TPU_LOWERING(Bmm, "aten::bmm", "aten::bmm.out");

// addmm(self, mat1, mat2, *, Scalar beta=1, Scalar alpha=1): beta * self + alpha * (mat1 @ mat2)
std::vector<Value> Addmm(LoweringContext& context, std::span<const Operand> operands) {
  Value product = MatrixProduct(context, operands[1], operands[2]);
  const c10::ScalarType dtype = operands[1].dtype;
  return {ScaledSum(context, operands, product, dtype)};
}
TORCH_TPU_LOWERING(Addmm, "aten::addmm", "aten::addmm_", "aten::addmm.out");

// dot / vdot(self, tensor): 1-D inner product (vdot conjugates self).
std::vector<Value> Dot(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& a = operands[0];
  const Operand& b = operands[1];
  TORCH_CHECK(a.value.rank() == 1 && b.value.rank() == 1, context.op_name(),
              ": 1D tensors expected, but got ", a.value.rank(), "D and ", b.value.rank(),
              "D tensors");
  TORCH_CHECK(a.dtype == b.dtype, context.op_name(),
              ": dot : expected both vectors to have same dtype, but found ", a.dtype, " and ",
              b.dtype);
  TORCH_CHECK(a.value.dims()[0] == b.value.dims()[0], context.op_name(),
              ": inconsistent tensor size, expected tensor [", a.value.dims()[0], "] and src [",
              b.value.dims()[0], "] to have the same number of elements, but got ",
              a.value.dims()[0], " and ", b.value.dims()[0], " elements respectively");
  FunctionBuilder::DotDimensions dimensions;
  dimensions.lhs_contracting = {0};
  dimensions.rhs_contracting = {0};
  Operand lhs = a;
  if (context.op_name().rfind("aten::vdot", 0) == 0) {
    lhs.value = Conjugate(context.builder(), a.value);
  }
  return {context.Convert(ComputeProduct(context, lhs, b, dimensions), a.dtype)};
}
TORCH_TPU_LOWERING(Dot, "aten::dot", "aten::dot.out");
TORCH_TPU_LOWERING(Dot, "aten::vdot", "aten::vdot.out");

// addmv(self, mat, vec, *, Scalar beta=1, Scalar alpha=1)
std::vector<Value> Addmv(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& mat = operands[1];
  const Operand& vec = operands[2];
  CheckSameDtype(context, mat, vec);
  TORCH_CHECK(
      mat.value.rank() == 2 && vec.value.rank() == 1 && mat.value.dims()[1] == vec.value.dims()[0],
      context.op_name(), ": size mismatch, got input (", mat.value.dims()[0], "), mat (",
      c10::IntArrayRef(mat.value.dims()), "), vec (", c10::IntArrayRef(vec.value.dims()), ")");
  FunctionBuilder::DotDimensions dimensions;
  dimensions.lhs_contracting = {1};
  dimensions.rhs_contracting = {0};
  Value product = ComputeProduct(context, mat, vec, dimensions);
  const c10::ScalarType dtype = mat.dtype;
  return {ScaledSum(context, operands, product, dtype)};
}
TORCH_TPU_LOWERING(Addmv, "aten::addmv", "aten::addmv_", "aten::addmv.out");

// baddbmm(self, batch1, batch2, *, beta, alpha) and addbmm (the batch summed away).
template <bool kSumBatches>
std::vector<Value> AddBatchProducts(LoweringContext& context, std::span<const Operand> operands) {
  auto& builder = context.builder();
  Value product = BatchProduct(context, operands.subspan(1, 2));
  if (kSumBatches) {
    Value zero = builder.Constant(product.element_type(), 0.0);
    product = builder.Reduce({product}, {zero}, {0},
                             [](FunctionBuilder& body, std::span<const Value> args) {
                               return std::vector<Value>{body.Add(args[0], args[1])};
                             })[0];
  }
  const c10::ScalarType dtype = operands[1].dtype;
  return {ScaledSum(context, operands, product, dtype)};
}
TORCH_TPU_LOWERING(AddBatchProducts<false>, "aten::baddbmm", "aten::baddbmm_", "aten::baddbmm.out");
TORCH_TPU_LOWERING(AddBatchProducts<true>, "aten::addbmm", "aten::addbmm_", "aten::addbmm.out");

}  // namespace

// linalg_cross(self, other, *, int dim=-1): the 3-vector cross product along dim (broadcast).
std::vector<Value> LinalgCross(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const Value& a = operands[0].value;
  const Value& c = operands[1].value;
  TORCH_CHECK(a.rank() == c.rank(), context.op_name(),
              ": inputs must have the same number of dimensions, got ", a.type().ToString(),
              " and ", c.type().ToString());
  const c10::ScalarType dtype = context.PromotedType(operands.subspan(0, 2));
  auto values = context.PromoteAndBroadcast(operands.subspan(0, 2), dtype);
  const int64_t dim = context.WrapExistingDim(context.Int(operands[2]), values[0].rank());
  TORCH_CHECK(a.dims()[dim] == 3 && c.dims()[dim] == 3, context.op_name(), ": inputs dimension ",
              dim, " must have length 3. Got ", a.dims()[dim], " and ", c.dims()[dim]);
  auto component = [&](const Value& v, int64_t i) {
    std::vector<int64_t> start(v.rank(), 0), limit = v.dims(), steps(v.rank(), 1);
    start[dim] = i;
    limit[dim] = i + 1;
    return b.Slice(v, start, limit, steps);
  };
  std::vector<Value> parts;
  for (int64_t i = 0; i < 3; ++i) {
    const int64_t j = (i + 1) % 3, k = (i + 2) % 3;
    parts.push_back(b.Subtract(b.Multiply(component(values[0], j), component(values[1], k)),
                               b.Multiply(component(values[0], k), component(values[1], j))));
  }
  return {b.Concatenate(parts, dim)};
}
TORCH_TPU_LOWERING(LinalgCross, "aten::linalg_cross", "aten::linalg_cross.out");

}  // namespace torch_tpu::lowering

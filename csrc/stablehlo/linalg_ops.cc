// Linear algebra ops of FunctionBuilder: the factorizations and solves StableHLO has as single ops.
#include <string>

#include "builder.h"
#include "builder_internal.h"

namespace torch_tpu::stablehlo {

using internal::CheckElementType;
using internal::Fail;

namespace {

// Checks that `type` is a batch of square matrices and returns the matrix size.
int64_t SquareMatrixSize(std::string_view op, const TensorType& type, std::string_view what) {
  if (type.rank() < 2 || type.dims[type.rank() - 1] != type.dims[type.rank() - 2]) {
    Fail(op, std::string(what) + " must have square matrices in its last two dims, got " +
                 type.ToString());
  }
  return type.dims.back();
}

std::string_view TransposeName(FunctionBuilder::TransposeA transpose) {
  switch (transpose) {
    case FunctionBuilder::TransposeA::kTranspose:
      return "TRANSPOSE";
    case FunctionBuilder::TransposeA::kAdjoint:
      return "ADJOINT";
    default:
      return "NO_TRANSPOSE";
  }
}

}  // namespace

Value FunctionBuilder::Cholesky(Value a, bool lower) {
  constexpr std::string_view kOp = "stablehlo.cholesky";
  const TensorType& type = Check(a, kOp).type;
  CheckElementType(kOp, type, internal::kFloatOk);
  SquareMatrixSize(kOp, type, "a");
  return EmitOne(kOp, {a}, std::string("lower = ") + (lower ? "true" : "false"), type);
}

Value FunctionBuilder::TriangularSolve(Value a, Value b, bool left_side, bool lower,
                                       bool unit_diagonal, TransposeA transpose_a) {
  constexpr std::string_view kOp = "stablehlo.triangular_solve";
  const TensorType& at = Check(a, kOp).type;
  const TensorType& bt = Check(b, kOp).type;
  CheckElementType(kOp, at, internal::kFloatOk);
  const int64_t m = SquareMatrixSize(kOp, at, "a");
  if (at.element_type != bt.element_type || at.rank() != bt.rank()) {
    Fail(kOp,
         "a " + at.ToString() + " and b " + bt.ToString() + " need the same element type and rank");
  }
  for (int64_t d = 0; d + 2 < at.rank(); ++d) {
    if (at.dims[d] != bt.dims[d]) {
      Fail(kOp, "batch dims of a " + at.ToString() + " and b " + bt.ToString() + " differ");
    }
  }
  const int64_t solved = bt.dims[bt.rank() - (left_side ? 2 : 1)];
  if (solved != m) {
    Fail(kOp, std::string("b ") + bt.ToString() + " does not match a " + at.ToString() +
                  (left_side ? " on the left" : " on the right"));
  }
  auto flag = [](bool value) { return value ? std::string("true") : std::string("false"); };
  std::string attributes = "left_side = " + flag(left_side) + ", lower = " + flag(lower) +
                           ", unit_diagonal = " + flag(unit_diagonal) +
                           ", transpose_a = #stablehlo<transpose " +
                           std::string(TransposeName(transpose_a)) + ">";
  return EmitOne(kOp, {a, b}, attributes, bt);
}

}  // namespace torch_tpu::stablehlo

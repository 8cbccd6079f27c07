// Cholesky factorization and triangular solves, each one StableHLO op (cholesky,
// triangular_solve), plus the solves composed from them (cholesky_solve, cholesky_inverse).
#include <c10/util/Exception.h>

#include <string>

#include "lowering/context.h"
#include "lowering/linalg_common.h"

namespace torch_tpu::lowering {
namespace {

using TransposeA = FunctionBuilder::TransposeA;

using linalg::BroadcastBatch;
using linalg::CheckLinalgInput;
using linalg::CheckSquare;
using linalg::IsEmpty;

int64_t Rank(const Value& value) { return value.rank(); }

Value MatrixTranspose(FunctionBuilder& b, Value x) { return linalg::MatrixTranspose(b, x); }

Value Triangle(LoweringContext& context, Value x, bool lower) {
  return linalg::KeepTriangle(context.builder(), x, lower);
}

// Solves with a triangular `a`; empty operands skip the op (a zero-size solve has no work).
Value Solve(LoweringContext& context, Value a, Value rhs, bool left, bool lower, bool unit,
            TransposeA transpose) {
  if (IsEmpty(a) || IsEmpty(rhs)) return rhs;
  return context.builder().TriangularSolve(a, rhs, left, lower, unit, transpose);
}

// The lower Cholesky factor of each matrix (upper triangle zeroed) and an info like LAPACK's: 0
// for a positive definite matrix, else the 1-based index of the first pivot the factorization
// left non-positive or NaN. That is LAPACK's order when the backend stops at the failing column;
// a backend that poisons the whole factor reports an earlier one (XLA:CPU reports 1).
std::pair<Value, Value> CholeskyWithInfo(LoweringContext& context, Value a) {
  auto& b = context.builder();
  const int64_t n = a.dims().back();
  std::vector<int64_t> batch(a.dims().begin(), a.dims().end() - 2);
  if (IsEmpty(a)) return {a, b.ConstantInt(ElementType::kS32, 0, batch)};
  Value factor = Triangle(context, b.Cholesky(a, /*lower=*/true), /*lower=*/true);
  // The diagonal, as [..., n]: a failed factorization leaves a non-positive or NaN pivot.
  std::vector<int64_t> flat = batch;
  flat.push_back(n * n);
  std::vector<int64_t> strided_limit = flat;
  std::vector<int64_t> start(flat.size(), 0), steps(flat.size(), 1);
  steps.back() = n + 1;
  Value diagonal = b.Slice(b.Reshape(factor, flat), start, strided_limit, steps);
  Value bad = b.Not(
      b.Compare(diagonal, b.Constant(a.element_type(), 0.0, diagonal.dims()), Direction::kGt));
  // info = smallest 1-based index of a bad pivot, or 0: min over (bad ? i + 1 : n + 1), mod n + 1.
  const TensorType index_type{ElementType::kS32, diagonal.dims()};
  Value order = b.Add(b.Iota(index_type, Rank(diagonal) - 1),
                      b.ConstantInt(ElementType::kS32, 1, diagonal.dims()));
  Value none = b.ConstantInt(ElementType::kS32, n + 1, diagonal.dims());
  Value first =
      b.Reduce({b.Select(bad, order, none)}, {b.ConstantInt(ElementType::kS32, n + 1)},
               {Rank(diagonal) - 1}, [](FunctionBuilder& body, std::span<const Value> args) {
                 return std::vector<Value>{body.Minimum(args[0], args[1])};
               })[0];
  Value info = b.Remainder(first, b.ConstantInt(ElementType::kS32, n + 1, batch));
  return {factor, info};
}

void CheckPositiveDefinite(LoweringContext& context, Value info) {
  linalg::CheckInfoIsZero(context, info,
                          context.op_name() +
                              ": The factorization could not be completed because the input is "
                              "not positive-definite");
}

// linalg_cholesky_ex(self, *, bool upper=False, bool check_errors=False) -> (L, info)
std::vector<Value> LinalgCholeskyEx(LoweringContext& context, std::span<const Operand> operands) {
  CheckSquare(operands[0], "A", {"linalg.cholesky", "cholesky_cpu"});
  auto [factor, info] = CholeskyWithInfo(context, operands[0].value);
  if (context.Bool(operands[2])) CheckPositiveDefinite(context, info);
  if (context.Bool(operands[1])) factor = MatrixTranspose(context.builder(), factor);
  return {factor, info};
}
TORCH_TPU_LOWERING(LinalgCholeskyEx, "aten::linalg_cholesky_ex", "aten::linalg_cholesky_ex.L");

// cholesky(self, bool upper=False): raises (at the next sync) when self is not positive definite.
std::vector<Value> CholeskyOp(LoweringContext& context, std::span<const Operand> operands) {
  CheckSquare(context, operands[0], "A");
  auto [factor, info] = CholeskyWithInfo(context, operands[0].value);
  CheckPositiveDefinite(context, info);
  if (context.Bool(operands[1])) factor = MatrixTranspose(context.builder(), factor);
  return {factor};
}
TORCH_TPU_LOWERING(CholeskyOp, "aten::cholesky", "aten::cholesky.out");

// linalg_solve_triangular(self, B, *, bool upper, bool left=True, bool unitriangular=False)
std::vector<Value> LinalgSolveTriangular(LoweringContext& context,
                                         std::span<const Operand> operands) {
  CheckSquare(context, operands[0], "A");
  CheckLinalgInput(context, operands[1], "B");
  TORCH_CHECK(operands[0].dtype == operands[1].dtype, context.op_name(),
              ": Expected A and B to have the same dtype, but found A of type ",
              c10::toString(operands[0].dtype), " and B of type ", c10::toString(operands[1].dtype),
              " instead.");
  const bool upper = context.Bool(operands[2]), left = context.Bool(operands[3]);
  const int64_t n = operands[0].value.dims().back();
  const auto& b_dims = operands[1].value.dims();
  const int64_t b_solved = left ? b_dims[b_dims.size() - 2] : b_dims.back();
  TORCH_CHECK(b_solved == n, context.op_name(),
              ": Incompatible shapes of A and B for the equation ", left ? "AX = B" : "XA = B",
              " (", operands[0].value.type().ToString(), " and ",
              operands[1].value.type().ToString(), ")");
  auto [a, rhs] = BroadcastBatch(context, operands[0].value, operands[1].value);
  return {
      Solve(context, a, rhs, left, !upper, context.Bool(operands[4]), TransposeA::kNoTranspose)};
}
TORCH_TPU_LOWERING(LinalgSolveTriangular, "aten::linalg_solve_triangular",
                   "aten::linalg_solve_triangular.out");

// triangular_solve(self, A, bool upper=True, bool transpose=False, bool unitriangular=False)
//   -> (solution, cloned_coefficient): solves op(A) X = self.
std::vector<Value> TriangularSolveOp(LoweringContext& context, std::span<const Operand> operands) {
  CheckLinalgInput(context, operands[0], "b");
  CheckSquare(context, operands[1], "A");
  TORCH_CHECK(operands[0].dtype == operands[1].dtype, context.op_name(),
              ": Expected b and A to have the same dtype, but found b of type ",
              c10::toString(operands[0].dtype), " and A of type ", c10::toString(operands[1].dtype),
              " instead.");
  const int64_t n = operands[1].value.dims().back();
  const auto& b_dims = operands[0].value.dims();
  TORCH_CHECK(b_dims[b_dims.size() - 2] == n, context.op_name(),
              ": Incompatible matrix sizes for triangular_solve: each A matrix is ", n, " by ", n,
              " but each b matrix is ", b_dims[b_dims.size() - 2], " by ", b_dims.back());
  auto [a, rhs] = BroadcastBatch(context, operands[1].value, operands[0].value);
  Value solution =
      Solve(context, a, rhs, /*left=*/true, !context.Bool(operands[2]), context.Bool(operands[4]),
            context.Bool(operands[3]) ? TransposeA::kTranspose : TransposeA::kNoTranspose);
  return {solution, a};
}
TORCH_TPU_LOWERING(TriangularSolveOp, "aten::triangular_solve", "aten::triangular_solve.X");

// Solves (L L^T) X = rhs given the lower factor L, or (U^T U) X = rhs given the upper factor U.
Value CholeskySolve(LoweringContext& context, Value factor, Value rhs, bool upper) {
  // Both cases are a lower solve and an upper solve; the transposed factor supplies the other.
  Value y = Solve(context, factor, rhs, true, !upper, false,
                  upper ? TransposeA::kTranspose : TransposeA::kNoTranspose);
  return Solve(context, factor, y, true, !upper, false,
               upper ? TransposeA::kNoTranspose : TransposeA::kTranspose);
}

// _cholesky_solve_helper(self, A, bool upper): self is the right-hand side, A the factor.
std::vector<Value> CholeskySolveHelper(LoweringContext& context,
                                       std::span<const Operand> operands) {
  CheckLinalgInput(context, operands[0], "b");
  CheckSquare(context, operands[1], "A");
  auto [factor, rhs] = BroadcastBatch(context, operands[1].value, operands[0].value);
  return {CholeskySolve(context, factor, rhs, context.Bool(operands[2]))};
}
TORCH_TPU_LOWERING(CholeskySolveHelper, "aten::_cholesky_solve_helper");

// cholesky_inverse(self, bool upper=False): (L L^T)^-1 from the factor.
std::vector<Value> CholeskyInverse(LoweringContext& context, std::span<const Operand> operands) {
  CheckSquare(context, operands[0], "input");
  auto& b = context.builder();
  Value factor = operands[0].value;
  const TensorType index_type{ElementType::kS64, factor.dims()};
  Value identity = b.Convert(b.Compare(b.Iota(index_type, Rank(factor) - 2),
                                       b.Iota(index_type, Rank(factor) - 1), Direction::kEq),
                             factor.element_type());
  return {CholeskySolve(context, factor, identity, context.Bool(operands[1]))};
}
TORCH_TPU_LOWERING(CholeskyInverse, "aten::cholesky_inverse", "aten::cholesky_inverse.out");

}  // namespace
}  // namespace torch_tpu::lowering

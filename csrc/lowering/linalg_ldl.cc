// LDL^T factorization of symmetric indefinite matrices with Bunch-Kaufman pivoting as a StableHLO
// loop (no LAPACK call), and the solve built on it: linalg_ldl_factor_ex, linalg_ldl_solve.
//
// Conventions are LAPACK's sytrf/sytrs for the lower triangle, as CPU returns them: the column
// sweep goes left to right taking 1x1 or 2x2 pivots by the Bunch-Kaufman test (alpha =
// (1 + sqrt(17)) / 8); each interchange touches only the trailing submatrix, so L's stored columns
// stay as computed; pivots are 1-based, a 2x2 block storing -p in both of its entries; LD holds L
// below the diagonal and D on it (a 2x2 block's off-diagonal entry at (k + 1, k)), zero above;
// info is the 1-based index of the first zero pivot column (the sweep goes on past it).
//
// Batch elements take different pivot sizes, so the loop is counted over the columns and a
// per-element flag skips the column a 2x2 pivot already consumed.
#include <ATen/ExpandUtils.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <string>

#include "lowering/context.h"
#include "lowering/linalg_common.h"
#include "stablehlo/loops.h"

namespace torch_tpu::lowering {
namespace {

using namespace linalg;  // NOLINT: the shared linear-algebra vocabulary of this layer

// [B] -> [B, ...] along the batch dim.
Value PerMatrix(FunctionBuilder& b, Value x, const std::vector<int64_t>& dims) {
  return b.BroadcastInDim(x, dims, {0});
}

// Entry at per-matrix index i[B] of each vector x[B, n], as [B] (an exact sum: one term is kept).
Value EntryAt(FunctionBuilder& b, Value x, Value i) {
  const std::vector<int64_t>& dims = x.dims();
  Value hit = b.Compare(IndexIota(b, dims, 1), PerMatrix(b, i, dims), Direction::kEq);
  return Sum(b, b.Select(hit, x, b.Constant(x.element_type(), 0.0, dims)), {1});
}

// 0..n-1 with entries i and j[B] swapped, as [B, n] s32 (i, j: [B] s32).
Value Transposition(FunctionBuilder& b, Value i, Value j, int64_t n) {
  const std::vector<int64_t> dims = {i.dims()[0], n};
  Value iota = IndexIota(b, dims, 1);
  Value i_splat = PerMatrix(b, i, dims), j_splat = PerMatrix(b, j, dims);
  return b.Select(b.Compare(iota, i_splat, Direction::kEq), j_splat,
                  b.Select(b.Compare(iota, j_splat, Direction::kEq), i_splat, iota));
}

// Rows (and, with `columns`, columns) of x [B, n, m] reordered by perm [B, n].
Value Permute(FunctionBuilder& b, Value x, Value perm, bool columns) {
  Value rows = GatherRows(b, x, perm);
  return columns ? MatrixTranspose(b, GatherRows(b, MatrixTranspose(b, rows), perm)) : rows;
}

Value ScalarPlus(FunctionBuilder& b, Value k, int64_t offset) {
  return b.Add(k, b.ConstantInt(ElementType::kS32, offset));
}

// One column of the sweep (sytf2's step for uplo = 'L'). carried: LD [B, n, n] (lower triangle
// meaningful), pivots [B, n] s32, info [B] s32, skip [B] pred.
std::vector<Value> BunchKaufmanStep(FunctionBuilder& b, Value k, std::span<const Value> carried) {
  Value ld = carried[0], pivots = carried[1], info = carried[2], skip = carried[3];
  const std::vector<int64_t>& dims = ld.dims();
  const int64_t batch = dims[0], n = dims[1];
  const std::vector<int64_t> vector_dims = {batch, n}, scalar_dims = {batch};
  const ElementType type = ld.element_type();
  auto constant = [&](double value, const std::vector<int64_t>& d) {
    return b.Constant(type, value, d);
  };
  const double alpha = (1.0 + std::sqrt(17.0)) / 8.0;
  Value rows = IndexIota(b, dims, 1), columns = IndexIota(b, dims, 2);
  // The symmetric matrix the lower triangle stands for: LAPACK reads only that triangle.
  Value a = b.Select(b.Compare(rows, columns, Direction::kGe), ld, MatrixTranspose(b, ld));
  Value positions = IndexIota(b, vector_dims, 1);
  Value k_vector = Splat(b, k, vector_dims), k_batch = Splat(b, k, scalar_dims);

  Value column_k = DynamicColumn(b, a, k);
  Value absakk = b.Abs(DynamicEntry(b, column_k, k));
  auto [colmax, imax] =
      FirstLargestMagnitude(b, column_k, b.Compare(positions, k_vector, Direction::kGt));
  colmax = b.Maximum(colmax, constant(0.0, scalar_dims));
  Value zero = constant(0.0, scalar_dims);
  Value singular = b.Or(b.Compare(b.Maximum(absakk, colmax), zero, Direction::kEq),
                        b.Compare(absakk, absakk, Direction::kNe));
  // Row imax of the trailing matrix, off its diagonal: its largest entry decides the pivot size.
  Value row_imax = b.Reshape(GatherRows(b, a, b.Reshape(imax, {batch, 1})), vector_dims);
  Value off_diagonal = b.And(b.Compare(positions, k_vector, Direction::kGe),
                             b.Compare(positions, PerMatrix(b, imax, vector_dims), Direction::kNe));
  Value rowmax = b.Maximum(FirstLargestMagnitude(b, row_imax, off_diagonal).first, zero);
  Value alpha_colmax = b.Multiply(constant(alpha, scalar_dims), colmax);
  Value keep_k =
      b.Or(b.Compare(absakk, alpha_colmax, Direction::kGe),
           b.Compare(absakk, b.Multiply(alpha_colmax, b.Divide(colmax, rowmax)), Direction::kGe));
  keep_k = b.Or(singular, keep_k);
  Value one_by_one_at_imax =
      b.Compare(b.Abs(EntryAt(b, row_imax, imax)), b.Multiply(constant(alpha, scalar_dims), rowmax),
                Direction::kGe);
  Value two_by_two = b.And(b.Not(keep_k), b.Not(one_by_one_at_imax));
  Value kp = b.Select(keep_k, k_batch, imax);
  Value one_s32 = b.ConstantInt(ElementType::kS32, 1, scalar_dims);
  Value kk = b.Select(two_by_two, b.Add(k_batch, one_s32), k_batch);

  // Symmetric interchange of kk and kp inside the trailing submatrix a[k:, k:] only.
  Value trailing = b.And(b.Compare(rows, Splat(b, k, dims), Direction::kGe),
                         b.Compare(columns, Splat(b, k, dims), Direction::kGe));
  Value swapped = b.Select(trailing, Permute(b, a, Transposition(b, kk, kp, n), true), a);

  // 1x1 pivot: A22 -= x (1/d) x^T with x the column below d, which becomes x / d.
  Value x = DynamicColumn(b, swapped, k);
  Value below_k = b.Compare(positions, k_vector, Direction::kGt);
  x = b.Select(below_k, x, constant(0.0, vector_dims));
  Value d11 =
      b.Divide(constant(1.0, scalar_dims), DynamicEntry(b, DynamicColumn(b, swapped, k), k));
  Value scaled_x = b.Multiply(x, PerMatrix(b, b.Negate(d11), vector_dims));
  Value after_k = b.And(b.Compare(rows, Splat(b, k, dims), Direction::kGt),
                        b.Compare(columns, Splat(b, k, dims), Direction::kGt));
  Value one_update = b.Add(swapped, Outer(b, x, scaled_x));
  Value one = b.Select(after_k, one_update, swapped);
  Value column_k_mask = b.Compare(columns, Splat(b, k, dims), Direction::kEq);
  Value one_column = b.BroadcastInDim(b.Multiply(x, PerMatrix(b, d11, vector_dims)), dims, {0, 1});
  one = b.Select(b.And(column_k_mask, b.Compare(rows, Splat(b, k, dims), Direction::kGt)),
                 one_column, one);

  // 2x2 pivot on (k, k + 1): the columns below it become W = C D^-1, computed as sytf2 does.
  Value k1 = ScalarPlus(b, k, 1);
  Value ck = DynamicColumn(b, swapped, k), ck1 = DynamicColumn(b, swapped, k1);
  Value d21 = DynamicEntry(b, ck, k1);
  Value d11_2 = b.Divide(DynamicEntry(b, ck1, k1), d21);
  Value d22_2 = b.Divide(DynamicEntry(b, ck, k), d21);
  Value t = b.Divide(constant(1.0, scalar_dims),
                     b.Subtract(b.Multiply(d11_2, d22_2), constant(1.0, scalar_dims)));
  Value scale = PerMatrix(b, b.Divide(t, d21), vector_dims);
  Value below_pair = b.Compare(positions, Splat(b, k1, vector_dims), Direction::kGt);
  ck = b.Select(below_pair, ck, constant(0.0, vector_dims));
  ck1 = b.Select(below_pair, ck1, constant(0.0, vector_dims));
  Value wk = b.Multiply(scale, b.Subtract(b.Multiply(PerMatrix(b, d11_2, vector_dims), ck), ck1));
  Value wkp1 = b.Multiply(scale, b.Subtract(b.Multiply(PerMatrix(b, d22_2, vector_dims), ck1), ck));
  Value after_pair = b.And(b.Compare(rows, Splat(b, k1, dims), Direction::kGt),
                           b.Compare(columns, Splat(b, k1, dims), Direction::kGt));
  Value two_update = b.Subtract(b.Subtract(swapped, Outer(b, ck, wk)), Outer(b, ck1, wkp1));
  Value two = b.Select(after_pair, two_update, swapped);
  Value rows_below_pair = b.Compare(rows, Splat(b, k1, dims), Direction::kGt);
  two = b.Select(b.And(rows_below_pair, column_k_mask), b.BroadcastInDim(wk, dims, {0, 1}), two);
  two = b.Select(b.And(rows_below_pair, b.Compare(columns, Splat(b, k1, dims), Direction::kEq)),
                 b.BroadcastInDim(wkp1, dims, {0, 1}), two);

  Value stepped = b.Select(PerMatrix(b, singular, dims), swapped,
                           b.Select(PerMatrix(b, two_by_two, dims), two, one));
  Value next_ld = b.Select(PerMatrix(b, skip, dims), ld, stepped);

  Value kp_one_based = b.Add(kp, one_s32);
  Value at_k = b.Compare(positions, k_vector, Direction::kEq);
  Value at_pair = b.Or(at_k, b.Compare(positions, Splat(b, k1, vector_dims), Direction::kEq));
  Value stepped_pivots =
      b.Select(PerMatrix(b, two_by_two, vector_dims),
               b.Select(at_pair, PerMatrix(b, b.Negate(kp_one_based), vector_dims), pivots),
               b.Select(at_k, PerMatrix(b, kp_one_based, vector_dims), pivots));
  Value active = b.Not(skip);
  Value next_pivots = b.Select(PerMatrix(b, active, vector_dims), stepped_pivots, pivots);
  Value first_singular =
      b.And(b.And(active, singular),
            b.Compare(info, b.ConstantInt(ElementType::kS32, 0, scalar_dims), Direction::kEq));
  Value next_info = b.Select(first_singular, b.Add(k_batch, one_s32), info);
  return {next_ld, next_pivots, next_info, b.And(active, two_by_two)};
}

// linalg_ldl_factor_ex(Tensor self, *, bool hermitian=False, bool check_errors=False)
//   -> (LD, pivots, info). For real dtypes hermitian is symmetric, as on CPU (sytrf either way).
std::vector<Value> LinalgLdlFactorEx(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const CpuLinalgNames names{"torch.linalg.ldl_factor_ex", "ldl_factor_kernel_cpu"};
  CheckSquare(operands[0], "A", names);
  Value input = operands[0].value;
  const std::vector<int64_t> batch = BatchDims(input);
  Value a = FlattenBatch(b, input);
  const int64_t count = a.dims()[0], n = a.dims()[1];
  Value ld = KeepTriangle(b, a, true);
  Value pivots =
      b.Add(IndexIota(b, {count, n}, 1), b.ConstantInt(ElementType::kS32, 1, {count, n}));
  Value info = b.ConstantInt(ElementType::kS32, 0, {count});
  if (!IsEmpty(a)) {
    Value skip = b.Compare(info, info, Direction::kNe);
    std::vector<Value> out =
        stablehlo::ForLoop(b, 0, n, {ld, pivots, info, skip}, BunchKaufmanStep);
    ld = KeepTriangle(b, out[0], true);
    pivots = out[1];
    info = out[2];
  }
  info = b.Reshape(info, batch);
  if (context.Bool(operands[2])) {
    // CPU has no message for a singular D here (an internal assert, "Unknown error code").
    CheckInfoIsZero(context, info,
                    "torch.linalg.ldl_factor_ex: The factorization could not be completed because "
                    "the block diagonal matrix D is singular.");
  }
  return {b.Reshape(ld, input.dims()), UnflattenBatch(b, pivots, batch), info};
}
TORCH_TPU_LOWERING(LinalgLdlFactorEx, "aten::linalg_ldl_factor_ex",
                   "aten::linalg_ldl_factor_ex.out");

// Forward half of sytrs ('L'): x <- D^-1 L^-1 P^T x, one column (or 2x2 block) per trip.
// carried: x [B, n, r], LD [B, n, n], pivots [B, n] s32, skip [B] pred.
std::vector<Value> ForwardSolveStep(FunctionBuilder& b, Value k, std::span<const Value> carried) {
  Value x = carried[0], ld = carried[1], pivots = carried[2], skip = carried[3];
  const std::vector<int64_t>& dims = x.dims();
  const int64_t batch = dims[0], n = dims[1];
  const std::vector<int64_t> vector_dims = {batch, n}, scalar_dims = {batch},
                             row_dims = {batch, dims[2]};
  const ElementType type = x.element_type();
  Value k1 = ScalarPlus(b, k, 1);
  Value k_batch = Splat(b, k, scalar_dims);
  Value p = DynamicEntry(b, pivots, k);
  Value two_by_two = b.Compare(p, b.ConstantInt(ElementType::kS32, 0, scalar_dims), Direction::kLt);
  Value kk = b.Select(two_by_two, Splat(b, k1, scalar_dims), k_batch);
  Value kp = b.Subtract(b.Abs(p), b.ConstantInt(ElementType::kS32, 1, scalar_dims));
  kp = b.Clamp(b.ConstantInt(ElementType::kS32, 0), kp, b.ConstantInt(ElementType::kS32, n - 1));
  x = Permute(b, x, Transposition(b, kk, kp, n), false);

  Value positions = IndexIota(b, vector_dims, 1);
  Value zero_vector = b.Constant(type, 0.0, vector_dims);
  Value ck = DynamicColumn(b, ld, k), ck1 = DynamicColumn(b, ld, k1);
  Value xk = DynamicRow(b, x, k), xk1 = DynamicRow(b, x, k1);
  Value rows = IndexIota(b, dims, 1);

  // 1x1: x[i] -= L[i, k] x[k] below k, then x[k] /= d.
  Value lk =
      b.Select(b.Compare(positions, Splat(b, k, vector_dims), Direction::kGt), ck, zero_vector);
  Value one = b.Subtract(x, Outer(b, lk, xk));
  Value inverse_d = b.Divide(b.Constant(type, 1.0, scalar_dims), DynamicEntry(b, ck, k));
  Value one_row = b.Multiply(xk, b.BroadcastInDim(inverse_d, row_dims, {0}));
  one = b.Select(b.Compare(rows, Splat(b, k, dims), Direction::kEq),
                 b.BroadcastInDim(one_row, dims, {0, 2}), one);

  // 2x2: both columns below the block, then the 2x2 system as sytrs scales it.
  Value below_pair = b.Compare(positions, Splat(b, k1, vector_dims), Direction::kGt);
  Value two = b.Subtract(x, Outer(b, b.Select(below_pair, ck, zero_vector), xk));
  two = b.Subtract(two, Outer(b, b.Select(below_pair, ck1, zero_vector), xk1));
  Value akm1k = DynamicEntry(b, ck, k1);
  Value akm1 = b.BroadcastInDim(b.Divide(DynamicEntry(b, ck, k), akm1k), row_dims, {0});
  Value ak = b.BroadcastInDim(b.Divide(DynamicEntry(b, ck1, k1), akm1k), row_dims, {0});
  Value off = b.BroadcastInDim(akm1k, row_dims, {0});
  Value denominator = b.Subtract(b.Multiply(akm1, ak), b.Constant(type, 1.0, row_dims));
  Value bkm1 = b.Divide(xk, off), bk = b.Divide(xk1, off);
  Value new_k = b.Divide(b.Subtract(b.Multiply(ak, bkm1), bk), denominator);
  Value new_k1 = b.Divide(b.Subtract(b.Multiply(akm1, bk), bkm1), denominator);
  two = b.Select(b.Compare(rows, Splat(b, k, dims), Direction::kEq),
                 b.BroadcastInDim(new_k, dims, {0, 2}), two);
  two = b.Select(b.Compare(rows, Splat(b, k1, dims), Direction::kEq),
                 b.BroadcastInDim(new_k1, dims, {0, 2}), two);

  Value stepped = b.Select(PerMatrix(b, two_by_two, dims), two, one);
  Value next = b.Select(PerMatrix(b, skip, dims), carried[0], stepped);
  return {next, ld, pivots, b.And(b.Not(skip), two_by_two)};
}

// Backward half of sytrs ('L'): x <- P L^-T x from the last column up; trip t handles column
// n - 1 - t (the second column of a 2x2 block handles the block).
std::vector<Value> BackwardSolveStep(FunctionBuilder& b, Value t, std::span<const Value> carried) {
  Value x = carried[0], ld = carried[1], pivots = carried[2], skip = carried[3];
  const std::vector<int64_t>& dims = x.dims();
  const int64_t batch = dims[0], n = dims[1];
  const std::vector<int64_t> vector_dims = {batch, n}, scalar_dims = {batch};
  const ElementType type = x.element_type();
  Value k = b.Subtract(b.ConstantInt(ElementType::kS32, n - 1), t);
  Value km1 = ScalarPlus(b, k, -1);
  Value p = DynamicEntry(b, pivots, k);
  Value two_by_two = b.Compare(p, b.ConstantInt(ElementType::kS32, 0, scalar_dims), Direction::kLt);
  Value positions = IndexIota(b, vector_dims, 1);
  Value below_k = b.Compare(positions, Splat(b, k, vector_dims), Direction::kGt);
  Value zero_vector = b.Constant(type, 0.0, vector_dims);
  Value rows = IndexIota(b, dims, 1);
  // x[j] -= sum_{i > k} L[i, j] x[i] for column j.
  auto eliminate = [&](Value target, Value j) {
    Value l = b.Select(below_k, DynamicColumn(b, ld, j), zero_vector);
    Value correction = Sum(b, b.Multiply(b.BroadcastInDim(l, dims, {0, 1}), target), {1});
    Value row = b.Subtract(DynamicRow(b, target, j), correction);
    return b.Select(b.Compare(rows, Splat(b, j, dims), Direction::kEq),
                    b.BroadcastInDim(row, dims, {0, 2}), target);
  };
  Value one = eliminate(x, k);
  Value two =
      b.Select(b.Compare(rows, Splat(b, km1, dims), Direction::kEq), eliminate(x, km1), one);
  Value stepped = b.Select(PerMatrix(b, two_by_two, dims), two, one);
  Value kp = b.Subtract(b.Abs(p), b.ConstantInt(ElementType::kS32, 1, scalar_dims));
  kp = b.Clamp(b.ConstantInt(ElementType::kS32, 0), kp, b.ConstantInt(ElementType::kS32, n - 1));
  stepped = Permute(b, stepped, Transposition(b, Splat(b, k, scalar_dims), kp, n), false);
  Value next = b.Select(PerMatrix(b, skip, dims), x, stepped);
  return {next, ld, pivots, b.And(b.Not(skip), two_by_two)};
}

// linalg_ldl_solve(Tensor LD, Tensor pivots, Tensor B, *, bool hermitian=False) -> Tensor
std::vector<Value> LinalgLdlSolve(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const Operand &ld_operand = operands[0], &pivots_operand = operands[1], &rhs = operands[2];
  constexpr char kName[] = "torch.linalg.ldl_solve";
  const CpuLinalgNames names{kName, "ldl_solve_kernel_cpu"};
  CheckSquare(ld_operand, "A", names);
  const std::vector<int64_t>& ld_dims = ld_operand.value.dims();
  const std::vector<int64_t>& rhs_dims = rhs.value.dims();
  TORCH_CHECK(rhs.dtype == ld_operand.dtype,
              "Expected b and A to have the same dtype, but found b of type ",
              c10::toString(rhs.dtype), " and A of type ", c10::toString(ld_operand.dtype),
              " instead.");
  TORCH_CHECK_INDEX(rhs.value.rank() >= 2,
                    "Dimension out of range (expected to be in range of [-1, 0], but got -2)");
  const int64_t n = ld_dims.back();
  TORCH_CHECK(rhs_dims[rhs_dims.size() - 2] == n, "Incompatible matrix sizes for ", kName,
              ": each A matrix is ", n, " by ", n, " but each b matrix is ",
              rhs_dims[rhs_dims.size() - 2], " by ", rhs_dims.back());
  const std::vector<int64_t> expected_pivots(ld_dims.begin(), ld_dims.end() - 1);
  TORCH_CHECK(
      pivots_operand.value.dims() == expected_pivots, kName,
      ": Expected LD.shape[:-1] and pivots.shape to be the same, but got pivots with shape ",
      c10::IntArrayRef(pivots_operand.value.dims()), " instead");
  TORCH_CHECK(c10::isIntegralType(pivots_operand.dtype, /*includeBool=*/false), kName,
              ": Expected pivots to be integers. Got ", c10::toString(pivots_operand.dtype));

  // The batch is B's broadcast against LD's (at::infer_size raises CPU's exact error text).
  const std::vector<int64_t> batch =
      at::infer_size(BatchDims(rhs.value), BatchDims(ld_operand.value));
  auto with = [&](Value v, std::vector<int64_t> trailing) {
    std::vector<int64_t> dims = batch;
    dims.insert(dims.end(), trailing.begin(), trailing.end());
    return context.BroadcastTo(v, dims);
  };
  Value ld = FlattenBatch(b, with(ld_operand.value, {n, n}));
  Value x = FlattenBatch(b, with(rhs.value, {n, rhs_dims.back()}));
  Value pivots = with(context.Convert(pivots_operand.value, c10::kInt), {n});
  pivots = b.Reshape(pivots, {ld.dims()[0], n});
  if (!IsEmpty(x)) {
    const int64_t count = x.dims()[0];
    Value no_skip = b.Compare(b.ConstantInt(ElementType::kS32, 0, {count}),
                              b.ConstantInt(ElementType::kS32, 0, {count}), Direction::kNe);
    x = stablehlo::ForLoop(b, 0, n, {x, ld, pivots, no_skip}, ForwardSolveStep)[0];
    x = stablehlo::ForLoop(b, 0, n, {x, ld, pivots, no_skip}, BackwardSolveStep)[0];
  }
  return {UnflattenBatch(b, x, batch)};
}
TORCH_TPU_LOWERING(LinalgLdlSolve, "aten::linalg_ldl_solve", "aten::linalg_ldl_solve.out");

}  // namespace
}  // namespace torch_tpu::lowering

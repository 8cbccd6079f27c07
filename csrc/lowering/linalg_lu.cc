// LU factorization with partial pivoting as a StableHLO loop (one column per trip, no LAPACK
// call), and the ops built on it: lu_unpack, lu_solve, solve, inv, det, slogdet.
//
// Conventions are LAPACK's getrf, as CPU returns them: row interchanges as 1-based int32 pivots
// (pivots[k] = the row swapped with row k at step k), the pivot being the first entry of largest
// magnitude in the column, unit lower L and upper U packed in one matrix, and info = the 1-based
// index of the first exactly zero pivot (0 when there is none; the factorization goes on).
#include <c10/util/Exception.h>

#include <string>

#include "lowering/context.h"
#include "lowering/linalg_common.h"
#include "stablehlo/loops.h"

namespace torch_tpu::lowering {
namespace {

using namespace linalg;  // NOLINT: the shared linear-algebra vocabulary of this layer
using TransposeA = FunctionBuilder::TransposeA;

struct LuFactors {
  Value lu;      // [B, m, n]
  Value pivots;  // [B, min(m, n)] s32, 1-based
  Value info;    // [B] s32
};

// Index of the first largest |x| among rows >= k of each column vector [B, m] -> [B] s32.
Value PivotRow(FunctionBuilder& b, Value column, Value k) {
  const std::vector<int64_t>& dims = column.dims();
  return FirstLargestMagnitude(b, column,
                               b.Compare(IndexIota(b, dims, 1), Splat(b, k, dims), Direction::kGe))
      .second;
}

// One elimination step on column k: pick the pivot, swap rows k and p, scale the multipliers by
// the pivot's reciprocal (LAPACK's getf2 does the same) and update the trailing matrix.
std::vector<Value> EliminationStep(FunctionBuilder& b, Value k, std::span<const Value> carried) {
  Value a = carried[0], pivots = carried[1], info = carried[2];
  const std::vector<int64_t>& dims = a.dims();
  const int64_t batch = dims[0];
  const ElementType type = a.element_type();
  Value p = PivotRow(b, DynamicColumn(b, a, k), k);

  Value rows = IndexIota(b, dims, 1), columns = IndexIota(b, dims, 2);
  Value k_splat = Splat(b, k, dims);
  Value row_k = DynamicRow(b, a, k);
  Value row_p = b.Reshape(GatherRows(b, a, b.Reshape(p, {batch, 1})), {batch, dims[2]});
  Value p_splat = b.BroadcastInDim(p, dims, {0});
  Value is_row_k = b.Compare(rows, k_splat, Direction::kEq);
  Value swapped = b.Select(is_row_k, b.BroadcastInDim(row_p, dims, {0, 2}),
                           b.Select(b.Compare(rows, p_splat, Direction::kEq),
                                    b.BroadcastInDim(row_k, dims, {0, 2}), a));

  Value pivot = DynamicEntry(b, row_p, k);  // [B]
  Value zero_pivot = b.Compare(pivot, b.Constant(type, 0.0, {batch}), Direction::kEq);
  Value first_zero =
      b.And(zero_pivot, b.Compare(info, b.ConstantInt(ElementType::kS32, 0, {batch}),
                                  Direction::kEq));
  Value k_plus_one = b.Add(k, b.ConstantInt(ElementType::kS32, 1));
  info = b.Select(first_zero, Splat(b, k_plus_one, {batch}), info);
  const std::vector<int64_t>& pivot_dims = pivots.dims();
  pivots = b.Select(b.Compare(IndexIota(b, pivot_dims, 1), Splat(b, k, pivot_dims), Direction::kEq),
                    b.BroadcastInDim(b.Add(p, b.ConstantInt(ElementType::kS32, 1, {batch})), pivot_dims, {0}),
                    pivots);

  // A zero pivot means the whole column below it is zero: LAPACK leaves it unscaled.
  Value reciprocal = b.Select(zero_pivot, b.Constant(type, 1.0, {batch}),
                              b.Divide(b.Constant(type, 1.0, {batch}), pivot));
  Value column = b.Multiply(DynamicColumn(b, swapped, k), b.BroadcastInDim(reciprocal, {batch, dims[1]}, {0}));
  Value below = b.Compare(rows, k_splat, Direction::kGt);
  Value right = b.Compare(columns, k_splat, Direction::kGt);
  Value multipliers = b.BroadcastInDim(column, dims, {0, 1});
  Value updated = b.Subtract(swapped, b.Multiply(multipliers, b.BroadcastInDim(row_p, dims, {0, 2})));
  Value result = b.Select(b.And(below, right), updated, swapped);
  result = b.Select(b.And(below, b.Compare(columns, k_splat, Direction::kEq)), multipliers, result);
  return {result, pivots, info};
}

LuFactors LuFactor(FunctionBuilder& b, Value a) {
  const auto& dims = a.dims();
  const int64_t steps = std::min(dims[1], dims[2]);
  Value pivots = b.Add(IndexIota(b, {dims[0], steps}, 1),
                       b.ConstantInt(ElementType::kS32, 1, {dims[0], steps}));
  Value info = b.ConstantInt(ElementType::kS32, 0, {dims[0]});
  if (IsEmpty(a)) return {a, pivots, info};
  std::vector<Value> out = stablehlo::ForLoop(b, 0, steps, {a, pivots, info}, EliminationStep);
  return {out[0], out[1], out[2]};
}

// The row permutation the pivots describe: perm[B, m] with (P^T A)[i] = A[perm[i]], built by
// replaying the interchanges in order on 0..m-1.
Value PermutationFromPivots(FunctionBuilder& b, Value pivots, int64_t m) {
  const int64_t batch = pivots.dims()[0];
  Value perm = IndexIota(b, {batch, m}, 1);
  if (batch == 0 || m == 0) return perm;
  return stablehlo::ForLoop(
      b, 0, pivots.dims()[1], {perm, pivots},
      [m, batch](FunctionBuilder& body, Value k, std::span<const Value> carried) {
        Value perm = carried[0];
        Value p = body.Subtract(DynamicEntry(body, carried[1], k),
                                body.ConstantInt(ElementType::kS32, 1, {batch}));
        // An out-of-range pivot (user-made) is clamped, as a gather clamps.
        p = body.Clamp(body.ConstantInt(ElementType::kS32, 0), p,
                       body.ConstantInt(ElementType::kS32, m - 1));
        const std::vector<int64_t> dims = {batch, m};
        Value positions = IndexIota(body, dims, 1);
        Value at_k = Splat(body, k, dims);
        Value value_k = body.BroadcastInDim(DynamicEntry(body, perm, k), dims, {0});
        Value value_p = body.BroadcastInDim(
            body.Reshape(GatherRows(body, body.Reshape(perm, {batch, m, 1}),
                                    body.Reshape(p, {batch, 1})),
                         {batch}),
            dims, {0});
        Value p_splat = body.BroadcastInDim(p, dims, {0});
        Value next = body.Select(body.Compare(positions, at_k, Direction::kEq), value_p,
                                 body.Select(body.Compare(positions, p_splat, Direction::kEq),
                                             value_k, perm));
        return std::vector<Value>{next, carried[1]};
      })[0];
}

// inverse[perm[i]] = i, as [B, m].
Value InversePermutation(FunctionBuilder& b, Value perm) {
  const int64_t batch = perm.dims()[0], m = perm.dims()[1];
  const std::vector<int64_t> dims = {batch, m, m};
  // hit[b, r, i] = perm[b, i] == r; inverse[b, r] = sum_i i * hit.
  Value hit = b.Compare(b.BroadcastInDim(perm, dims, {0, 2}), IndexIota(b, dims, 1),
                        Direction::kEq);
  Value weighted = b.Select(hit, IndexIota(b, dims, 2), b.ConstantInt(ElementType::kS32, 0, dims));
  return b.Reduce({weighted}, {b.ConstantInt(ElementType::kS32, 0)}, {2},
                  [](FunctionBuilder& body, std::span<const Value> args) {
                    return std::vector<Value>{body.Add(args[0], args[1])};
                  })[0];
}

// Solves A X = rhs (or A^T X = rhs) from A's packed factors: lu [B, n, n], pivots [B, n],
// rhs [B, n, k].
Value LuSolveFlat(FunctionBuilder& b, Value lu, Value pivots, Value rhs, bool adjoint) {
  if (IsEmpty(lu) || IsEmpty(rhs)) return rhs;
  const int64_t n = lu.dims()[1];
  Value perm = PermutationFromPivots(b, pivots, n);
  if (!adjoint) {
    // P^T A = L U: X = U^-1 L^-1 (P^T rhs).
    Value permuted = GatherRows(b, rhs, perm);
    Value y = b.TriangularSolve(lu, permuted, true, true, true, TransposeA::kNoTranspose);
    return b.TriangularSolve(lu, y, true, false, false, TransposeA::kNoTranspose);
  }
  // A^T = U^T L^T P^T: X = P L^-T U^-T rhs.
  Value w = b.TriangularSolve(lu, rhs, true, false, false, TransposeA::kTranspose);
  Value v = b.TriangularSolve(lu, w, true, true, true, TransposeA::kTranspose);
  return GatherRows(b, v, InversePermutation(b, perm));
}

// Solves with left (A X = B) or right (X A = B) placement; right solves are transposed left ones.
Value LuSolve(FunctionBuilder& b, Value lu, Value pivots, Value rhs, bool left, bool adjoint) {
  if (left) return LuSolveFlat(b, lu, pivots, rhs, adjoint);
  return MatrixTranspose(b, LuSolveFlat(b, lu, pivots, MatrixTranspose(b, rhs), !adjoint));
}

std::string SingularMessage(LoweringContext& context, const char* what) {
  return context.op_name() + ": The diagonal element is zero, the " + what +
         " could not be completed because the input matrix is singular.";
}

// Checks linalg_lu(_factor_ex)'s A and pivot=True (CPU has no unpivoted LU), then factors A.
// `function` is how CPU's errors name the op ("linalg.lu").
LuFactors PivotedLuOfInput(LoweringContext& context, std::span<const Operand> operands,
                           const char* function) {
  const auto& dims = operands[0].value.dims();
  TORCH_CHECK(dims.size() >= 2, function, ": Expected tensor with 2 or more dimensions. Got size: ",
              c10::IntArrayRef(dims), " instead");
  CheckLinalgInput(operands[0], "A", {function, "lu_cpu", "lu_cpu"});
  TORCH_CHECK(context.Bool(operands[1]), context.op_name(),
              ": LU without pivoting is not implemented on the CPU");
  return LuFactor(context.builder(), FlattenBatch(context.builder(), operands[0].value));
}

// linalg_lu_factor_ex(A, *, bool pivot=True, bool check_errors=False) -> (LU, pivots, info)
std::vector<Value> LinalgLuFactorEx(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value a = operands[0].value;
  LuFactors factors = PivotedLuOfInput(context, operands, "torch.lu_factor");
  const std::vector<int64_t> batch = BatchDims(a);
  Value info = b.Reshape(factors.info, batch);
  if (context.Bool(operands[2])) CheckInfoIsZero(context, info, SingularMessage(context, "factorization"));
  return {b.Reshape(factors.lu, a.dims()), UnflattenBatch(b, factors.pivots, batch), info};
}
TORCH_TPU_LOWERING(LinalgLuFactorEx, "aten::linalg_lu_factor_ex", "aten::linalg_lu_factor_ex.out");

// P [B, m, m] with A = P L U: P[perm[c], c] = 1.
Value PermutationMatrix(FunctionBuilder& b, Value perm, ElementType type) {
  const int64_t batch = perm.dims()[0], m = perm.dims()[1];
  const std::vector<int64_t> dims = {batch, m, m};
  return b.Convert(b.Compare(b.BroadcastInDim(perm, dims, {0, 2}), IndexIota(b, dims, 1),
                             Direction::kEq),
                   type);
}

// Unit lower L [B, m, k] and upper U [B, k, n] from the packed factors [B, m, n].
std::pair<Value, Value> UnpackFactors(FunctionBuilder& b, Value lu) {
  const auto& d = lu.dims();
  const int64_t k = std::min(d[1], d[2]);
  Value l = b.Slice(lu, {0, 0, 0}, {d[0], d[1], k}, {1, 1, 1});
  l = b.Add(KeepTriangle(b, l, true, -1), Eye(b, lu.element_type(), l.dims()));
  Value u = KeepTriangle(b, b.Slice(lu, {0, 0, 0}, {d[0], k, d[2]}, {1, 1, 1}), false);
  return {l, u};
}

// linalg_lu(A, *, bool pivot=True) -> (P, L, U)
std::vector<Value> LinalgLu(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value a = operands[0].value;
  LuFactors factors = PivotedLuOfInput(context, operands, "linalg.lu");
  const std::vector<int64_t> batch = BatchDims(a);
  auto [l, u] = UnpackFactors(b, factors.lu);
  Value perm = PermutationFromPivots(b, factors.pivots, a.dims()[a.rank() - 2]);
  return {UnflattenBatch(b, PermutationMatrix(b, perm, a.element_type()), batch),
          UnflattenBatch(b, l, batch), UnflattenBatch(b, u, batch)};
}
TORCH_TPU_LOWERING(LinalgLu, "aten::linalg_lu", "aten::linalg_lu.out");

// lu_unpack(LU_data, LU_pivots, bool unpack_data=True, bool unpack_pivots=True) -> (P, L, U);
// what is not unpacked comes back as an empty [0] tensor, as on CPU.
std::vector<Value> LuUnpack(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value lu = operands[0].value;
  TORCH_CHECK(lu.rank() >= 2, context.op_name(),
              ": torch.lu_unpack: Expected tensor with 2 or more dimensions. Got size: ",
              lu.type().ToString(), " instead");
  TORCH_CHECK(operands[1].dtype == c10::kInt, context.op_name(),
              ": torch.lu_unpack: LU_pivots is expected to be a contiguous tensor of torch.int32 "
              "dtype. Note: this function is intended to be used with the output produced by "
              "torch.linalg.lu_factor");
  const std::vector<int64_t> batch = BatchDims(lu);
  const int64_t m = lu.dims()[lu.rank() - 2];
  Value empty = b.Constant(lu.element_type(), 0.0, {0});
  std::vector<Value> results = {empty, empty, empty};
  if (context.Bool(operands[2])) {
    auto [l, u] = UnpackFactors(b, FlattenBatch(b, lu));
    results[1] = UnflattenBatch(b, l, batch);
    results[2] = UnflattenBatch(b, u, batch);
  }
  if (context.Bool(operands[3])) {
    Value pivots = operands[1].value;
    const int64_t count = pivots.dims().empty() ? 0 : pivots.dims().back();
    Value flat_pivots = b.Reshape(context.BroadcastTo(pivots, [&] {
      std::vector<int64_t> dims = batch;
      dims.push_back(count);
      return dims;
    }()), {FlattenBatch(b, lu).dims()[0], count});
    Value perm = PermutationFromPivots(b, flat_pivots, m);
    results[0] = UnflattenBatch(b, PermutationMatrix(b, perm, lu.element_type()), batch);
  }
  return results;
}
TORCH_TPU_LOWERING(LuUnpack, "aten::lu_unpack", "aten::lu_unpack.out");

// Broadcasts LU's and B's batch dims and flattens them: (lu, pivots, rhs, batch dims).
struct SolveOperands {
  Value lu, pivots, rhs;
  std::vector<int64_t> batch;
};
SolveOperands FlattenSolveOperands(LoweringContext& context, Value lu, Value pivots, Value rhs) {
  auto& b = context.builder();
  auto [lu_b, rhs_b] = BroadcastBatch(context, lu, rhs);
  std::vector<int64_t> batch = BatchDims(lu_b);
  std::vector<int64_t> pivot_dims = batch;
  pivot_dims.push_back(pivots.dims().back());
  Value lu_flat = FlattenBatch(b, lu_b);
  Value pivots_flat =
      b.Reshape(context.BroadcastTo(pivots, pivot_dims), {lu_flat.dims()[0], pivot_dims.back()});
  return {lu_flat, pivots_flat, FlattenBatch(b, rhs_b), batch};
}

// linalg_lu_solve(LU, pivots, B, *, bool left=True, bool adjoint=False)
std::vector<Value> LinalgLuSolve(LoweringContext& context, std::span<const Operand> operands) {
  CheckSquare(context, operands[0], "LU");
  CheckLinalgInput(context, operands[2], "B");
  const int64_t n = operands[0].value.dims().back();
  const bool left = context.Bool(operands[3]);
  const auto& b_dims = operands[2].value.dims();
  TORCH_CHECK(b_dims[b_dims.size() - (left ? 2 : 1)] == n, context.op_name(),
              ": Incompatible shapes of A and B for the equation ", left ? "AX = B" : "XA = B",
              " (", operands[0].value.type().ToString(), " and ",
              operands[2].value.type().ToString(), ")");
  auto& b = context.builder();
  SolveOperands s =
      FlattenSolveOperands(context, operands[0].value, operands[1].value, operands[2].value);
  Value x = LuSolve(b, s.lu, s.pivots, s.rhs, left, context.Bool(operands[4]));
  return {UnflattenBatch(b, x, s.batch)};
}
TORCH_TPU_LOWERING(LinalgLuSolve, "aten::linalg_lu_solve", "aten::linalg_lu_solve.out");

// _linalg_solve_ex(A, B, *, bool left=True, bool check_errors=False)
//   -> (result, LU, pivots, info); LU, pivots and info are A's (not broadcast), as on CPU.
std::vector<Value> LinalgSolveEx(LoweringContext& context, std::span<const Operand> operands) {
  CheckSquare(operands[0], "A", {"linalg.solve", "lu_cpu"});
  TORCH_CHECK(operands[0].dtype == operands[1].dtype, context.op_name(),
              ": Expected A and B to have the same dtype, but found A of type ",
              c10::toString(operands[0].dtype), " and B of type ",
              c10::toString(operands[1].dtype), " instead");
  auto& b = context.builder();
  Value a = operands[0].value, rhs = operands[1].value;
  const bool left = context.Bool(operands[2]);
  const std::vector<int64_t> a_batch = BatchDims(a);
  // NumPy's vector case: B of shape (n,) or A.shape[:-1].
  std::vector<int64_t> a_but_last(a.dims().begin(), a.dims().end() - 1);
  const bool vector_case = rhs.rank() == 1 || (rhs.rank() == a.rank() - 1 && rhs.dims() == a_but_last);
  if (vector_case) {
    std::vector<int64_t> dims = rhs.dims();
    dims.push_back(1);
    rhs = b.Reshape(rhs, dims);
  } else {
    TORCH_CHECK(rhs.rank() >= 2, context.op_name(), ": The input tensor B must have at least 2 dimensions.");
  }
  const int64_t n = a.dims().back();
  TORCH_CHECK(rhs.dims()[rhs.rank() - (left ? 2 : 1)] == n, context.op_name(),
              ": Incompatible shapes of A and B for the equation ", left ? "AX = B" : "XA = B",
              " (", a.type().ToString(), " and ", operands[1].value.type().ToString(), ")");
  LuFactors factors = LuFactor(b, FlattenBatch(b, a));
  Value lu = b.Reshape(factors.lu, a.dims());
  Value pivots = UnflattenBatch(b, factors.pivots, a_batch);
  Value info = b.Reshape(factors.info, a_batch);
  if (context.Bool(operands[3])) CheckInfoIsZero(context, info, SingularMessage(context, "solve"));
  SolveOperands s = FlattenSolveOperands(context, lu, pivots, rhs);
  Value x = UnflattenBatch(b, LuSolve(b, s.lu, s.pivots, s.rhs, left, false), s.batch);
  if (vector_case) {
    std::vector<int64_t> dims(x.dims().begin(), x.dims().end() - 1);
    x = b.Reshape(x, dims);
  }
  return {x, lu, pivots, info};
}
TORCH_TPU_LOWERING(LinalgSolveEx, "aten::_linalg_solve_ex", "aten::_linalg_solve_ex.result");

// linalg_inv_ex(A, *, bool check_errors=False) -> (inverse, info)
std::vector<Value> LinalgInvEx(LoweringContext& context, std::span<const Operand> operands) {
  CheckSquare(operands[0], "A", {"linalg.inv"});
  auto& b = context.builder();
  Value a = operands[0].value;
  const std::vector<int64_t> batch = BatchDims(a);
  LuFactors factors = LuFactor(b, FlattenBatch(b, a));
  Value info = b.Reshape(factors.info, batch);
  if (context.Bool(operands[1])) CheckInfoIsZero(context, info, SingularMessage(context, "inversion"));
  Value identity = Eye(b, a.element_type(), factors.lu.dims());
  Value inverse = LuSolveFlat(b, factors.lu, factors.pivots, identity, false);
  return {b.Reshape(inverse, a.dims()), info};
}
TORCH_TPU_LOWERING(LinalgInvEx, "aten::linalg_inv_ex", "aten::linalg_inv_ex.inverse");

// (-1)^(number of actual interchanges) as [B] in `type`.
Value PermutationSign(FunctionBuilder& b, Value pivots, ElementType type) {
  const auto& dims = pivots.dims();
  Value identity = b.Add(IndexIota(b, dims, 1), b.ConstantInt(ElementType::kS32, 1, dims));
  Value swapped = b.Compare(pivots, identity, Direction::kNe);
  Value factors = b.Select(swapped, b.Constant(type, -1.0, dims), b.Constant(type, 1.0, dims));
  return b.Reduce({factors}, {b.Constant(type, 1.0)}, {1},
                  [](FunctionBuilder& body, std::span<const Value> args) {
                    return std::vector<Value>{body.Multiply(args[0], args[1])};
                  })[0];
}

// CPU factors A^T when A is contiguous (det(A^T) = det(A), and LAPACK wants column-major input);
// the backward formulas solve with the factors accordingly, so the factors returned are A^T's.
LuFactors FactorTransposed(FunctionBuilder& b, Value a) {
  return LuFactor(b, MatrixTranspose(b, FlattenBatch(b, a)));
}

// _linalg_det(A) -> (result, LU, pivots)
std::vector<Value> LinalgDet(LoweringContext& context, std::span<const Operand> operands) {
  CheckSquare(operands[0], "A", {"linalg.det", "lu_cpu"});
  auto& b = context.builder();
  Value a = operands[0].value;
  const std::vector<int64_t> batch = BatchDims(a);
  LuFactors factors = FactorTransposed(b, a);
  Value diagonal = Diagonal(b, factors.lu);
  Value product = b.Reduce({diagonal}, {b.Constant(a.element_type(), 1.0)}, {1},
                           [](FunctionBuilder& body, std::span<const Value> args) {
                             return std::vector<Value>{body.Multiply(args[0], args[1])};
                           })[0];
  Value det = b.Multiply(product, PermutationSign(b, factors.pivots, a.element_type()));
  return {b.Reshape(det, batch), b.Reshape(factors.lu, a.dims()),
          UnflattenBatch(b, factors.pivots, batch)};
}
TORCH_TPU_LOWERING(LinalgDet, "aten::_linalg_det", "aten::_linalg_det.result");

// _linalg_slogdet(A) -> (sign, logabsdet, LU, pivots)
std::vector<Value> LinalgSlogdet(LoweringContext& context, std::span<const Operand> operands) {
  CheckSquare(operands[0], "A", {"linalg.slogdet"});
  auto& b = context.builder();
  Value a = operands[0].value;
  const ElementType type = a.element_type();
  const std::vector<int64_t> batch = BatchDims(a);
  LuFactors factors = FactorTransposed(b, a);
  Value diagonal = Diagonal(b, factors.lu);
  Value signs = b.Reduce({b.Sign(diagonal)}, {b.Constant(type, 1.0)}, {1},
                         [](FunctionBuilder& body, std::span<const Value> args) {
                           return std::vector<Value>{body.Multiply(args[0], args[1])};
                         })[0];
  Value sign = b.Multiply(signs, PermutationSign(b, factors.pivots, type));
  Value logabsdet = Sum(b, b.Log(b.Abs(diagonal)), {1});
  return {b.Reshape(sign, batch), b.Reshape(logabsdet, batch), b.Reshape(factors.lu, a.dims()),
          UnflattenBatch(b, factors.pivots, batch)};
}
TORCH_TPU_LOWERING(LinalgSlogdet, "aten::_linalg_slogdet", "aten::_linalg_slogdet.sign");

}  // namespace
}  // namespace torch_tpu::lowering

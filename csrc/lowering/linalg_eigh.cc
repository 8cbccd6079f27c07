// Symmetric eigendecomposition and SVD by Jacobi rotations as StableHLO loops (no LAPACK call):
// _linalg_eigh (two-sided cyclic Jacobi) and _linalg_svd (one-sided Jacobi, with the left
// singular vectors completed to an orthonormal basis by a Householder QR).
//
// A sweep visits every pair (p, q), p < q, in row-cyclic order; each rotation zeroes the (p, q)
// entry (eigh) or makes columns p and q orthogonal (svd). Sweeps repeat until no entry exceeds
// the dtype's epsilon relative to its diagonal (a bounded number: Jacobi converges
// quadratically). Results follow LAPACK's order: eigenvalues ascending, singular values
// descending. Eigenvectors and singular vectors are defined up to sign; callers compare them
// through sign-free invariants, as PyTorch's own OpInfo tests do.
#include <c10/util/Exception.h>

#include <string>

#include "lowering/context.h"
#include "lowering/linalg_common.h"
#include "lowering/linalg_householder.h"
#include "lowering/linalg_jacobi.h"
#include "stablehlo/loops.h"

namespace torch_tpu::lowering {
namespace {

using namespace linalg;  // NOLINT: the shared linear-algebra vocabulary of this layer

// Jacobi converges quadratically; this bounds the loop for inputs that never settle (NaN stops
// it right away: its comparisons are false).
constexpr int64_t kMaxSweeps = 40;

// The pairs (p, q), p < q, of a sweep as an s32 [count, 2] constant.
Value PairTable(FunctionBuilder& b, int64_t n) {
  std::vector<int64_t> entries;
  for (int64_t p = 0; p < n; ++p) {
    for (int64_t q = p + 1; q < n; ++q) {
      entries.push_back(p);
      entries.push_back(q);
    }
  }
  const int64_t count = static_cast<int64_t>(entries.size()) / 2;
  return b.ConstantDenseInt(TensorType{ElementType::kS32, {count, 2}}, entries);
}

Value PairEntry(FunctionBuilder& b, Value pairs, Value t, int64_t which) {
  Value column = b.ConstantInt(ElementType::kS32, which);
  return b.Reshape(b.DynamicSlice(pairs, {t, column}, {1, 1}), {});
}

struct Rotation {
  Value c, s;     // [B]
  Value rotated;  // [B] pred: whether the pair was far enough from converged to rotate
};

// The rotation that zeroes the off-diagonal entry of [[app, apq], [apq, aqq]] (all [B]):
// t = sign(theta) / (|theta| + sqrt(theta^2 + 1)), theta = (aqq - app) / (2 apq); pairs already
// within epsilon of diagonal (relative to sqrt(|app aqq|)) are left alone.
Rotation JacobiRotation(FunctionBuilder& b, Value app, Value aqq, Value apq) {
  const ElementType type = app.element_type();
  const std::vector<int64_t> dims = app.dims();
  auto constant = [&](double v) { return b.Constant(type, v, dims); };
  Value threshold =
      b.Multiply(constant(Epsilon(type)), b.Sqrt(b.Abs(b.Multiply(app, aqq))));
  Value rotated = b.Compare(b.Abs(apq), threshold, Direction::kGt);
  Value safe_apq = b.Select(rotated, apq, constant(1.0));
  Value theta = b.Divide(b.Subtract(aqq, app), b.Multiply(constant(2.0), safe_apq));
  Value sign = b.Select(b.Compare(theta, constant(0.0), Direction::kGe), constant(1.0),
                        constant(-1.0));
  Value t = b.Divide(sign, b.Add(b.Abs(theta),
                                 b.Sqrt(b.Add(b.Multiply(theta, theta), constant(1.0)))));
  t = b.Select(rotated, t, constant(0.0));
  Value c = b.Rsqrt(b.Add(b.Multiply(t, t), constant(1.0)));
  return {c, b.Multiply(t, c), rotated};
}

// x J for the rotation J (J_pp = J_qq = c, J_pq = s, J_qp = -s): columns p and q of [B, r, n].
Value RotateColumns(FunctionBuilder& b, Value x, Value p, Value q, const Rotation& rotation) {
  const std::vector<int64_t> column_dims = {x.dims()[0], x.dims()[1]};
  Value c = b.BroadcastInDim(rotation.c, column_dims, {0});
  Value s = b.BroadcastInDim(rotation.s, column_dims, {0});
  Value xp = DynamicColumn(b, x, p), xq = DynamicColumn(b, x, q);
  Value new_p = b.Subtract(b.Multiply(c, xp), b.Multiply(s, xq));
  Value new_q = b.Add(b.Multiply(s, xp), b.Multiply(c, xq));
  Value zero = b.ConstantInt(ElementType::kS32, 0);
  const std::vector<int64_t> slice_dims = {column_dims[0], column_dims[1], 1};
  x = b.DynamicUpdateSlice(x, b.Reshape(new_p, slice_dims), {zero, zero, p});
  return b.DynamicUpdateSlice(x, b.Reshape(new_q, slice_dims), {zero, zero, q});
}

// Entry (i, j) of each matrix of [B, n, n] as [B].
Value MatrixEntry(FunctionBuilder& b, Value x, Value i, Value j) {
  Value zero = b.ConstantInt(ElementType::kS32, 0);
  return b.Reshape(b.DynamicSlice(x, {zero, i, j}, {x.dims()[0], 1, 1}), {x.dims()[0]});
}

// Sorts the columns of every matrix in `matrices` ([B, r_i, n]) and the keys [B, n] by the keys,
// ascending; returns the sorted keys followed by the sorted matrices.
std::vector<Value> SortColumnsByKeys(FunctionBuilder& b, Value keys,
                                     const std::vector<Value>& matrices) {
  auto less = [](FunctionBuilder& body, std::span<const Value> args) {
    return std::vector<Value>{body.Compare(args[0], args[1], Direction::kLt)};
  };
  std::vector<Value> sorted = {b.Sort({keys}, 1, /*is_stable=*/true, less)[0]};
  for (const Value& matrix : matrices) {
    Value broadcast_keys = b.BroadcastInDim(keys, matrix.dims(), {0, 2});
    sorted.push_back(b.Sort({broadcast_keys, matrix}, 2, /*is_stable=*/true, less)[1]);
  }
  return sorted;
}

// Runs `sweep` (which returns the carried values followed by a [B] pred "rotated somewhere")
// until no rotation happens or kMaxSweeps.
std::vector<Value> JacobiSweeps(
    FunctionBuilder& b, std::vector<Value> carried,
    const std::function<std::vector<Value>(FunctionBuilder&, std::span<const Value>)>& sweep) {
  std::vector<Value> initial = {b.ConstantInt(ElementType::kS32, 0),
                                b.Constant(ElementType::kPred, 1.0)};
  initial.insert(initial.end(), carried.begin(), carried.end());
  std::vector<Value> out = b.While(
      initial,
      [](FunctionBuilder& body, std::span<const Value> args) {
        Value more = body.Compare(args[0], body.ConstantInt(ElementType::kS32, kMaxSweeps),
                                  Direction::kLt);
        return std::vector<Value>{body.And(more, args[1])};
      },
      [&sweep](FunctionBuilder& body, std::span<const Value> args) {
        std::vector<Value> swept = sweep(body, args.subspan(2));
        Value rotated = Any(body, swept.back());
        swept.pop_back();
        std::vector<Value> next = {body.Add(args[0], body.ConstantInt(ElementType::kS32, 1)),
                                   rotated};
        next.insert(next.end(), swept.begin(), swept.end());
        return next;
      });
  return std::vector<Value>(out.begin() + 2, out.end());
}

// Eigenvalues [B, n] (ascending) and eigenvectors [B, n, n] (columns) of symmetric [B, n, n].
std::pair<Value, Value> SymmetricEigen(FunctionBuilder& b, Value a) {
  const int64_t batch = a.dims()[0], n = a.dims()[1];
  Value vectors = Eye(b, a.element_type(), a.dims());
  if (n > 1 && batch > 0) {
    std::vector<Value> out = JacobiSweeps(
        b, {a, vectors, PairTable(b, n)},
        [n, batch](FunctionBuilder& sb, std::span<const Value> carried) {
          Value rotated_any = sb.Constant(ElementType::kPred, 0.0, {batch});
          std::vector<Value> swept = stablehlo::ForLoop(
              sb, 0, n * (n - 1) / 2,
              {carried[0], carried[1], carried[2], rotated_any},
              [](FunctionBuilder& rb, Value t, std::span<const Value> c) {
                Value a = c[0], v = c[1], pairs = c[2];
                Value p = PairEntry(rb, pairs, t, 0), q = PairEntry(rb, pairs, t, 1);
                Rotation rotation = JacobiRotation(rb, MatrixEntry(rb, a, p, p),
                                                   MatrixEntry(rb, a, q, q),
                                                   MatrixEntry(rb, a, p, q));
                // J^T A J: the columns, then the rows (the columns of the transpose).
                a = RotateColumns(rb, a, p, q, rotation);
                a = MatrixTranspose(rb, RotateColumns(rb, MatrixTranspose(rb, a), p, q, rotation));
                // The rotation zeroes (p, q) in exact arithmetic; store the exact zero.
                Value zero = rb.Constant(a.element_type(), 0.0, {a.dims()[0], 1, 1});
                Value origin = rb.ConstantInt(ElementType::kS32, 0);
                Value rotated_pq = rb.Reshape(rotation.rotated, {a.dims()[0], 1, 1});
                Value old_pq = rb.DynamicSlice(a, {origin, p, q}, {a.dims()[0], 1, 1});
                Value old_qp = rb.DynamicSlice(a, {origin, q, p}, {a.dims()[0], 1, 1});
                a = rb.DynamicUpdateSlice(a, rb.Select(rotated_pq, zero, old_pq), {origin, p, q});
                a = rb.DynamicUpdateSlice(a, rb.Select(rotated_pq, zero, old_qp), {origin, q, p});
                v = RotateColumns(rb, v, p, q, rotation);
                return std::vector<Value>{a, v, pairs, rb.Or(c[3], rotation.rotated)};
              });
          return swept;
        });
    a = out[0];
    vectors = out[1];
  }
  std::vector<Value> sorted = SortColumnsByKeys(b, Diagonal(b, a), {vectors});
  return {sorted[0], sorted[1]};
}

// _linalg_eigh(A, str UPLO="L", bool compute_v=True) -> (eigenvalues, eigenvectors)
std::vector<Value> LinalgEigh(LoweringContext& context, std::span<const Operand> operands) {
  CheckSquare(operands[0], "A", {"linalg.eigh", "linalg_eigh_cpu", "linalg_eigh_cpu"});
  const std::string uplo = operands[1].ivalue.toStringRef();
  TORCH_CHECK(uplo == "L" || uplo == "U" || uplo == "l" || uplo == "u", context.op_name(),
              ": Expected UPLO argument to be 'L' or 'U', but got ", uplo);
  auto& b = context.builder();
  Value a = operands[0].value;
  const std::vector<int64_t> batch = BatchDims(a);
  // Only the named triangle is read: mirror it onto the other one.
  const bool lower = uplo == "L" || uplo == "l";
  Value flat = FlattenBatch(b, a);
  Value triangle = KeepTriangle(b, flat, lower);
  Value symmetric = b.Add(triangle, MatrixTranspose(b, KeepTriangle(b, flat, lower, lower ? -1 : 1)));
  auto [values, vectors] = SymmetricEigen(b, symmetric);
  Value eigenvectors = context.Bool(operands[2]) ? UnflattenBatch(b, vectors, batch)
                                                  : b.Constant(a.element_type(), 0.0, {0});
  return {UnflattenBatch(b, values, batch), eigenvectors};
}
TORCH_TPU_LOWERING(LinalgEigh, "aten::_linalg_eigh", "aten::_linalg_eigh.eigenvalues");

}  // namespace

namespace linalg {
std::pair<Value, Value> OneSidedJacobi(FunctionBuilder& b, Value w) {
  const int64_t batch = w.dims()[0], n = w.dims()[2];
  Value v = Eye(b, w.element_type(), {batch, n, n});
  if (n < 2 || IsEmpty(w)) return {w, v};
  std::vector<Value> out = JacobiSweeps(
      b, {w, v, PairTable(b, n)},
      [n, batch](FunctionBuilder& sb, std::span<const Value> carried) {
        Value rotated_any = sb.Constant(ElementType::kPred, 0.0, {batch});
        return stablehlo::ForLoop(
            sb, 0, n * (n - 1) / 2, {carried[0], carried[1], carried[2], rotated_any},
            [](FunctionBuilder& rb, Value t, std::span<const Value> c) {
              Value w = c[0], v = c[1], pairs = c[2];
              Value p = PairEntry(rb, pairs, t, 0), q = PairEntry(rb, pairs, t, 1);
              Value wp = DynamicColumn(rb, w, p), wq = DynamicColumn(rb, w, q);
              Rotation rotation = JacobiRotation(rb, Sum(rb, rb.Multiply(wp, wp), {1}),
                                                 Sum(rb, rb.Multiply(wq, wq), {1}),
                                                 Sum(rb, rb.Multiply(wp, wq), {1}));
              return std::vector<Value>{RotateColumns(rb, w, p, q, rotation),
                                        RotateColumns(rb, v, p, q, rotation), pairs,
                                        rb.Or(c[3], rotation.rotated)};
            });
      });
  return {out[0], out[1]};
}

}  // namespace linalg

namespace {

struct Svd {
  Value u, s, vh;
};

// SVD of [B, m, n] with m >= n: s [B, n] descending; u [B, m, m or n], vh [B, n, n].
Svd TallSvd(FunctionBuilder& b, Value a, bool full_matrices, bool compute_uv) {
  const int64_t batch = a.dims()[0], m = a.dims()[1], n = a.dims()[2];
  auto [w, v] = OneSidedJacobi(b, a);
  Value norms = b.Sqrt(Sum(b, b.Multiply(w, w), {1}));
  std::vector<Value> sorted = SortColumnsByKeys(b, b.Negate(norms), {w, v});
  Svd result{Value(), b.Negate(sorted[0]), MatrixTranspose(b, sorted[2])};
  if (!compute_uv) return result;
  // The columns of w are orthogonal with norms s; a Householder QR of w gives them normalized
  // (up to the signs of R's diagonal) and completes them to an orthonormal basis, also where s
  // is zero.
  auto [packed, taus] = Geqrf(b, sorted[1]);
  Value q = HouseholderProduct(b, packed, taus, full_matrices ? m : n);
  Value r_diagonal = Diagonal(b, packed);  // [B, n]
  Value flip = b.Compare(r_diagonal, b.Constant(a.element_type(), 0.0, r_diagonal.dims()),
                         Direction::kLt);
  Value signs = b.Select(flip, b.Constant(a.element_type(), -1.0, r_diagonal.dims()),
                         b.Constant(a.element_type(), 1.0, r_diagonal.dims()));
  const int64_t columns = q.dims()[2];
  // Pad the signs with ones for the completing columns.
  if (columns > n) {
    signs = b.Concatenate({signs, b.Constant(a.element_type(), 1.0, {batch, columns - n})}, 1);
  }
  result.u = b.Multiply(q, b.BroadcastInDim(signs, q.dims(), {0, 2}));
  return result;
}

// _linalg_svd(A, bool full_matrices=False, bool compute_uv=False, *, str? driver=None)
//   -> (U, S, Vh); without compute_uv, U and Vh are empty [0] tensors, as on CPU.
std::vector<Value> LinalgSvd(LoweringContext& context, std::span<const Operand> operands) {
  CheckLinalgInput(operands[0], "A", {"linalg.svd", "linalg_svd_cpu"});
  TORCH_CHECK(operands[3].is_none(), context.op_name(),
              ": torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs "
              "with cuSOLVER backend.");
  auto& b = context.builder();
  Value a = operands[0].value;
  const bool full_matrices = context.Bool(operands[1]), compute_uv = context.Bool(operands[2]);
  const std::vector<int64_t> batch = BatchDims(a);
  const int64_t m = a.dims()[a.rank() - 2], n = a.dims().back(), k = std::min(m, n);
  Value flat = FlattenBatch(b, a);
  const int64_t count = flat.dims()[0];
  Value empty = b.Constant(a.element_type(), 0.0, {0});
  if (k == 0) {
    // No singular values; the bases are the identity (full) or have no columns.
    Value s = UnflattenBatch(b, b.Constant(a.element_type(), 0.0, {count, 0}), batch);
    if (!compute_uv) return {empty, s, empty};
    Value u = Eye(b, a.element_type(), {count, m, full_matrices ? m : 0});
    Value vh = Eye(b, a.element_type(), {count, full_matrices ? n : 0, n});
    return {UnflattenBatch(b, u, batch), s, UnflattenBatch(b, vh, batch)};
  }
  // A wide matrix is the transpose of a tall one: A^T = U' S V'^T gives U = V', Vh = U'^T.
  const bool wide = m < n;
  Svd svd = TallSvd(b, wide ? MatrixTranspose(b, flat) : flat, full_matrices, compute_uv);
  Value s = UnflattenBatch(b, svd.s, batch);
  if (!compute_uv) return {empty, s, empty};
  Value u = wide ? MatrixTranspose(b, svd.vh) : svd.u;
  Value vh = wide ? MatrixTranspose(b, svd.u) : svd.vh;
  return {UnflattenBatch(b, u, batch), s, UnflattenBatch(b, vh, batch)};
}
TORCH_TPU_LOWERING(LinalgSvd, "aten::_linalg_svd", "aten::_linalg_svd.U");

}  // namespace
}  // namespace torch_tpu::lowering

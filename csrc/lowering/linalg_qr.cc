// QR by Householder reflections as StableHLO loops (one reflector per trip, no LAPACK call):
// geqrf, linalg_householder_product (orgqr), ormqr and linalg_qr.
//
// Conventions are LAPACK's: reflector i is H_i = I - tau_i v_i v_i^T with v_i[i] = 1, v_i zero
// above i and stored below the diagonal of column i; the diagonal holds beta = -sign(alpha) *
// ||(alpha, x)|| (so R's diagonal signs are LAPACK's), and tau = 0 (H = I) when x is zero.
#include <c10/util/Exception.h>

#include <string>

#include "lowering/context.h"
#include "lowering/linalg_common.h"
#include "lowering/linalg_householder.h"
#include "stablehlo/loops.h"

namespace torch_tpu::lowering {
namespace {

using namespace linalg;  // NOLINT: the shared linear-algebra vocabulary of this layer

// v_i from column i of the packed reflectors [B, m, c]: [B, m] with 1 at i, zeros above.
Value ReflectorVector(FunctionBuilder& b, Value reflectors, Value i) {
  Value column = DynamicColumn(b, reflectors, i);
  const std::vector<int64_t>& dims = column.dims();
  Value rows = IndexIota(b, dims, 1), i_splat = Splat(b, i, dims);
  const ElementType type = column.element_type();
  return b.Select(b.Compare(rows, i_splat, Direction::kGt), column,
                  b.Convert(b.Compare(rows, i_splat, Direction::kEq), type));
}

// H x for every column of x [B, m, n] (left) or x H for every row of x [B, m, n] (right), with
// v [B, m] (left) or [B, n] (right) and tau [B]. Elementwise products and sums instead of a dot:
// TPUs run default-precision f32 dots in bf16.
Value ApplyReflector(FunctionBuilder& b, Value x, Value v, Value tau, bool left) {
  const std::vector<int64_t>& dims = x.dims();
  Value v_full = b.BroadcastInDim(v, dims, {0, left ? 1 : 2});
  Value projection = Sum(b, b.Multiply(v_full, x), {left ? 1 : 2});  // [B, n] or [B, m]
  Value scaled = b.Multiply(projection, b.BroadcastInDim(tau, projection.dims(), {0}));
  Value update = b.Multiply(v_full, b.BroadcastInDim(scaled, dims, {0, left ? 2 : 1}));
  return b.Subtract(x, update);
}

// One geqrf step: the reflector that zeroes column k below the diagonal, applied to the columns
// right of k.
std::vector<Value> HouseholderStep(FunctionBuilder& b, Value k, std::span<const Value> carried) {
  Value a = carried[0], taus = carried[1];
  const std::vector<int64_t>& dims = a.dims();
  const int64_t batch = dims[0];
  const ElementType type = a.element_type();
  const std::vector<int64_t> vector_dims = {batch, dims[1]};
  Value column = DynamicColumn(b, a, k);
  Value rows = IndexIota(b, vector_dims, 1), k_rows = Splat(b, k, vector_dims);
  Value below = b.Compare(rows, k_rows, Direction::kGt);
  Value zero_vector = b.Constant(type, 0.0, vector_dims);
  Value x = b.Select(below, column, zero_vector);
  Value alpha = DynamicEntry(b, column, k);
  Value x_norm_squared = Sum(b, b.Multiply(x, x), {1});
  Value norm = b.Sqrt(b.Add(b.Multiply(alpha, alpha), x_norm_squared));
  Value zero = b.Constant(type, 0.0, {batch});
  Value beta = b.Select(b.Compare(alpha, zero, Direction::kGe), b.Negate(norm), norm);
  Value identity = b.Compare(x_norm_squared, zero, Direction::kEq);
  beta = b.Select(identity, alpha, beta);
  Value tau = b.Select(identity, zero, b.Divide(b.Subtract(beta, alpha), beta));
  Value scale = b.Select(identity, zero,
                         b.Divide(b.Constant(type, 1.0, {batch}), b.Subtract(alpha, beta)));
  Value tail = b.Multiply(x, b.BroadcastInDim(scale, vector_dims, {0}));
  Value v = b.Select(below, tail,
                     b.Convert(b.Compare(rows, k_rows, Direction::kEq), type));

  Value reflected = ApplyReflector(b, a, v, tau, /*left=*/true);
  Value columns = IndexIota(b, dims, 2), k_matrix = Splat(b, k, dims);
  Value result = b.Select(b.Compare(columns, k_matrix, Direction::kGt), reflected, a);
  // Column k becomes (beta, v's tail): rows above k keep their values.
  Value new_column = b.Select(below, tail,
                              b.Select(b.Compare(rows, k_rows, Direction::kEq),
                                       b.BroadcastInDim(beta, vector_dims, {0}), column));
  result = b.Select(b.Compare(columns, k_matrix, Direction::kEq),
                    b.BroadcastInDim(new_column, dims, {0, 1}), result);
  const std::vector<int64_t>& tau_dims = taus.dims();
  taus = b.Select(b.Compare(IndexIota(b, tau_dims, 1), Splat(b, k, tau_dims), Direction::kEq),
                  b.BroadcastInDim(tau, tau_dims, {0}), taus);
  return {result, taus};
}

// Applies H_0 ... H_{k-1} (k = tau's length) to x: from the left (x [B, m, n], reflectors
// [B, m, c]) or the right (x [B, m, n], reflectors [B, n, c]); `descending` applies H_{k-1}
// first.
Value ApplyReflectors(FunctionBuilder& b, Value reflectors, Value taus, Value x, bool left,
                      bool descending) {
  const int64_t count = taus.dims()[1];
  if (IsEmpty(x) || count == 0) return x;
  return stablehlo::ForLoop(
      b, 0, count, {x, reflectors, taus},
      [count, left, descending](FunctionBuilder& body, Value t, std::span<const Value> carried) {
        Value i = descending
                      ? body.Subtract(body.ConstantInt(ElementType::kS32, count - 1), t)
                      : t;
        Value v = ReflectorVector(body, carried[1], i);
        Value tau = DynamicEntry(body, carried[2], i);
        return std::vector<Value>{ApplyReflector(body, carried[0], v, tau, left), carried[1],
                                  carried[2]};
      })[0];
}

}  // namespace

namespace linalg {

// geqrf of [B, m, n]: (packed reflectors and R, tau [B, min(m, n)]).
std::pair<Value, Value> Geqrf(FunctionBuilder& b, Value a) {
  const auto& dims = a.dims();
  const int64_t steps = std::min(dims[1], dims[2]);
  Value taus = b.Constant(a.element_type(), 0.0, {dims[0], steps});
  if (IsEmpty(a)) return {a, taus};
  std::vector<Value> out = stablehlo::ForLoop(b, 0, steps, {a, taus}, HouseholderStep);
  return {out[0], out[1]};
}

// Q = H_0 ... H_{k-1} restricted to its first `columns` columns: [B, m, columns].
Value HouseholderProduct(FunctionBuilder& b, Value reflectors, Value taus, int64_t columns) {
  const auto& dims = reflectors.dims();
  Value q = Eye(b, reflectors.element_type(), {dims[0], dims[1], columns});
  return ApplyReflectors(b, reflectors, taus, q, /*left=*/true, /*descending=*/true);
}

}  // namespace linalg

namespace {

// geqrf(self) -> (a, tau)
std::vector<Value> GeqrfOp(LoweringContext& context, std::span<const Operand> operands) {
  CheckLinalgInput(context, operands[0], "input");
  auto& b = context.builder();
  Value a = operands[0].value;
  const std::vector<int64_t> batch = BatchDims(a);
  auto [packed, taus] = Geqrf(b, FlattenBatch(b, a));
  return {b.Reshape(packed, a.dims()), UnflattenBatch(b, taus, batch)};
}
TORCH_TPU_LOWERING(GeqrfOp, "aten::geqrf", "aten::geqrf.a");

// linalg_householder_product(input, tau) -> Q [..., m, n]
std::vector<Value> LinalgHouseholderProduct(LoweringContext& context,
                                            std::span<const Operand> operands) {
  CheckLinalgInput(context, operands[0], "input");
  Value input = operands[0].value, tau = operands[1].value;
  const int64_t m = input.dims()[input.rank() - 2], n = input.dims().back();
  TORCH_CHECK(m >= n, context.op_name(),
              ": torch.linalg.householder_product: input.shape[-2] must be greater than or equal "
              "to input.shape[-1]");
  TORCH_CHECK(tau.rank() >= 1 && tau.dims().back() <= n, context.op_name(),
              ": torch.linalg.householder_product: input.shape[-1] must be greater than or equal "
              "to tau.shape[-1]");
  TORCH_CHECK(tau.rank() == input.rank() - 1, context.op_name(),
              ": torch.linalg.householder_product: Expected tau to have one dimension less than "
              "input, but got tau.ndim equal to ", tau.rank(), " and input.ndim is equal to ",
              input.rank());
  TORCH_CHECK(operands[0].dtype == operands[1].dtype, context.op_name(),
              ": torch.linalg.householder_product: tau dtype ", c10::toString(operands[1].dtype),
              " does not match input dtype ", c10::toString(operands[0].dtype));
  auto& b = context.builder();
  const std::vector<int64_t> batch = BatchDims(input);
  TORCH_CHECK(std::vector<int64_t>(tau.dims().begin(), tau.dims().end() - 1) == batch,
              context.op_name(), ": torch.linalg.householder_product: Expected batch dimensions of "
              "tau to be equal to input.shape[:-2]");
  Value reflectors = FlattenBatch(b, input);
  Value taus = b.Reshape(tau, {reflectors.dims()[0], tau.dims().back()});
  return {UnflattenBatch(b, HouseholderProduct(b, reflectors, taus, n), batch)};
}
TORCH_TPU_LOWERING(LinalgHouseholderProduct, "aten::linalg_householder_product",
                   "aten::linalg_householder_product.out");

// ormqr(self, input2 (tau), input3 (C), bool left=True, bool transpose=False): Q C, Q^T C, C Q
// or C Q^T with Q = H_0 ... H_{k-1} from geqrf's packed reflectors.
std::vector<Value> Ormqr(LoweringContext& context, std::span<const Operand> operands) {
  CheckLinalgInput(context, operands[0], "input");
  CheckLinalgInput(context, operands[2], "other");
  Value input = operands[0].value, tau = operands[1].value, other = operands[2].value;
  const bool left = context.Bool(operands[3]), transpose = context.Bool(operands[4]);
  const int64_t side = other.dims()[other.rank() - (left ? 2 : 1)];
  TORCH_CHECK(input.dims()[input.rank() - 2] == side, context.op_name(),
              ": torch.ormqr: input.shape[-2] must be equal to other.shape[",
              left ? "-2" : "-1", "]");
  TORCH_CHECK(tau.rank() == input.rank() - 1 && tau.dims().back() <= input.dims().back(),
              context.op_name(), ": torch.ormqr: tau.shape[-1] must be less than or equal to "
              "input.shape[-1] and tau must have one dimension less than input");
  TORCH_CHECK(operands[0].dtype == operands[1].dtype && operands[0].dtype == operands[2].dtype,
              context.op_name(), ": torch.ormqr: input, tau and other must have the same dtype");
  auto& b = context.builder();
  const std::vector<int64_t> batch = BatchDims(other);
  TORCH_CHECK(BatchDims(input) == batch, context.op_name(),
              ": torch.ormqr: Expected batch dimensions of input and other to be equal");
  Value reflectors = FlattenBatch(b, input);
  Value taus = b.Reshape(tau, {reflectors.dims()[0], tau.dims().back()});
  const bool descending = left != transpose;
  Value result = ApplyReflectors(b, reflectors, taus, FlattenBatch(b, other), left, descending);
  return {b.Reshape(result, other.dims())};
}
TORCH_TPU_LOWERING(Ormqr, "aten::ormqr", "aten::ormqr.out");

// linalg_qr(A, str mode='reduced') -> (Q, R)
std::vector<Value> LinalgQr(LoweringContext& context, std::span<const Operand> operands) {
  CheckLinalgInput(operands[0], "A", {"linalg.qr", "geqrf_cpu"});
  const std::string mode = operands[1].ivalue.toStringRef();
  TORCH_CHECK(mode == "reduced" || mode == "complete" || mode == "r", context.op_name(),
              ": qr received unrecognized mode '", mode,
              "' but expected one of 'reduced' (default), 'r', or 'complete'");
  auto& b = context.builder();
  Value a = operands[0].value;
  const std::vector<int64_t> batch = BatchDims(a);
  const int64_t m = a.dims()[a.rank() - 2], n = a.dims().back(), k = std::min(m, n);
  auto [packed, taus] = Geqrf(b, FlattenBatch(b, a));
  const int64_t count = packed.dims()[0];
  const bool complete = mode == "complete" && m > n;
  Value r = KeepTriangle(b, complete ? packed : b.Slice(packed, {0, 0, 0}, {count, k, n}, {1, 1, 1}),
                         /*lower=*/false);
  Value q = b.Constant(a.element_type(), 0.0, {0});
  if (mode != "r") {
    q = UnflattenBatch(b, HouseholderProduct(b, packed, taus, complete ? m : k), batch);
  }
  return {q, UnflattenBatch(b, r, batch)};
}
TORCH_TPU_LOWERING(LinalgQr, "aten::linalg_qr", "aten::linalg_qr.out");

}  // namespace
}  // namespace torch_tpu::lowering

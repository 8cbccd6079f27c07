// linalg_lstsq by the singular value decomposition (one-sided Jacobi, no LAPACK call), for every
// driver CPU accepts; what each driver returns follows CPU (LAPACK's gels, gelsy, gelsd, gelss).
//
// A V = W (V orthogonal, the columns of W orthogonal with norms s) gives the minimum-norm
// solution X = V diag(1 / s_i^2) W^T B over the singular values kept (A^T's decomposition for a
// wide A: X = W diag(1 / s_i^2) V^T B). gelsy, gelsd and gelss keep s_i > rcond * s_max and
// return that count as the rank, the minimum-norm solution LAPACK gives for rank-deficient A.
// gels assumes full rank: it keeps every s_i and, like LAPACK's gels, fails on an exactly
// singular A (a zero singular value where LAPACK meets a zero diagonal in R).
#include <ATen/ExpandUtils.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <string>

#include "lowering/context.h"
#include "lowering/linalg_common.h"
#include "lowering/linalg_jacobi.h"

namespace torch_tpu::lowering {
namespace {

using namespace linalg;  // NOLINT: the shared linear-algebra vocabulary of this layer

constexpr char kOpName[] = "torch.linalg.lstsq";

// linalg_lstsq(Tensor self, Tensor b, float? rcond=None, *, str? driver=None)
//   -> (solution, residuals, rank, singular_values)
std::vector<Value> LinalgLstsq(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const Operand &input = operands[0], &other = operands[1];
  const std::string driver = operands[3].is_none() ? "gelsy" : operands[3].ivalue.toStringRef();
  TORCH_CHECK(driver == "gels" || driver == "gelsy" || driver == "gelsd" || driver == "gelss",
              kOpName, ": parameter `driver` should be one of (gels, gelsy, gelsd, gelss)");
  TORCH_CHECK(input.value.rank() >= 2, kOpName, ": input must have at least 2 dimensions.");
  TORCH_CHECK(other.value.rank() >= 1, kOpName, ": other must have at least 1 dimension.");
  TORCH_CHECK(input.dtype == other.dtype, kOpName,
              ": Expected input and other to have the same dtype, but got input's dtype ",
              c10::toString(input.dtype), " and other's dtype ", c10::toString(other.dtype));
  TORCH_CHECK(input.dtype == c10::kFloat || input.dtype == c10::kDouble,
              "This function doesn't handle types other than float and double");
  const int64_t dim_difference = input.value.rank() - other.value.rank();
  TORCH_CHECK(dim_difference == 0 || dim_difference == 1, kOpName,
              ": input.dim() must be greater or equal to other.dim() and (input.dim() - "
              "other.dim()) <= 1");
  // CPU reads `other` as a batch of vectors only when its shape is input's without the last dim.
  const std::vector<int64_t>& other_dims = other.value.dims();
  const bool vector_case = other.value.rank() == 1 ||
                           (dim_difference == 1 && std::equal(other_dims.begin(), other_dims.end(),
                                                              input.value.dims().begin()));
  Value a = input.value, rhs = other.value;
  const int64_t m = a.dims()[a.rank() - 2], n = a.dims().back();
  TORCH_CHECK(rhs.dims()[rhs.rank() - (vector_case ? 1 : 2)] == m, kOpName,
              ": input.size(-2) should match other.size(", vector_case ? -1 : -2, ")");
  if (vector_case) {
    std::vector<int64_t> dims = rhs.dims();
    dims.push_back(1);
    rhs = b.Reshape(rhs, dims);
  }
  // CPU's batch shape: input's batch dims against as many leading dims of `other`, then against
  // the matrix other's own batch dims (at::infer_size raises CPU's exact broadcast error).
  const std::vector<int64_t> other_leading(other_dims.begin(),
                                           other_dims.begin() + (input.value.rank() - 2));
  const std::vector<int64_t> batch =
      at::infer_size(at::infer_size(BatchDims(a), other_leading), BatchDims(rhs));
  auto with_matrix = [&](const Value& v) {
    std::vector<int64_t> dims = batch;
    dims.push_back(v.dims()[v.rank() - 2]);
    dims.push_back(v.dims().back());
    return context.BroadcastTo(v, dims);
  };
  Value a_b = with_matrix(a), rhs_b = with_matrix(rhs);
  Value flat_a = FlattenBatch(b, a_b), flat_rhs = FlattenBatch(b, rhs_b);
  const ElementType type = flat_a.element_type();
  const int64_t count = flat_a.dims()[0], k = flat_rhs.dims()[2], rank_bound = std::min(m, n);
  const bool keeps_rank = driver != "gels";

  Value solution, singular_values, rank;
  if (rank_bound == 0 || count == 0 || k == 0) {
    solution = b.Constant(type, 0.0, {count, n, k});
    singular_values = b.Constant(type, 0.0, {count, rank_bound});
    rank = b.ConstantInt(ElementType::kS64, 0, {count});
  } else {
    const bool wide = m < n;
    auto [w, v] = OneSidedJacobi(b, wide ? MatrixTranspose(b, flat_a) : flat_a);
    Value squares = Sum(b, b.Multiply(w, w), {1});  // s_i^2, [count, rank_bound]
    Value s = b.Sqrt(squares);
    Value largest = b.Reduce({s}, {b.Constant(type, 0.0)}, {1},
                             [](FunctionBuilder& body, std::span<const Value> args) {
                               return std::vector<Value>{body.Maximum(args[0], args[1])};
                             })[0];
    Value kept;
    if (keeps_rank) {
      Value rcond = operands[2].is_none()
                        ? b.Constant(type, Epsilon(type) * static_cast<double>(std::max(m, n)))
                        : (operands[2].is_value() ? context.Convert(operands[2].value, input.dtype)
                                                  : b.Constant(type, context.Double(operands[2])));
      Value threshold = b.Multiply(b.BroadcastInDim(rcond, {count}, {}), largest);
      kept = b.Compare(s, b.BroadcastInDim(threshold, s.dims(), {0}), Direction::kGt);
      rank = Sum(b, b.Convert(kept, ElementType::kS64), {1});
    } else {
      Value zero = b.Constant(type, 0.0, s.dims());
      context.CheckNotViolated(
          Any(b, b.Compare(s, zero, Direction::kEq)),
          std::string(kOpName) +
              ": The least squares solution could not be computed because the input matrix "
              "does not have full rank");
      kept = b.Compare(s, zero, Direction::kNe);
    }
    Value inverse_squares = b.Select(kept, b.Divide(b.Constant(type, 1.0, squares.dims()), squares),
                                     b.Constant(type, 0.0, squares.dims()));
    // Tall: X = V diag(1/s^2) W^T B. Wide (A^T V = W): X = W diag(1/s^2) V^T B.
    Value left = wide ? w : v, right = wide ? v : w;
    Value projected = BatchMatmul(b, MatrixTranspose(b, right), flat_rhs);  // [count, r, k]
    Value scaled =
        b.Multiply(projected, b.BroadcastInDim(inverse_squares, projected.dims(), {0, 1}));
    solution = BatchMatmul(b, left, scaled);
    // Jacobi leaves the singular values unsorted; LAPACK returns them descending.
    singular_values = b.Negate(
        b.Sort({b.Negate(s)}, 1, true, [](FunctionBuilder& body, std::span<const Value> args) {
          return std::vector<Value>{body.Compare(args[0], args[1], Direction::kLt)};
        })[0]);
  }

  Value result = UnflattenBatch(b, solution, batch);
  // CPU returns the residuals ||A X - B||^2 per column for tall A with every driver but gelsy.
  Value residuals = b.Constant(type, 0.0, {0});
  if (m > n && driver != "gelsy") {
    Value difference = b.Subtract(BatchMatmul(b, flat_a, solution), flat_rhs);
    residuals = Sum(b, b.Multiply(difference, difference), {1});  // [count, k]
    // CPU keeps the trailing 1 of a vector right-hand side here.
    residuals = UnflattenBatch(b, residuals, batch);
  }
  if (vector_case) {
    std::vector<int64_t> dims = batch;
    dims.push_back(n);
    result = b.Reshape(result, dims);
  }
  // CPU reports rank and singular values per input matrix, over input's own batch dims: every
  // broadcast copy has the same ones, so the first copy of each is kept.
  const std::vector<int64_t> input_batch = BatchDims(input.value);
  auto per_input_matrix = [&](Value x) {
    x = UnflattenBatch(b, x, batch);
    std::vector<int64_t> limits = x.dims();
    const size_t offset = batch.size() - input_batch.size();
    for (size_t i = 0; i < batch.size(); ++i) {
      if (i < offset || input_batch[i - offset] == 1) limits[i] = std::min<int64_t>(limits[i], 1);
    }
    x = b.Slice(x, std::vector<int64_t>(x.rank(), 0), limits, std::vector<int64_t>(x.rank(), 1));
    std::vector<int64_t> dims = input_batch;
    dims.insert(dims.end(), x.dims().begin() + batch.size(), x.dims().end());
    return b.Reshape(x, dims);
  };
  Value rank_out = keeps_rank ? per_input_matrix(b.Reshape(rank, {count, 1}))
                              : b.ConstantInt(ElementType::kS64, 0, {0});
  if (keeps_rank) rank_out = b.Reshape(rank_out, input_batch);
  Value singular_out = (driver == "gelsd" || driver == "gelss") ? per_input_matrix(singular_values)
                                                                : b.Constant(type, 0.0, {0});
  return {result, residuals, rank_out, singular_out};
}
TORCH_TPU_LOWERING(LinalgLstsq, "aten::linalg_lstsq", "aten::linalg_lstsq.out");

}  // namespace
}  // namespace torch_tpu::lowering

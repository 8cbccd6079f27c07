// p-norm distances between rows: _cdist_forward (every row of x1 against every row of x2, batched),
// _pdist_forward (every pair i < j of one matrix's rows) and their gradients, with CPU's formulas
// for p = 0, 1, 2, inf and general p (the gradient of each case as CPU defines it where the norm
// is not differentiable: zero where the distance is zero).
#include <c10/util/Exception.h>

#include <cmath>

#include "lowering/context.h"
#include "lowering/opmath.h"
#include "lowering/reduction_ops.h"

namespace torch_tpu::lowering {
namespace {

Value PowerOf(FunctionBuilder& b, Value x, double exponent) {
  return b.Power(x, FullLike(b, exponent, x));
}

// The p-norm over the last dim of `diff` (the row differences), as CPU accumulates it.
Value NormOfDifferences(LoweringContext& context, Value diff, double p) {
  auto& b = context.builder();
  const int64_t last = diff.rank() - 1;
  Value magnitude = b.Abs(diff);
  auto sum = [&](Value x) { return ReduceOver(context, x, {last}, ReduceKind::kSum, false); };
  if (p == 0) return sum(b.Minimum(b.Ceil(magnitude), FullLike(b, 1.0, magnitude)));
  if (p == 1) return sum(magnitude);
  if (p == 2) return b.Sqrt(sum(b.Multiply(magnitude, magnitude)));
  if (std::isinf(p)) return ReduceOver(context, magnitude, {last}, ReduceKind::kMax, false);
  return PowerOf(b, sum(PowerOf(b, magnitude, p)), 1.0 / p);
}

// d dist / d diff times the incoming gradient, elementwise over broadcast diff, dist and grad.
Value DistanceGradient(FunctionBuilder& b, Value diff, Value dist, Value grad, double p) {
  Value zero = FullLike(b, 0.0, diff);
  if (p == 0) return zero;
  Value sign = b.Sign(diff);
  if (p == 1) return b.Multiply(sign, grad);
  Value magnitude = b.Abs(diff);
  if (std::isinf(p)) {
    Value is_max = b.Compare(magnitude, dist, Direction::kEq);
    return b.Select(is_max, b.Multiply(sign, grad), zero);
  }
  Value zero_dist = b.Compare(dist, zero, Direction::kEq);
  Value scaled;
  if (p == 2) {
    scaled = b.Divide(b.Multiply(grad, diff), dist);
  } else if (p < 2) {
    scaled = b.Divide(b.Multiply(b.Multiply(sign, PowerOf(b, magnitude, p - 1)), grad),
                      PowerOf(b, dist, p - 1));
    // |diff|^(p-1) is infinite at 0 for p < 1; CPU takes that term as zero.
    if (p < 1) zero_dist = b.Or(zero_dist, b.Compare(diff, zero, Direction::kEq));
  } else {
    scaled = b.Divide(b.Multiply(b.Multiply(diff, PowerOf(b, magnitude, p - 2)), grad),
                      PowerOf(b, dist, p - 1));
  }
  return b.Select(zero_dist, zero, scaled);
}

// x1 [..., P, M] and x2 [..., R, M] with their batch dims broadcast to a common shape.
std::pair<Value, Value> BroadcastBatches(LoweringContext& context, Value x1, Value x2) {
  std::vector<int64_t> batch1(x1.dims().begin(), x1.dims().end() - 2);
  std::vector<int64_t> batch2(x2.dims().begin(), x2.dims().end() - 2);
  std::vector<std::vector<int64_t>> batches = {batch1, batch2};
  std::vector<int64_t> batch = context.BroadcastShape(batches);
  auto expand = [&](Value x) {
    std::vector<int64_t> dims = batch;
    dims.insert(dims.end(), x.dims().end() - 2, x.dims().end());
    return context.BroadcastTo(x, dims);
  };
  return {expand(x1), expand(x2)};
}

// x1 - x2 for every pair of rows: [..., P, R, M].
Value RowDifferences(FunctionBuilder& b, Value x1, Value x2) {
  const int64_t rank = x1.rank();
  std::vector<int64_t> dims(x1.dims().begin(), x1.dims().end() - 1);
  dims.push_back(x2.dims()[rank - 2]);
  dims.push_back(x1.dims()[rank - 1]);
  std::vector<int64_t> x1_map, x2_map;
  for (int64_t d = 0; d < rank - 2; ++d) {
    x1_map.push_back(d);
    x2_map.push_back(d);
  }
  x1_map.insert(x1_map.end(), {rank - 2, rank});
  x2_map.insert(x2_map.end(), {rank - 1, rank});
  return b.Subtract(b.BroadcastInDim(x1, dims, x1_map), b.BroadcastInDim(x2, dims, x2_map));
}

// ||x1_i||^2 + ||x2_j||^2 - 2 x1_i.x2_j as one product of padded rows, clamped at zero, then
// sqrt: CPU's matrix-product form of the euclidean distance (faster, less exact).
Value EuclideanByProduct(FunctionBuilder& b, Value x1, Value x2) {
  const int64_t rank = x1.rank();
  auto squared_norms = [&](Value x) {
    std::vector<int64_t> dims = x.dims();
    dims.back() = 1;
    Value sum = b.Reduce({b.Multiply(x, x)}, {b.Constant(x.element_type(), 0.0)}, {rank - 1},
                         [](FunctionBuilder& body, std::span<const Value> args) {
                           return std::vector<Value>{body.Add(args[0], args[1])};
                         })[0];
    return b.Reshape(sum, dims);
  };
  Value norms1 = squared_norms(x1), norms2 = squared_norms(x2);
  Value ones1 = FullLike(b, 1.0, norms1), ones2 = FullLike(b, 1.0, norms2);
  Value lhs = b.Concatenate({b.Multiply(x1, FullLike(b, -2.0, x1)), norms1, ones1}, rank - 1);
  Value rhs = b.Concatenate({x2, ones2, norms2}, rank - 1);
  FunctionBuilder::DotDimensions dimensions;
  for (int64_t d = 0; d < rank - 2; ++d) {
    dimensions.lhs_batch.push_back(d);
    dimensions.rhs_batch.push_back(d);
  }
  dimensions.lhs_contracting = {rank - 1};
  dimensions.rhs_contracting = {rank - 1};
  Value product = b.DotGeneral(lhs, rhs, dimensions, {}, FunctionBuilder::Precision::kHighest);
  return b.Sqrt(b.Maximum(product, FullLike(b, 0.0, product)));
}

void CheckDistanceDtype(LoweringContext& context, const char* kernel, c10::ScalarType dtype) {
  CheckKernelDtype(context, dtype == c10::kFloat || dtype == c10::kDouble, kernel, dtype);
}

// _cdist_forward(x1, x2, float p, int? compute_mode)
std::vector<Value> CdistForward(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value x1 = operands[0].value, x2 = operands[1].value;
  const double p = context.Double(operands[2]);
  const int64_t mode = operands[3].is_none() ? 0 : context.Int(operands[3]);
  TORCH_CHECK(x1.rank() >= 2, context.op_name(),
              ": cdist only supports at least 2D tensors, X1 got: ", x1.rank(), "D");
  TORCH_CHECK(x2.rank() >= 2, context.op_name(),
              ": cdist only supports at least 2D tensors, X2 got: ", x2.rank(), "D");
  TORCH_CHECK(x1.dims().back() == x2.dims().back(), context.op_name(),
              ": X1 and X2 must have the same number of columns. X1: ", x1.dims().back(),
              " X2: ", x2.dims().back());
  TORCH_CHECK(c10::isFloatingType(operands[0].dtype), context.op_name(),
              ": cdist only supports floating-point dtypes, X1 got: ", operands[0].dtype);
  TORCH_CHECK(c10::isFloatingType(operands[1].dtype), context.op_name(),
              ": cdist only supports floating-point dtypes, X2 got: ", operands[1].dtype);
  TORCH_CHECK(p >= 0, context.op_name(), ": cdist only supports non-negative p values");
  TORCH_CHECK(mode >= 0 && mode <= 2, context.op_name(), ": possible modes: 0, 1, 2, but was: ",
              mode);
  CheckDistanceDtype(context, "cdist", operands[0].dtype);
  std::tie(x1, x2) = BroadcastBatches(context, x1, x2);
  const int64_t rank = x1.rank();
  const int64_t rows1 = x1.dims()[rank - 2], rows2 = x2.dims()[rank - 2];
  std::vector<int64_t> result_dims(x1.dims().begin(), x1.dims().end() - 1);
  result_dims.push_back(rows2);
  if (x1.dims().back() == 0 || rows1 == 0 || rows2 == 0) {
    return {b.Constant(x1.element_type(), 0.0, result_dims)};
  }
  if (p == 2 && (mode == 1 || (mode == 0 && (rows1 > 25 || rows2 > 25)))) {
    return {EuclideanByProduct(b, x1, x2)};
  }
  return {NormOfDifferences(context, RowDifferences(b, x1, x2), p)};
}
TORCH_TPU_LOWERING(CdistForward, "aten::_cdist_forward", "aten::_cdist_forward.out");

// The gradient with respect to x1 [..., P, M] of distances [..., P, R] to x2's rows, given the
// distances' gradient.
Value CdistGradient(FunctionBuilder& b, Value grad, Value x1, Value x2, Value dist, double p) {
  Value diff = RowDifferences(b, x1, x2);
  const int64_t rank = diff.rank();
  std::vector<int64_t> map;
  for (int64_t d = 0; d < rank - 1; ++d) map.push_back(d);
  Value terms = DistanceGradient(b, diff, b.BroadcastInDim(dist, diff.dims(), map),
                                 b.BroadcastInDim(grad, diff.dims(), map), p);
  return b.Reduce({terms}, {b.Constant(terms.element_type(), 0.0)}, {rank - 2},
                  [](FunctionBuilder& body, std::span<const Value> args) {
                    return std::vector<Value>{body.Add(args[0], args[1])};
                  })[0];
}

// _cdist_backward(grad, x1, x2, float p, cdist): the gradient for x1 with x1's batch dims
// broadcast against x2's (autograd reduces them).
std::vector<Value> CdistBackward(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value grad = operands[0].value, dist = operands[4].value;
  auto [x1, x2] = BroadcastBatches(context, operands[1].value, operands[2].value);
  const double p = context.Double(operands[3]);
  CheckDistanceDtype(context, "cdist_backward", operands[1].dtype);
  if (x1.type().NumElements() == 0 || x2.type().NumElements() == 0) {
    return {b.Constant(x1.element_type(), 0.0, operands[1].value.dims())};
  }
  return {CdistGradient(b, context.Convert(grad, operands[1].dtype), x1, x2,
                        context.Convert(dist, operands[1].dtype), p)};
}
TORCH_TPU_LOWERING(CdistBackward, "aten::_cdist_backward", "aten::_cdist_backward.out");

// Row indices (i, j) of every pair i < j of `n` rows, in pdist's order.
std::pair<std::vector<int64_t>, std::vector<int64_t>> RowPairs(int64_t n) {
  std::vector<int64_t> first, second;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i + 1; j < n; ++j) {
      first.push_back(i);
      second.push_back(j);
    }
  }
  return {first, second};
}

void CheckPdistInput(LoweringContext& context, const Operand& self) {
  TORCH_CHECK(self.value.rank() == 2, context.op_name(),
              ": pdist only supports 2D tensors, got: ", self.value.rank(), "D");
  CheckDistanceDtype(context, "pdist", self.dtype);
}

// _pdist_forward(self, float p=2): [N * (N - 1) / 2] distances of the row pairs i < j.
std::vector<Value> PdistForward(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  CheckPdistInput(context, operands[0]);
  Value self = operands[0].value;
  const double p = context.Double(operands[1]);
  const int64_t n = self.dims()[0], m = self.dims()[1];
  const int64_t pairs = n * (n - 1) / 2;
  if (pairs <= 0 || m == 0) {
    return {b.Constant(self.element_type(), 0.0, {std::max<int64_t>(pairs, 0)})};
  }
  auto [first, second] = RowPairs(n);
  FunctionBuilder::GatherDimensions dimensions;
  dimensions.offset_dims = {1};
  dimensions.collapsed_slice_dims = {0};
  dimensions.start_index_map = {0};
  dimensions.index_vector_dim = 1;
  auto rows = [&](const std::vector<int64_t>& indices) {
    Value at = b.ConstantDenseInt(TensorType{ElementType::kS64, {pairs, 1}}, indices);
    return b.Gather(self, at, dimensions, {1, m});
  };
  return {NormOfDifferences(context, b.Subtract(rows(first), rows(second)), p)};
}
TORCH_TPU_LOWERING(PdistForward, "aten::_pdist_forward", "aten::_pdist_forward.out");

// _pdist_backward(grad, self, float p, pdist): the pair gradients and distances spread into
// symmetric [N, N] matrices make it cdist's gradient of self against itself (the diagonal's zero
// gradient and distance contribute nothing).
std::vector<Value> PdistBackward(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  CheckPdistInput(context, operands[1]);
  Value self = operands[1].value;
  const double p = context.Double(operands[2]);
  const int64_t n = self.dims()[0];
  if (n <= 1 || self.type().NumElements() == 0) {
    return {b.Constant(self.element_type(), 0.0, self.dims())};
  }
  auto [first, second] = RowPairs(n);
  const int64_t pairs = static_cast<int64_t>(first.size());
  std::vector<int64_t> upper(pairs), lower(pairs);
  for (int64_t k = 0; k < pairs; ++k) {
    upper[k] = first[k] * n + second[k];
    lower[k] = second[k] * n + first[k];
  }
  auto symmetric = [&](Value pair_values) {
    Value values = context.Convert(pair_values, operands[1].dtype);
    Value matrix = b.Constant(self.element_type(), 0.0, {n * n});
    for (const auto* positions : {&upper, &lower}) {
      Value at = b.ConstantDenseInt(TensorType{ElementType::kS64, {pairs}}, *positions);
      matrix = b.Scatter1D(matrix, at, values);
    }
    return b.Reshape(matrix, {n, n});
  };
  return {CdistGradient(b, symmetric(operands[0].value), self, self, symmetric(operands[3].value),
                        p)};
}
TORCH_TPU_LOWERING(PdistBackward, "aten::_pdist_backward", "aten::_pdist_backward.out");

}  // namespace
}  // namespace torch_tpu::lowering

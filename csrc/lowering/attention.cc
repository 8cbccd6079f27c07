// Scaled dot-product attention as one computation: the device's "overrideable" SDPA backend
// (aten/attention_kernels.cc routes F.scaled_dot_product_attention here). The forward returns the
// output and each query row's log-sum-exp of its scores; the backward recomputes the
// probabilities from those, so a training step keeps (B, H, L) numbers per attention instead of
// the (B, H, L, S) probabilities (and the head-expanded keys and values) PyTorch's math path
// saves. Grouped-query attention (fewer key/value heads than query heads) groups the query heads
// over each key/value head inside the products; keys and values are never repeated.
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>

#include "lowering/context.h"
#include "lowering/matmul_precision.h"
#include "lowering/reduction_ops.h"

namespace torch_tpu::lowering {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// The attention's shapes, with query heads grouped over the key/value heads:
// query (B, Hkv, G, L, E), key (B, Hkv, S, E), value (B, Hkv, S, Ev), scores (B, Hkv, G, L, S).
struct AttentionShapes {
  bool batched = true;  // 4-d operands; 3-d ones (H, L, E) are a batch of one
  int64_t batch = 1, kv_heads = 1, groups = 1, queries = 0, keys = 0, head = 0, value_head = 0;

  std::vector<int64_t> Grouped(int64_t last) const {
    return {batch, kv_heads, groups, queries, last};
  }
  std::vector<int64_t> Scores() const { return Grouped(keys); }
  // PyTorch's layout of a per-query-head result: (B, Hq, L, last), or (Hq, L, last).
  std::vector<int64_t> Ungrouped(std::vector<int64_t> trailing) const {
    std::vector<int64_t> dims;
    if (batched) dims.push_back(batch);
    dims.push_back(kv_heads * groups);
    dims.insert(dims.end(), trailing.begin(), trailing.end());
    return dims;
  }
};

AttentionShapes ShapesOf(LoweringContext& context, const Value& query, const Value& key,
                         const Value& value) {
  const int64_t rank = query.rank();
  TORCH_CHECK((rank == 3 || rank == 4) && key.rank() == rank && value.rank() == rank,
              context.op_name(), ": query, key and value must all be 3-D or all 4-D, got ",
              query.rank(), "-D, ", key.rank(), "-D and ", value.rank(), "-D");
  AttentionShapes shapes;
  shapes.batched = rank == 4;
  const auto& q = query.dims();
  const auto& k = key.dims();
  const auto& v = value.dims();
  const int64_t o = rank - 3;  // offset of the heads dim
  if (shapes.batched) {
    shapes.batch = q[0];
    TORCH_CHECK(k[0] == q[0] && v[0] == q[0], context.op_name(),
                ": query, key and value must have the same batch size, got ", q[0], ", ", k[0],
                " and ", v[0]);
  }
  const int64_t query_heads = q[o];
  shapes.kv_heads = k[o];
  TORCH_CHECK(v[o] == shapes.kv_heads, context.op_name(),
              ": key and value must have the same number of heads, got ", k[o], " and ", v[o]);
  TORCH_CHECK(shapes.kv_heads > 0 && query_heads % shapes.kv_heads == 0, context.op_name(),
              ": the number of query heads (", query_heads,
              ") must be a multiple of the number of key/value heads (", shapes.kv_heads, ")");
  shapes.groups = query_heads / shapes.kv_heads;
  shapes.queries = q[o + 1];
  shapes.keys = k[o + 1];
  TORCH_CHECK(v[o + 1] == shapes.keys, context.op_name(),
              ": key and value must have the same sequence length, got ", k[o + 1], " and ",
              v[o + 1]);
  shapes.head = q[o + 2];
  TORCH_CHECK(k[o + 2] == shapes.head, context.op_name(),
              ": query and key must have the same embedding size, got ", q[o + 2], " and ",
              k[o + 2]);
  shapes.value_head = v[o + 2];
  return shapes;
}

// (B, Hkv, S, last) for a key or value, in the compute type.
Value KeyValueLayout(LoweringContext& context, const Value& value, c10::ScalarType compute,
                     const AttentionShapes& shapes, int64_t last) {
  return context.builder().Reshape(context.Convert(value, compute),
                                   {shapes.batch, shapes.kv_heads, shapes.keys, last});
}

// A query-head operand (query, output, its gradient) as (B, Hkv, G, L, last).
Value GroupedLayout(LoweringContext& context, const Value& value, c10::ScalarType compute,
                    const AttentionShapes& shapes, int64_t last) {
  return context.builder().Reshape(context.Convert(value, compute), shapes.Grouped(last));
}

// lhs (B, Hkv, ...) x rhs (B, Hkv, ...) over the given contracting dims, batched over B and Hkv.
Value BatchedProduct(LoweringContext& context, const Value& lhs, const Value& rhs,
                     std::vector<int64_t> lhs_contracting, std::vector<int64_t> rhs_contracting,
                     c10::ScalarType dtype) {
  FunctionBuilder::DotDimensions dimensions;
  dimensions.lhs_batch = {0, 1};
  dimensions.rhs_batch = {0, 1};
  dimensions.lhs_contracting = std::move(lhs_contracting);
  dimensions.rhs_contracting = std::move(rhs_contracting);
  return context.builder().DotGeneral(lhs, rhs, dimensions, {}, MatmulPrecisionFor(dtype));
}

double ScaleOf(LoweringContext& context, const Operand& scale, const AttentionShapes& shapes) {
  if (!scale.is_none()) return context.Double(scale);
  return 1.0 / std::sqrt(static_cast<double>(shapes.head));
}

// The scaled scores (B, Hkv, G, L, S) with the bias added and masked positions at -inf: the
// causal mask (query i sees keys j <= i, aligned top-left as PyTorch's), keys at or past
// `key_count` (a runtime scalar when a launch shares its program between key lengths, whose
// padded keys must not take part), and a boolean bias's false positions.
Value MaskedScores(LoweringContext& context, const Value& query, const Value& key,
                   c10::ScalarType compute, c10::ScalarType dtype, const AttentionShapes& shapes,
                   double scale, const Operand& bias, bool is_causal, const Operand& key_count) {
  auto& b = context.builder();
  const std::vector<int64_t> dims = shapes.Scores();
  Value scores = b.Multiply(BatchedProduct(context, query, key, {4}, {3}, dtype),
                            context.Constant(scale, compute, dims));
  Value keep;
  auto restrict_to = [&](Value allowed) { keep = keep.valid() ? b.And(keep, allowed) : allowed; };
  if (!bias.is_none()) {
    const std::vector<int64_t> ungrouped = shapes.Ungrouped({shapes.queries, shapes.keys});
    Value full = context.BroadcastTo(bias.value, ungrouped);
    if (bias.dtype == c10::kBool) {
      restrict_to(b.Reshape(full, dims));
    } else {
      scores = b.Add(scores, b.Reshape(context.Convert(full, compute), dims));
    }
  }
  const TensorType positions{ElementType::kS64, dims};
  if (is_causal) {
    restrict_to(b.Compare(b.Iota(positions, 4), b.Iota(positions, 3), Direction::kLe));
  }
  if (key_count.kind == Operand::Kind::kScalar) {
    Value count = b.BroadcastInDim(context.Convert(key_count.value, c10::kLong), dims, {});
    restrict_to(b.Compare(b.Iota(positions, 4), count, Direction::kLt));
  } else if (!key_count.is_none() && context.Int(key_count) < shapes.keys) {
    restrict_to(b.Compare(b.Iota(positions, 4),
                          context.ConstantInt(context.Int(key_count), c10::kLong, dims),
                          Direction::kLt));
  }
  if (keep.valid()) scores = b.Select(keep, scores, context.Constant(-kInfinity, compute, dims));
  return scores;
}

c10::ScalarType AttentionDtype(LoweringContext& context, std::span<const Operand> operands) {
  const c10::ScalarType dtype = operands[0].dtype;
  TORCH_CHECK(c10::isFloatingType(dtype), context.op_name(),
              ": expected query, key and value of a floating dtype, got ", dtype);
  TORCH_CHECK(operands[1].dtype == dtype && operands[2].dtype == dtype, context.op_name(),
              ": expected query, key and value to have the same dtype, but got query.dtype: ",
              dtype, ", key.dtype: ", operands[1].dtype, " and value.dtype: ", operands[2].dtype);
  return dtype;
}

// torch_tpu::scaled_dot_product_attention(query, key, value, Tensor? attn_bias, bool is_causal,
//   float? scale, key_count) -> (output, logsumexp, philox_seed, philox_offset)
// key_count: a runtime or static int (keys at or past it are masked), or None for all keys.
// Half types compute in float32 and round once, as PyTorch's math path does on CPU; rows with
// every key masked give 0 (as `_safe_softmax`) and a log-sum-exp of -inf.
std::vector<Value> ScaledDotProductAttention(LoweringContext& context,
                                             std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = AttentionDtype(context, operands);
  const c10::ScalarType compute = ComputeDtype(dtype);
  const AttentionShapes shapes =
      ShapesOf(context, operands[0].value, operands[1].value, operands[2].value);
  const double scale = ScaleOf(context, operands[5], shapes);
  Value query = GroupedLayout(context, operands[0].value, compute, shapes, shapes.head);
  Value key = KeyValueLayout(context, operands[1].value, compute, shapes, shapes.head);
  Value value = KeyValueLayout(context, operands[2].value, compute, shapes, shapes.value_head);
  Value scores = MaskedScores(context, query, key, compute, dtype, shapes, scale,
                              operands[3], context.Bool(operands[4]), operands[6]);
  const std::vector<int64_t> rows = shapes.Grouped(1);
  Value maximum = ReduceOver(context, scores, {4}, ReduceKind::kMax, true);
  // A row with every key masked has a maximum of -inf: shift it by 0 so its exponentials are 0.
  Value shift = b.Select(b.Compare(maximum, context.Constant(-kInfinity, compute, rows),
                                   Direction::kEq),
                         context.Constant(0.0, compute, rows), maximum);
  Value weights = b.Exp(b.Subtract(scores, b.BroadcastInDim(b.Reshape(shift, rows),
                                                            shapes.Scores(), {0, 1, 2, 3, 4})));
  Value total = ReduceOver(context, weights, {4}, ReduceKind::kSum, true);
  Value weighted = BatchedProduct(context, weights, value, {4}, {2}, dtype);
  const std::vector<int64_t> out_dims = shapes.Grouped(shapes.value_head);
  Value empty_row = b.Compare(total, context.Constant(0.0, compute, rows), Direction::kEq);
  Value divisor = b.Select(empty_row, context.Constant(1.0, compute, rows), total);
  Value output = b.Divide(weighted, b.BroadcastInDim(divisor, out_dims, {0, 1, 2, 3, 4}));
  Value logsumexp = b.Add(b.Log(total), shift);
  output = context.Convert(
      b.Reshape(output, shapes.Ungrouped({shapes.queries, shapes.value_head})), dtype);
  std::vector<int64_t> lse_dims = {shapes.batch, shapes.kv_heads * shapes.groups, shapes.queries};
  logsumexp = context.Convert(b.Reshape(logsumexp, lse_dims), c10::kFloat);
  // The op's dropout RNG state (philox seed and offset), which autograd saves for the backward:
  // no dropout is drawn here.
  Value unused_state = context.ConstantInt(0, c10::kLong);
  return {output, logsumexp, unused_state, unused_state};
}
TORCH_TPU_LOWERING(ScaledDotProductAttention, "torch_tpu::scaled_dot_product_attention");

// The bias gradient summed down to the bias's own (broadcast) shape.
Value BiasGradient(LoweringContext& context, Value grad, const std::vector<int64_t>& bias_dims) {
  auto& b = context.builder();
  const auto& dims = grad.dims();
  const int64_t lead = static_cast<int64_t>(dims.size() - bias_dims.size());
  std::vector<int64_t> reduced;
  for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
    if (d < lead || (bias_dims[d - lead] == 1 && dims[d] != 1)) reduced.push_back(d);
  }
  return b.Reshape(ReduceOver(context, grad, reduced, ReduceKind::kSum, false), bias_dims);
}

// torch_tpu::scaled_dot_product_attention_backward(grad_out, query, key, value,
//   Tensor? attn_bias, out, logsumexp, bool is_causal, float? scale, key_count,
//   bool[4] grad_input_mask) -> (grad_query, grad_key, grad_value, grad_attn_bias)
// The probabilities are recomputed from the scores and the forward's log-sum-exp. grad_attn_bias
// is empty unless the mask asks for it and the bias is a float tensor.
std::vector<Value> ScaledDotProductAttentionBackward(LoweringContext& context,
                                                     std::span<const Operand> operands) {
  auto& b = context.builder();
  const std::span<const Operand> inputs = operands.subspan(1, 3);
  const c10::ScalarType dtype = AttentionDtype(context, inputs);
  const c10::ScalarType compute = ComputeDtype(dtype);
  const AttentionShapes shapes =
      ShapesOf(context, operands[1].value, operands[2].value, operands[3].value);
  const double scale = ScaleOf(context, operands[8], shapes);
  const Operand& bias = operands[4];
  const auto mask = operands[10].ivalue.toBoolList().vec();
  // The recomputation waits for the incoming gradient: in a program holding a whole backward
  // (compiled, defer-and-fuse) the compiler would otherwise recompute every layer's
  // probabilities up front and keep them all alive until their layer's gradient arrives.
  const std::vector<Value> held = b.OptimizationBarrier(
      {operands[0].value, operands[1].value, operands[2].value, operands[3].value,
       operands[6].value});
  Value query = GroupedLayout(context, held[1], compute, shapes, shapes.head);
  Value key = KeyValueLayout(context, held[2], compute, shapes, shapes.head);
  Value value = KeyValueLayout(context, held[3], compute, shapes, shapes.value_head);
  Value scores = MaskedScores(context, query, key, compute, dtype, shapes, scale, bias,
                              context.Bool(operands[7]), operands[9]);
  const std::vector<int64_t> dims = shapes.Scores();
  const std::vector<int64_t> rows = shapes.Grouped(1);
  Value lse = b.Reshape(context.Convert(held[4], compute), rows);
  // Rows with every key masked (log-sum-exp -inf) have no probabilities.
  Value empty_row = b.Compare(lse, context.Constant(-kInfinity, compute, rows), Direction::kEq);
  Value shift = b.Select(empty_row, context.Constant(0.0, compute, rows), lse);
  Value probabilities = b.Exp(
      b.Subtract(scores, b.BroadcastInDim(shift, dims, {0, 1, 2, 3, 4})));
  probabilities = b.Select(b.BroadcastInDim(empty_row, dims, {0, 1, 2, 3, 4}),
                           context.Constant(0.0, compute, dims), probabilities);
  Value grad_out = GroupedLayout(context, held[0], compute, shapes, shapes.value_head);
  Value out = GroupedLayout(context, operands[5].value, compute, shapes, shapes.value_head);
  // dV = P^T dO, summed over the query heads that share each value head.
  Value grad_value = BatchedProduct(context, probabilities, grad_out, {2, 3}, {2, 3}, dtype);
  Value grad_probabilities = BatchedProduct(context, grad_out, value, {4}, {3}, dtype);
  // dS = P * (dP - rowsum(dO * O)): the softmax's backward, with rowsum(P * dP) from the output.
  Value row_dot = ReduceOver(context, b.Multiply(grad_out, out), {4}, ReduceKind::kSum, true);
  Value grad_scores = b.Multiply(
      probabilities,
      b.Subtract(grad_probabilities, b.BroadcastInDim(row_dot, dims, {0, 1, 2, 3, 4})));
  Value grad_query = b.Multiply(BatchedProduct(context, grad_scores, key, {4}, {2}, dtype),
                                context.Constant(scale, compute, shapes.Grouped(shapes.head)));
  Value grad_key = b.Multiply(
      BatchedProduct(context, grad_scores, query, {2, 3}, {2, 3}, dtype),
      context.Constant(scale, compute, {shapes.batch, shapes.kv_heads, shapes.keys, shapes.head}));
  auto key_layout = [&](Value grad, int64_t last) {
    std::vector<int64_t> out_dims;
    if (shapes.batched) out_dims.push_back(shapes.batch);
    out_dims.insert(out_dims.end(), {shapes.kv_heads, shapes.keys, last});
    return context.Convert(b.Reshape(grad, out_dims), dtype);
  };
  std::vector<Value> results = {
      context.Convert(b.Reshape(grad_query, shapes.Ungrouped({shapes.queries, shapes.head})),
                      dtype),
      key_layout(grad_key, shapes.head), key_layout(grad_value, shapes.value_head)};
  if (mask[3] && !bias.is_none() && bias.dtype != c10::kBool) {
    Value grad_bias = b.Reshape(grad_scores, shapes.Ungrouped({shapes.queries, shapes.keys}));
    results.push_back(context.Convert(BiasGradient(context, grad_bias, bias.value.dims()),
                                      bias.dtype));
  } else {
    results.push_back(context.Constant(0.0, dtype, {0}));
  }
  return results;
}
TORCH_TPU_LOWERING(ScaledDotProductAttentionBackward,
                   "torch_tpu::scaled_dot_product_attention_backward");

}  // namespace
}  // namespace torch_tpu::lowering

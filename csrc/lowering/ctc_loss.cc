// _ctc_loss and its backward: the CTC forward (alpha) and backward (beta) recursions in log space
// over the blank-extended targets, each a stablehlo.while over time steps; all batch entries
// advance together, with masks for their own input and target lengths (static lists, as the
// int[] overloads take them). The log-sum-exp steps follow CPU's formula (the largest term
// factored out, 0 when every term is -inf).
#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>

#include "lowering/context.h"
#include "lowering/opmath.h"

namespace torch_tpu::lowering {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// The static layout of a batch: lengths, the extended labels l'[n, s] (blank at even s, the
// target's (s - 1) / 2-th label at odd s) as indices into the flattened targets, and masks.
struct CtcLayout {
  int64_t time = 0, batch = 0, classes = 0, extended = 0;  // T, N, C, S' = 2 max(L) + 1
  std::vector<int64_t> input_lengths, target_lengths;
  std::vector<int64_t> target_positions;  // [N, S']: flat index into targets (0 where unused)
  std::vector<int64_t> label_is_target;   // [N, S']: 1 at odd s < 2 L_n + 1
  std::vector<int64_t> in_target;         // [N, S']: 1 at s < 2 L_n + 1
};

CtcLayout LayoutOf(LoweringContext& context, const Operand& log_probs, const Operand& targets,
                   const Operand& input_lengths, const Operand& target_lengths, int64_t blank) {
  CtcLayout layout;
  CheckKernelDtype(context, log_probs.dtype == c10::kFloat || log_probs.dtype == c10::kDouble,
                   "ctc_loss_cpu", log_probs.dtype);
  TORCH_CHECK(log_probs.value.rank() == 3, context.op_name(),
              ": ctc_loss: expected log_probs to be a 3-D tensor (T, N, C), got ",
              log_probs.value.rank(), "-D");
  layout.time = log_probs.value.dims()[0];
  layout.batch = log_probs.value.dims()[1];
  layout.classes = log_probs.value.dims()[2];
  TORCH_CHECK(blank >= 0 && blank < layout.classes, context.op_name(),
              ": blank must be in label range");
  layout.input_lengths = context.IntList(input_lengths);
  layout.target_lengths = context.IntList(target_lengths);
  const int64_t n = layout.batch;
  TORCH_CHECK(static_cast<int64_t>(layout.input_lengths.size()) == n, context.op_name(),
              ": input_lengths must be of size batch_size");
  TORCH_CHECK(static_cast<int64_t>(layout.target_lengths.size()) == n, context.op_name(),
              ": target_lengths must be of size batch_size");
  int64_t max_target = 0;
  for (int64_t b = 0; b < n; ++b) {
    TORCH_CHECK(layout.input_lengths[b] >= 0 && layout.input_lengths[b] <= layout.time,
                context.op_name(), ": Expected input_lengths to have value at most ", layout.time,
                ", but got value ", layout.input_lengths[b]);
    TORCH_CHECK(layout.target_lengths[b] >= 0, context.op_name(),
                ": Expected target_lengths to be non-negative, but got value ",
                layout.target_lengths[b]);
    max_target = std::max(max_target, layout.target_lengths[b]);
  }
  const bool padded = targets.value.rank() == 2;
  if (padded) {
    TORCH_CHECK(targets.value.dims()[1] >= max_target, context.op_name(),
                ": Expected tensor to have size at least ", max_target,
                " at dimension 1, but got size ", targets.value.dims()[1], " for argument #2 "
                "'targets'");
  }
  layout.extended = 2 * max_target + 1;
  const int64_t s_count = layout.extended;
  layout.target_positions.assign(n * s_count, 0);
  layout.label_is_target.assign(n * s_count, 0);
  layout.in_target.assign(n * s_count, 0);
  int64_t offset = 0;
  for (int64_t b = 0; b < n; ++b) {
    const int64_t start = padded ? b * targets.value.dims()[1] : offset;
    for (int64_t s = 0; s < 2 * layout.target_lengths[b] + 1; ++s) {
      layout.in_target[b * s_count + s] = 1;
      if (s % 2 == 1) {
        layout.label_is_target[b * s_count + s] = 1;
        layout.target_positions[b * s_count + s] = start + (s - 1) / 2;
      }
    }
    offset += layout.target_lengths[b];
  }
  if (!padded) {
    TORCH_CHECK(targets.value.type().NumElements() >= offset, context.op_name(),
                ": Expected tensor to have size at least ", offset,
                " at dimension 0, but got size ", targets.value.type().NumElements(),
                " for argument #2 'targets'");
  }
  return layout;
}

// Everything a recursion step needs, built once outside the loop.
struct CtcInputs {
  Value labels;          // s64 [N, S']: l'
  Value in_target;       // pred [N, S']
  Value lp_extended;     // [T, N, S']: log_probs at each extended label
  Value input_lengths;   // s64 [N]
  Value target_lengths;  // s64 [N]
};

// Flat indices into log_probs [T, N, C] of (t, n, l'[n, s]) for every (t, n, s): [T, N, S'].
Value ClassPositions(FunctionBuilder& b, Value labels, int64_t time, int64_t classes) {
  const int64_t n = labels.dims()[0], s = labels.dims()[1];
  const std::vector<int64_t> cube = {time, n, s};
  Value time_ids = b.Iota(TensorType{ElementType::kS64, cube}, 0);
  Value batch_ids = b.Iota(TensorType{ElementType::kS64, cube}, 1);
  Value rows = b.Add(b.Multiply(time_ids, b.ConstantInt(ElementType::kS64, n, cube)), batch_ids);
  return b.Add(b.Multiply(rows, b.ConstantInt(ElementType::kS64, classes, cube)),
               b.BroadcastInDim(labels, cube, {1, 2}));
}

CtcInputs InputsOf(LoweringContext& context, const CtcLayout& layout, Value log_probs,
                   Value targets, int64_t blank) {
  auto& b = context.builder();
  const int64_t t = layout.time, n = layout.batch, s = layout.extended, c = layout.classes;
  const TensorType grid{ElementType::kS64, {n, s}};
  Value is_target = b.Compare(b.ConstantDenseInt(grid, layout.label_is_target),
                              b.ConstantInt(ElementType::kS64, 1, {n, s}), Direction::kEq);
  Value blanks = b.ConstantInt(ElementType::kS64, blank, {n, s});
  Value labels = blanks;
  if (targets.type().NumElements() > 0) {
    Value flat_targets = b.Reshape(context.Convert(targets, c10::kLong),
                                   {targets.type().NumElements()});
    Value gathered = b.Gather1D(flat_targets, b.ConstantDenseInt(grid, layout.target_positions));
    labels = b.Select(is_target, gathered, blanks);
  }
  context.CheckIndicesInRange(labels, c, false);
  Value in_target = b.Compare(b.ConstantDenseInt(grid, layout.in_target),
                              b.ConstantInt(ElementType::kS64, 1, {n, s}), Direction::kEq);
  Value lp_extended =
      b.Gather1D(b.Reshape(log_probs, {t * n * c}), ClassPositions(b, labels, t, c));
  const TensorType lengths{ElementType::kS64, {n}};
  return {labels, in_target, lp_extended, b.ConstantDenseInt(lengths, layout.input_lengths),
          b.ConstantDenseInt(lengths, layout.target_lengths)};
}

// The layout and inputs from (log_probs, targets, input_lengths, target_lengths) and blank.
std::pair<CtcLayout, CtcInputs> Prepare(LoweringContext& context,
                                        std::span<const Operand> operands,
                                        const Operand& blank_operand) {
  const int64_t blank = context.Int(blank_operand);
  CtcLayout layout =
      LayoutOf(context, operands[0], operands[1], operands[2], operands[3], blank);
  CtcInputs in = InputsOf(context, layout, operands[0].value, operands[1].value, blank);
  return {std::move(layout), in};
}

Value NegInf(FunctionBuilder& b, Value like) {
  return b.Constant(like.element_type(), kNegInf, like.dims());
}

// x shifted along the last dim by `k` positions (toward higher s when k > 0), -inf filling.
Value Shifted(FunctionBuilder& b, Value x, int64_t k) {
  const int64_t n = x.dims()[0], s = x.dims()[1];
  const int64_t size = std::abs(k);
  if (size >= s) return NegInf(b, x);
  Value fill = b.Constant(x.element_type(), kNegInf, {n, size});
  if (k > 0) return b.Concatenate({fill, b.Slice(x, {0, 0}, {n, s - size}, {1, 1})}, 1);
  return b.Concatenate({b.Slice(x, {0, size}, {n, s}, {1, 1}), fill}, 1);
}

// CPU's log(exp(a) + exp(b) + exp(c)): the largest term factored out, 0 when all are -inf.
Value LogSumExp3(FunctionBuilder& b, Value x, Value y, Value z) {
  Value m = b.Maximum(b.Maximum(x, y), z);
  m = b.Select(b.Compare(m, NegInf(b, m), Direction::kEq), b.Constant(m.element_type(), 0.0,
                                                                        m.dims()),
               m);
  Value sum = b.Add(b.Add(b.Exp(b.Subtract(x, m)), b.Exp(b.Subtract(y, m))),
                    b.Exp(b.Subtract(z, m)));
  return b.Add(b.Log(sum), m);
}

// Whether label s differs from label s - 2 (k = 2) or s + 2 (k = -2): the skip over a blank is
// allowed between different labels only.
Value SkipAllowed(FunctionBuilder& b, Value labels, int64_t k) {
  const int64_t n = labels.dims()[0], s = labels.dims()[1];
  Value none = b.ConstantInt(ElementType::kPred, 0, {n, s});
  if (s <= 2) return none;
  Value other = k > 0 ? b.Concatenate({b.ConstantInt(ElementType::kS64, -1, {n, 2}),
                                       b.Slice(labels, {0, 0}, {n, s - 2}, {1, 1})},
                                      1)
                      : b.Concatenate({b.Slice(labels, {0, 2}, {n, s}, {1, 1}),
                                       b.ConstantInt(ElementType::kS64, -1, {n, 2})},
                                      1);
  return b.Compare(labels, other, Direction::kNe);
}

// The row t of a [T, N, S'] value.
Value RowAt(FunctionBuilder& b, Value cube, Value t) {
  const int64_t n = cube.dims()[1], s = cube.dims()[2];
  Value zero = b.ConstantInt(ElementType::kS64, 0);
  return b.Reshape(b.DynamicSlice(cube, {t, zero, zero}, {1, n, s}), {n, s});
}

Value WithRowAt(FunctionBuilder& b, Value cube, Value row, Value t) {
  const int64_t n = cube.dims()[1], s = cube.dims()[2];
  Value zero = b.ConstantInt(ElementType::kS64, 0);
  return b.DynamicUpdateSlice(cube, b.Reshape(row, {1, n, s}), {t, zero, zero});
}

// Whether each batch entry's time step t is before (kLt) / at the last of (kEq) its input.
Value TimeMask(FunctionBuilder& b, Value t, Value input_lengths, int64_t s, Direction direction,
               int64_t shift) {
  const int64_t n = input_lengths.dims()[0];
  Value limit = b.Subtract(input_lengths, b.ConstantInt(ElementType::kS64, shift, {n}));
  Value at = b.Compare(b.BroadcastInDim(t, {n}, {}), limit, direction);
  return b.BroadcastInDim(at, {n, s}, {0});
}

// log_alpha as [T, N, S'].
Value Alphas(FunctionBuilder& b, const CtcInputs& in) {
  const int64_t t_count = in.lp_extended.dims()[0], n = in.labels.dims()[0];
  const int64_t s = in.labels.dims()[1];
  Value first = RowAt(b, in.lp_extended, b.ConstantInt(ElementType::kS64, 0));
  // At t = 0 only the leading blank and the first label (when there is one) are reachable.
  Value positions = b.Iota(TensorType{ElementType::kS64, {n, s}}, 1);
  Value starts = b.Or(
      b.Compare(positions, b.ConstantInt(ElementType::kS64, 0, {n, s}), Direction::kEq),
      b.And(b.Compare(positions, b.ConstantInt(ElementType::kS64, 1, {n, s}), Direction::kEq),
            b.BroadcastInDim(b.Compare(in.target_lengths, b.ConstantInt(ElementType::kS64, 0, {n}),
                                       Direction::kGt),
                             {n, s}, {0})));
  Value row0 = b.Select(b.And(starts, TimeMask(b, b.ConstantInt(ElementType::kS64, 0),
                                               in.input_lengths, s, Direction::kLt, 0)),
                        first, NegInf(b, first));
  Value all = WithRowAt(b, NegInf(b, in.lp_extended), row0, b.ConstantInt(ElementType::kS64, 0));
  std::vector<Value> initial = {b.ConstantInt(ElementType::kS64, 1),
                                row0,
                                all,
                                in.lp_extended,
                                SkipAllowed(b, in.labels, 2),
                                in.in_target,
                                in.input_lengths};
  auto results = b.While(
      initial,
      [t_count](FunctionBuilder& body, std::span<const Value> args) {
        return std::vector<Value>{
            body.Compare(args[0], body.ConstantInt(ElementType::kS64, t_count), Direction::kLt)};
      },
      [s](FunctionBuilder& body, std::span<const Value> args) {
        const Value &t = args[0], &previous = args[1], &skip = args[4], &in_target = args[5];
        Value lp = RowAt(body, args[3], t);
        Value from_skip = body.Select(skip, Shifted(body, previous, 2), NegInf(body, previous));
        Value alpha = body.Add(LogSumExp3(body, previous, Shifted(body, previous, 1), from_skip),
                               lp);
        Value live = body.And(in_target, TimeMask(body, t, args[6], s, Direction::kLt, 0));
        alpha = body.Select(live, alpha, NegInf(body, alpha));
        return std::vector<Value>{body.Add(t, body.ConstantInt(ElementType::kS64, 1)), alpha,
                                  WithRowAt(body, args[2], alpha, t), args[3], skip, in_target,
                                  args[6]};
      });
  return results[2];
}

// Flat indices into [T, N, S'] of (T_n - 1, n, 2 L_n - back) per batch entry (back 0 or 1).
Value FinalPositions(FunctionBuilder& b, const CtcLayout& layout, int64_t back) {
  std::vector<int64_t> positions(layout.batch);
  for (int64_t n = 0; n < layout.batch; ++n) {
    const int64_t t = std::max<int64_t>(layout.input_lengths[n] - 1, 0);
    const int64_t s = std::max<int64_t>(2 * layout.target_lengths[n] - back, 0);
    positions[n] = (t * layout.batch + n) * layout.extended + s;
  }
  return b.ConstantDenseInt(TensorType{ElementType::kS64, {layout.batch}}, positions);
}

// _ctc_loss(log_probs, targets, int[] input_lengths, int[] target_lengths, int blank=0,
// bool zero_infinity=False) -> (neg_log_likelihood [N], log_alpha [N, T, S'])
std::vector<Value> CtcLoss(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const auto [layout, in] = Prepare(context, operands.subspan(0, 4), operands[4]);
  Value alphas = Alphas(b, in);
  Value flat = b.Reshape(alphas, {alphas.type().NumElements()});
  Value last = b.Gather1D(flat, FinalPositions(b, layout, 0));
  Value before_last = b.Gather1D(flat, FinalPositions(b, layout, 1));
  Value has_target = b.Compare(in.target_lengths,
                               b.ConstantInt(ElementType::kS64, 0, {layout.batch}), Direction::kGt);
  before_last = b.Select(has_target, before_last, NegInf(b, before_last));
  Value likelihood = LogSumExp3(b, last, before_last, NegInf(b, last));
  return {b.Negate(likelihood), b.Transpose(alphas, {1, 0, 2})};
}
TORCH_TPU_LOWERING(CtcLoss, "aten::_ctc_loss", "aten::_ctc_loss.out");

// log_beta as [T, N, S']: from each entry's last time step (its final blank and label) back.
Value Betas(FunctionBuilder& b, const CtcInputs& in) {
  const int64_t t_count = in.lp_extended.dims()[0], n = in.labels.dims()[0];
  const int64_t s = in.labels.dims()[1];
  Value positions = b.Iota(TensorType{ElementType::kS64, {n, s}}, 1);
  Value end = b.BroadcastInDim(
      b.Multiply(in.target_lengths, b.ConstantInt(ElementType::kS64, 2, {n})), {n, s}, {0});
  Value one = b.ConstantInt(ElementType::kS64, 1, {n, s});
  Value finals = b.Or(b.Compare(positions, end, Direction::kEq),
                      b.And(b.Compare(positions, b.Subtract(end, one), Direction::kEq),
                            b.Compare(end, b.ConstantInt(ElementType::kS64, 0, {n, s}),
                                      Direction::kGt)));
  Value empty_row = b.Constant(in.lp_extended.element_type(), kNegInf, {n, s});
  std::vector<Value> initial = {b.ConstantInt(ElementType::kS64, t_count - 1),
                                empty_row,
                                NegInf(b, in.lp_extended),
                                in.lp_extended,
                                SkipAllowed(b, in.labels, -2),
                                in.in_target,
                                in.input_lengths,
                                finals};
  auto results = b.While(
      initial,
      [](FunctionBuilder& body, std::span<const Value> args) {
        return std::vector<Value>{
            body.Compare(args[0], body.ConstantInt(ElementType::kS64, 0), Direction::kGe)};
      },
      [s](FunctionBuilder& body, std::span<const Value> args) {
        const Value &t = args[0], &next = args[1], &skip = args[4], &in_target = args[5];
        Value lp = RowAt(body, args[3], t);
        Value from_skip = body.Select(skip, Shifted(body, next, -2), NegInf(body, next));
        Value beta = body.Add(LogSumExp3(body, next, Shifted(body, next, -1), from_skip), lp);
        beta = body.Select(in_target, beta, NegInf(body, beta));
        Value at_last = TimeMask(body, t, args[6], s, Direction::kEq, 1);
        Value before_last = TimeMask(body, t, args[6], s, Direction::kLt, 1);
        beta = body.Select(at_last, body.Select(args[7], lp, NegInf(body, lp)),
                           body.Select(before_last, beta, NegInf(body, beta)));
        return std::vector<Value>{body.Subtract(t, body.ConstantInt(ElementType::kS64, 1)), beta,
                                  WithRowAt(body, args[2], beta, t), args[3], skip, in_target,
                                  args[6], args[7]};
      });
  return results[2];
}

// _ctc_loss_backward(grad, log_probs, targets, int[] input_lengths, int[] target_lengths,
// neg_log_likelihood, log_alpha, int blank, bool zero_infinity=False): CPU's gradient
// exp(lp) - exp(log(sum of alpha beta over the positions of class c) + nll - lp) per time step
// before each entry's input length, times the entry's output gradient (zero for an infinite loss
// with zero_infinity).
std::vector<Value> CtcLossBackward(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const auto [layout, in] = Prepare(context, operands.subspan(1, 4), operands[7]);
  const int64_t t = layout.time, n = layout.batch, s = layout.extended, c = layout.classes;
  const ElementType type = in.lp_extended.element_type();
  Value alphas = b.Transpose(context.Convert(operands[6].value, operands[1].dtype), {1, 0, 2});
  Value products = b.Add(alphas, Betas(b, in));  // [T, N, S']
  // log(sum over s with l'_s == c of exp(alpha + beta)) per (t, n, c), as two scatters: the
  // largest term per class, then the sum of the terms scaled by it.
  const std::vector<int64_t> cube = {t, n, s};
  Value index = b.Select(b.BroadcastInDim(in.in_target, cube, {1, 2}),
                         ClassPositions(b, in.labels, t, c),
                         b.ConstantInt(ElementType::kS64, t * n * c, cube));
  const int64_t total = t * n * s;
  Value flat_index = b.Reshape(index, {total, 1});
  Value flat_products = b.Reshape(products, {total});
  FunctionBuilder::ScatterDimensions dimensions;
  dimensions.inserted_window_dims = {0};
  dimensions.scatter_dims_to_operand_dims = {0};
  dimensions.index_vector_dim = 1;
  auto scatter = [&](double init, Value updates, bool maximum) {
    return b.Scatter({b.Constant(type, init, {t * n * c})}, flat_index, {updates}, dimensions,
                     [maximum](FunctionBuilder& body, std::span<const Value> args) {
                       return std::vector<Value>{maximum ? body.Maximum(args[0], args[1])
                                                         : body.Add(args[0], args[1])};
                     })[0];
  };
  Value largest = scatter(kNegInf, flat_products, true);
  Value largest_at = b.Gather1D(largest, b.Reshape(flat_index, {total}));
  Value finite = b.Compare(flat_products, NegInf(b, flat_products), Direction::kNe);
  Value scaled = b.Select(finite, b.Exp(b.Subtract(flat_products, largest_at)),
                          b.Constant(type, 0.0, {total}));
  Value sums = scatter(0.0, scaled, false);
  Value log_sums = b.Select(b.Compare(largest, NegInf(b, largest), Direction::kEq),
                            NegInf(b, largest), b.Add(b.Log(sums), largest));
  log_sums = b.Reshape(log_sums, {t, n, c});

  const std::vector<int64_t> dims = {t, n, c};
  Value lp = context.Convert(operands[1].value, operands[1].dtype);
  Value nll = b.BroadcastInDim(context.Convert(operands[5].value, operands[1].dtype), dims, {1});
  Value grad = b.Subtract(b.Exp(lp), b.Exp(b.Subtract(b.Add(log_sums, nll), lp)));
  Value scale = b.BroadcastInDim(context.Convert(operands[0].value, operands[1].dtype), dims, {1});
  grad = b.Multiply(grad, scale);
  Value before_end = b.Compare(b.Iota(TensorType{ElementType::kS64, dims}, 0),
                               b.BroadcastInDim(in.input_lengths, dims, {1}), Direction::kLt);
  if (context.Bool(operands[8])) {
    Value infinite = b.Compare(nll, b.Constant(type, INFINITY, dims), Direction::kEq);
    before_end = b.And(before_end, b.Not(infinite));
  }
  return {b.Select(before_end, grad, b.Constant(type, 0.0, dims))};
}
TORCH_TPU_LOWERING(CtcLossBackward, "aten::_ctc_loss_backward", "aten::_ctc_loss_backward.out");

}  // namespace
}  // namespace torch_tpu::lowering

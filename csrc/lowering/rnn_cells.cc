// The fused LSTM and GRU cells. ATen's RNN code calls these for every non-CPU device
// (CUDA, XPU, PrivateUse1) from nn.LSTM/nn.GRU/LSTMCell/GRUCell; CPU has no kernel for them, so
// they must be lowered. Gates follow CUDA's kernels: the projections and biases are summed,
// half types compute in f32 and round once, and the workspace keeps what the backward needs
// (LSTM: the four activated gates; GRU: r, z, n, hx and the hidden new-gate input).
#include "lowering/context.h"
#include "lowering/dtype.h"
#include "lowering/reduction_ops.h"
#include "lowering/registry.h"

namespace torch_tpu::lowering {
namespace {

// Columns [k * h, (k + 1) * h) of a [batch, parts * h] value.
Value Part(FunctionBuilder& b, Value x, int64_t k, int64_t h) {
  return b.Slice(x, {0, k * h}, {x.dims()[0], (k + 1) * h}, {1, 1});
}

// The `count` equal column blocks of a cell's saved workspace, in the compute dtype.
std::vector<Value> WorkspaceParts(LoweringContext& context, const Operand& workspace,
                                  int64_t count) {
  Value saved = context.Convert(workspace.value, ComputeDtype(workspace.dtype));
  std::vector<Value> parts;
  for (int64_t k = 0; k < count; ++k) {
    parts.push_back(Part(context.builder(), saved, k, saved.dims()[1] / count));
  }
  return parts;
}

Value OneMinus(LoweringContext& context, Value x) {
  return context.builder().Subtract(FullLike(context, 1.0, x), x);
}

// `gates` (+ the optional 1-D `bias`, broadcast over the batch) in the compute dtype.
Value WithBias(LoweringContext& context, Value gates, const Operand& bias, c10::ScalarType compute) {
  gates = context.Convert(gates, compute);
  if (bias.is_none()) return gates;
  return context.builder().Add(gates,
                               context.BroadcastTo(context.Convert(bias.value, compute), gates.dims()));
}

// The batch sum of `grad` ([batch, k]) as the bias gradient when the cell had biases; else an
// empty tensor, which autograd drops with the absent bias.
Value BiasGradient(LoweringContext& context, Value grad, c10::ScalarType dtype, bool has_bias) {
  if (!has_bias) return context.Constant(0.0, dtype, {0});
  return context.Convert(ReduceOver(context, grad, {0}, ReduceKind::kSum, false), dtype);
}

// _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias?, hidden_bias?)
//   -> (hy, cy, workspace); gates are [batch, 4 h] in the order input, forget, cell, output.
std::vector<Value> FusedLstmCell(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = operands[0].dtype;
  const c10::ScalarType compute = ComputeDtype(dtype);
  Value gates = b.Add(WithBias(context, operands[0].value, operands[3], compute),
                      WithBias(context, operands[1].value, operands[4], compute));
  const int64_t h = gates.dims()[1] / 4;
  Value i = b.Logistic(Part(b, gates, 0, h));
  Value f = b.Logistic(Part(b, gates, 1, h));
  Value g = b.Tanh(Part(b, gates, 2, h));
  Value o = b.Logistic(Part(b, gates, 3, h));
  Value cy = b.Add(b.Multiply(f, context.Convert(operands[2].value, compute)), b.Multiply(i, g));
  Value hy = b.Multiply(o, b.Tanh(cy));
  return {context.Convert(hy, dtype), context.Convert(cy, dtype),
          context.Convert(b.Concatenate({i, f, g, o}, 1), dtype)};
}
TORCH_TPU_LOWERING(FusedLstmCell, "aten::_thnn_fused_lstm_cell", "aten::_thnn_fused_lstm_cell.out");

// _thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy, workspace, has_bias)
//   -> (grad_gates, grad_cx, grad_bias)
std::vector<Value> FusedLstmCellBackward(LoweringContext& context,
                                         std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = operands[4].dtype;
  const c10::ScalarType compute = ComputeDtype(dtype);
  const std::vector<Value> gates = WorkspaceParts(context, operands[4], 4);
  Value i = gates[0], f = gates[1], g = gates[2], o = gates[3];
  Value cx = context.Convert(operands[2].value, compute);
  Value tanh_cy = b.Tanh(context.Convert(operands[3].value, compute));
  Value zero = FullLike(context, 0.0, cx);
  Value grad_hy = operands[0].is_none() ? zero : context.Convert(operands[0].value, compute);
  Value grad_cy = operands[1].is_none() ? zero : context.Convert(operands[1].value, compute);
  // d(cy) from both outputs; hy = o * tanh(cy).
  Value grad_c = b.Add(grad_cy, b.Multiply(b.Multiply(grad_hy, o),
                                           OneMinus(context, b.Multiply(tanh_cy, tanh_cy))));
  Value grad_i = b.Multiply(b.Multiply(grad_c, g), b.Multiply(i, OneMinus(context, i)));
  Value grad_f = b.Multiply(b.Multiply(grad_c, cx), b.Multiply(f, OneMinus(context, f)));
  Value grad_g = b.Multiply(b.Multiply(grad_c, i), OneMinus(context, b.Multiply(g, g)));
  Value grad_o = b.Multiply(b.Multiply(grad_hy, tanh_cy), b.Multiply(o, OneMinus(context, o)));
  Value grad_gates = b.Concatenate({grad_i, grad_f, grad_g, grad_o}, 1);
  return {context.Convert(grad_gates, dtype), context.Convert(b.Multiply(grad_c, f), dtype),
          BiasGradient(context, grad_gates, dtype, context.Bool(operands[5]))};
}
TORCH_TPU_LOWERING(FusedLstmCellBackward, "aten::_thnn_fused_lstm_cell_backward_impl",
                   "aten::_thnn_fused_lstm_cell_backward_impl.out");

// _thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias?, hidden_bias?)
//   -> (hy, workspace); gates are [batch, 3 h] in the order reset, update, new.
std::vector<Value> FusedGruCell(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = operands[0].dtype;
  const c10::ScalarType compute = ComputeDtype(dtype);
  Value input_gates = WithBias(context, operands[0].value, operands[3], compute);
  Value hidden_gates = WithBias(context, operands[1].value, operands[4], compute);
  Value hx = context.Convert(operands[2].value, compute);
  const int64_t h = input_gates.dims()[1] / 3;
  Value r = b.Logistic(b.Add(Part(b, input_gates, 0, h), Part(b, hidden_gates, 0, h)));
  Value z = b.Logistic(b.Add(Part(b, input_gates, 1, h), Part(b, hidden_gates, 1, h)));
  Value hidden_new = Part(b, hidden_gates, 2, h);
  Value n = b.Tanh(b.Add(Part(b, input_gates, 2, h), b.Multiply(r, hidden_new)));
  Value hy = b.Add(n, b.Multiply(z, b.Subtract(hx, n)));
  return {context.Convert(hy, dtype),
          context.Convert(b.Concatenate({r, z, n, hx, hidden_new}, 1), dtype)};
}
TORCH_TPU_LOWERING(FusedGruCell, "aten::_thnn_fused_gru_cell", "aten::_thnn_fused_gru_cell.out");

// _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias)
//   -> (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias)
std::vector<Value> FusedGruCellBackward(LoweringContext& context,
                                        std::span<const Operand> operands) {
  auto& b = context.builder();
  const std::vector<Value> saved = WorkspaceParts(context, operands[1], 5);
  Value r = saved[0], z = saved[1], n = saved[2], hx = saved[3], hidden_new = saved[4];
  const c10::ScalarType dtype = operands[1].dtype;
  Value grad_hy = context.Convert(operands[0].value, ComputeDtype(dtype));
  Value grad_n =
      b.Multiply(b.Multiply(grad_hy, OneMinus(context, z)), OneMinus(context, b.Multiply(n, n)));
  Value grad_z =
      b.Multiply(b.Multiply(grad_hy, b.Subtract(hx, n)), b.Multiply(z, OneMinus(context, z)));
  Value grad_r =
      b.Multiply(b.Multiply(grad_n, hidden_new), b.Multiply(r, OneMinus(context, r)));
  Value grad_input = b.Concatenate({grad_r, grad_z, grad_n}, 1);
  Value grad_hidden = b.Concatenate({grad_r, grad_z, b.Multiply(grad_n, r)}, 1);
  const bool has_bias = context.Bool(operands[2]);
  return {context.Convert(grad_input, dtype), context.Convert(grad_hidden, dtype),
          context.Convert(b.Multiply(grad_hy, z), dtype),
          BiasGradient(context, grad_input, dtype, has_bias),
          BiasGradient(context, grad_hidden, dtype, has_bias)};
}
TORCH_TPU_LOWERING(FusedGruCellBackward, "aten::_thnn_fused_gru_cell_backward",
                   "aten::_thnn_fused_gru_cell_backward.out");

}  // namespace
}  // namespace torch_tpu::lowering

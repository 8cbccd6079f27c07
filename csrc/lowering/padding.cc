// Reflection and replication padding (nn.functional.pad modes "reflect" and "replicate") and their
// backward: slices, reversals and concatenation per padded dim, no gathers.
#include <c10/util/Exception.h>

#include <string>

#include "lowering/context.h"
#include "lowering/reduction_ops.h"

namespace torch_tpu::lowering {
namespace {

using stablehlo::Value;

// x[start:limit] along `dim`.
Value SliceDim(LoweringContext& context, Value x, int64_t dim, int64_t start, int64_t limit) {
  std::vector<int64_t> starts(x.rank(), 0), limits = x.dims(), steps(x.rank(), 1);
  starts[dim] = start;
  limits[dim] = limit;
  return context.builder().Slice(x, starts, limits, steps);
}

// Zero padding of `low` and `high` elements along `dim`.
Value ZeroPadDim(LoweringContext& context, Value x, int64_t dim, int64_t low, int64_t high) {
  if (low == 0 && high == 0) return x;
  std::vector<int64_t> lows(x.rank(), 0), highs(x.rank(), 0), interior(x.rank(), 0);
  lows[dim] = low;
  highs[dim] = high;
  auto& b = context.builder();
  return b.Pad(x, b.Constant(x.element_type(), 0.0), lows, highs, interior);
}

// The `size` edge values next to one end of `x` along `dim`: mirrored without repeating the end
// element (reflect) or the end element repeated (replicate).
Value Border(LoweringContext& context, Value x, int64_t dim, int64_t size, bool at_start,
             bool reflect) {
  const int64_t n = x.dims()[dim];
  if (reflect) {
    Value piece = at_start ? SliceDim(context, x, dim, 1, size + 1)
                           : SliceDim(context, x, dim, n - 1 - size, n - 1);
    return context.builder().Reverse(piece, {dim});
  }
  Value edge = at_start ? SliceDim(context, x, dim, 0, 1) : SliceDim(context, x, dim, n - 1, n);
  std::vector<int64_t> dims = x.dims();
  dims[dim] = size;
  return context.BroadcastTo(edge, dims);
}

// Pads one dim; negative amounts crop, as in PyTorch.
Value PadDim(LoweringContext& context, Value x, int64_t dim, int64_t low, int64_t high,
             bool reflect) {
  if (low < 0) x = SliceDim(context, x, dim, -low, x.dims()[dim]);
  if (high < 0) x = SliceDim(context, x, dim, 0, x.dims()[dim] + high);
  std::vector<Value> parts;
  if (low > 0) parts.push_back(Border(context, x, dim, low, true, reflect));
  parts.push_back(x);
  if (high > 0) parts.push_back(Border(context, x, dim, high, false, reflect));
  return parts.size() == 1 ? x : context.builder().Concatenate(parts, dim);
}

// The gradient of PadDim: every padded element's gradient flows back to the element it copied.
Value PadDimBackward(LoweringContext& context, Value grad, int64_t dim, int64_t size, int64_t low,
                     int64_t high, bool reflect) {
  auto& b = context.builder();
  const int64_t kept = size - std::max<int64_t>(0, -low) - std::max<int64_t>(0, -high);
  const int64_t lo = std::max<int64_t>(0, low), hi = std::max<int64_t>(0, high);
  Value result = SliceDim(context, grad, dim, lo, lo + kept);
  auto fold = [&](Value piece, bool at_start) {
    const int64_t count = piece.dims()[dim];
    if (reflect) {
      // Mirrored back onto [1, count] (start) or [kept - 1 - count, kept - 1) (end).
      Value mirrored = b.Reverse(piece, {dim});
      return at_start ? ZeroPadDim(context, mirrored, dim, 1, kept - 1 - count)
                      : ZeroPadDim(context, mirrored, dim, kept - 1 - count, 1);
    }
    Value total = ReduceOver(context, piece, {dim}, ReduceKind::kSum, /*keepdim=*/true);
    return at_start ? ZeroPadDim(context, total, dim, 0, kept - 1)
                    : ZeroPadDim(context, total, dim, kept - 1, 0);
  };
  if (lo > 0) result = b.Add(result, fold(SliceDim(context, grad, dim, 0, lo), true));
  if (hi > 0) {
    result = b.Add(result, fold(SliceDim(context, grad, dim, lo + kept, lo + kept + hi), false));
  }
  return ZeroPadDim(context, result, dim, std::max<int64_t>(0, -low), std::max<int64_t>(0, -high));
}

// Checks the padding against the input the way CPU does and returns it as (low, high) per padded
// dim, innermost first.
std::vector<int64_t> CheckedPadding(LoweringContext& context, const Value& x, const Operand& pad,
                                    int64_t spatial, bool reflect) {
  std::vector<int64_t> padding = context.IntList(pad);
  TORCH_CHECK(static_cast<int64_t>(padding.size()) == 2 * spatial, context.op_name(),
              ": padding size is expected to be ", 2 * spatial, ", but got: ", padding.size());
  TORCH_CHECK(x.rank() == spatial + 1 || x.rank() == spatial + 2, context.op_name(),
              ": Expected ", spatial + 1, "D or ", spatial + 2,
              "D (batch mode) tensor with possibly 0 batch size and other non-zero dimensions "
              "for input, but got: ",
              x.type().ToString());
  for (int64_t i = 0; i < spatial; ++i) {
    const int64_t dim = x.rank() - 1 - i;
    const int64_t size = x.dims()[dim];
    const int64_t low = padding[2 * i], high = padding[2 * i + 1];
    if (reflect) {
      TORCH_CHECK(low < size && high < size, context.op_name(),
                  ": Argument #4: Padding size should be less than the corresponding input "
                  "dimension, but got: padding (",
                  low, ", ", high, ") at dimension ", dim, " of input ", x.type().ToString());
    }
    TORCH_CHECK(size + low + high >= 1, context.op_name(), ": input (", x.type().ToString(),
                ") is too small for padding (", low, ", ", high, ") at dimension ", dim,
                ": the output would be empty");
  }
  return padding;
}

// reflection_padNd / replication_padNd(self, SymInt[2N] padding)
template <int kSpatial, bool kReflect>
std::vector<Value> PadNd(LoweringContext& context, std::span<const Operand> operands) {
  Value x = operands[0].value;
  const auto padding = CheckedPadding(context, x, operands[1], kSpatial, kReflect);
  for (int64_t i = 0; i < kSpatial; ++i) {
    x = PadDim(context, x, x.rank() - 1 - i, padding[2 * i], padding[2 * i + 1], kReflect);
  }
  return {x};
}
TORCH_TPU_LOWERING((PadNd<1, true>), "aten::reflection_pad1d", "aten::reflection_pad1d.out");
TORCH_TPU_LOWERING((PadNd<2, true>), "aten::reflection_pad2d", "aten::reflection_pad2d.out");
TORCH_TPU_LOWERING((PadNd<3, true>), "aten::reflection_pad3d", "aten::reflection_pad3d.out");
TORCH_TPU_LOWERING((PadNd<1, false>), "aten::replication_pad1d", "aten::replication_pad1d.out");
TORCH_TPU_LOWERING((PadNd<2, false>), "aten::replication_pad2d", "aten::replication_pad2d.out");
TORCH_TPU_LOWERING((PadNd<3, false>), "aten::replication_pad3d", "aten::replication_pad3d.out");

// reflection_padNd_backward / replication_padNd_backward(grad_output, self, SymInt[2N] padding)
template <int kSpatial, bool kReflect>
std::vector<Value> PadNdBackward(LoweringContext& context, std::span<const Operand> operands) {
  Value grad = operands[0].value;
  const Value& x = operands[1].value;
  const auto padding = CheckedPadding(context, x, operands[2], kSpatial, kReflect);
  for (int64_t i = 0; i < kSpatial; ++i) {
    const int64_t dim = x.rank() - 1 - i;
    grad = PadDimBackward(context, grad, dim, x.dims()[dim], padding[2 * i], padding[2 * i + 1],
                          kReflect);
  }
  return {grad};
}
TORCH_TPU_LOWERING((PadNdBackward<1, true>), "aten::reflection_pad1d_backward",
                   "aten::reflection_pad1d_backward.grad_input");
TORCH_TPU_LOWERING((PadNdBackward<2, true>), "aten::reflection_pad2d_backward",
                   "aten::reflection_pad2d_backward.grad_input");
TORCH_TPU_LOWERING((PadNdBackward<3, true>), "aten::reflection_pad3d_backward",
                   "aten::reflection_pad3d_backward.grad_input");
TORCH_TPU_LOWERING((PadNdBackward<1, false>), "aten::replication_pad1d_backward",
                   "aten::replication_pad1d_backward.grad_input");
TORCH_TPU_LOWERING((PadNdBackward<2, false>), "aten::replication_pad2d_backward",
                   "aten::replication_pad2d_backward.grad_input");
TORCH_TPU_LOWERING((PadNdBackward<3, false>), "aten::replication_pad3d_backward",
                   "aten::replication_pad3d_backward.grad_input");

}  // namespace
}  // namespace torch_tpu::lowering

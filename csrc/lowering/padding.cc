// Reflection and replication padding (nn.functional.pad modes "reflect" and "replicate") and their
// backward: per padded dim, a gather of statically known source positions, and its transpose, a
// scatter-add.
#include <c10/util/Exception.h>

#include <algorithm>
#include <string>

#include "lowering/context.h"

namespace torch_tpu::lowering {
namespace {

// The source position of each of the n + low + high output positions along a padded dim of
// size n: output i copies input i - low, mirrored at the ends without repeating the edge
// (reflect) or clamped to the edge (replicate). Negative amounts crop.
std::vector<int64_t> SourcePositions(int64_t n, int64_t low, int64_t high, bool reflect) {
  std::vector<int64_t> positions;
  for (int64_t i = 0; i < n + low + high; ++i) {
    int64_t j = i - low;
    if (reflect) {
      if (j < 0) j = -j;
      if (j >= n) j = 2 * (n - 1) - j;
    } else {
      j = std::clamp<int64_t>(j, 0, n - 1);
    }
    positions.push_back(j);
  }
  return positions;
}

// Static positions as gather/scatter indices [count, 1] along `dim`, with the dimension numbers
// that keep every other dim whole.
Value PositionIndices(LoweringContext& context, const std::vector<int64_t>& positions) {
  const int64_t count = static_cast<int64_t>(positions.size());
  return context.builder().ConstantDenseInt(
      stablehlo::TensorType{stablehlo::ElementType::kS64, {count, 1}}, positions);
}

// x's elements along `dim` at the static `positions`, in order.
Value TakeAlong(LoweringContext& context, Value x, int64_t dim,
                const std::vector<int64_t>& positions) {
  FunctionBuilder::GatherDimensions dimensions;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (d != dim) dimensions.offset_dims.push_back(d);
  }
  dimensions.collapsed_slice_dims = {dim};
  dimensions.start_index_map = {dim};
  dimensions.index_vector_dim = 1;
  std::vector<int64_t> slice_sizes = x.dims();
  slice_sizes[dim] = 1;
  return context.builder().Gather(x, PositionIndices(context, positions), dimensions, slice_sizes,
                                  /*indices_are_sorted=*/false);
}

// The transpose of TakeAlong: each element of `grad` along `dim` is added to position
// positions[i] of a zero tensor whose `dim` has `size` elements.
Value AddAlong(LoweringContext& context, Value grad, int64_t dim, int64_t size,
               const std::vector<int64_t>& positions) {
  auto& b = context.builder();
  FunctionBuilder::ScatterDimensions dimensions;
  for (int64_t d = 0; d < grad.rank(); ++d) {
    if (d != dim) dimensions.update_window_dims.push_back(d);
  }
  dimensions.inserted_window_dims = {dim};
  dimensions.scatter_dims_to_operand_dims = {dim};
  dimensions.index_vector_dim = 1;
  std::vector<int64_t> dims = grad.dims();
  dims[dim] = size;
  Value zeros = b.Constant(grad.element_type(), 0.0, dims);
  return b.Scatter({zeros}, PositionIndices(context, positions), {grad}, dimensions,
                   [](FunctionBuilder& body, std::span<const Value> args) {
                     return std::vector<Value>{body.Add(args[0], args[1])};
                   })[0];
}

// Checks the padding against the input the way CPU does and returns it as (low, high) per padded
// dim, innermost first.
std::vector<int64_t> CheckedPadding(LoweringContext& context, const Value& x, const Operand& pad,
                                    int64_t spatial, bool reflect) {
  std::vector<int64_t> padding = context.IntList(pad);
  TORCH_CHECK(static_cast<int64_t>(padding.size()) == 2 * spatial, context.op_name(),
              ": padding size is expected to be ", 2 * spatial, ", but got: ", padding.size());
  TORCH_CHECK(x.rank() == spatial + 1 || x.rank() == spatial + 2, context.op_name(), ": Expected ",
              spatial + 1, "D or ", spatial + 2,
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
    const int64_t dim = x.rank() - 1 - i;
    x = TakeAlong(context, x, dim,
                  SourcePositions(x.dims()[dim], padding[2 * i], padding[2 * i + 1], kReflect));
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
  const Value& x = operands[1].value;
  const auto padding = CheckedPadding(context, x, operands[2], kSpatial, kReflect);
  // Half types accumulate the folded-back gradients in f32 and round once, as CPU does.
  const c10::ScalarType dtype = operands[0].dtype;
  Value grad = context.Convert(operands[0].value, ComputeDtype(dtype));
  for (int64_t i = 0; i < kSpatial; ++i) {
    const int64_t dim = x.rank() - 1 - i;
    const int64_t size = x.dims()[dim];
    grad = AddAlong(context, grad, dim, size,
                    SourcePositions(size, padding[2 * i], padding[2 * i + 1], kReflect));
  }
  return {context.Convert(grad, dtype)};
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

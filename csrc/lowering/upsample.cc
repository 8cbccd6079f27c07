// Upsampling (F.interpolate modes nearest, nearest-exact, linear/bilinear/trilinear, bicubic, and
// anti-aliased bilinear/bicubic) and its backward, over 1, 2 or 3 spatial dims. Each spatial dim
// is resampled on its own: output position o reads input positions that depend only on o and the
// sizes, so they are computed on the host with CPU's index and weight formulas (upsample_taps.h)
// and become constants. The forward gathers along one dim at a time; the backward scatter-adds
// the gradient back along the same positions.
#include <c10/util/Exception.h>

#include <optional>

#include "lowering/context.h"
#include "lowering/opmath.h"
#include "lowering/upsample_taps.h"

namespace torch_tpu::lowering {
namespace {

using Mode = ResampleMode;

// The op's static arguments, shared by the forward and backward schemas:
//   forward  (self, output_size, [align_corners,] scales...)
//   backward (grad_output, output_size, input_size, [align_corners,] scales...)
struct Resample {
  Mode mode;
  std::vector<int64_t> output_size;
  bool align_corners = false;
  std::vector<std::optional<double>> scales;
};

Resample ReadArguments(LoweringContext& context, std::span<const Operand> operands, Mode mode,
                       size_t first_after_sizes) {
  Resample r{mode, context.IntList(operands[1])};
  size_t next = first_after_sizes;
  if (!IsNearest(mode)) r.align_corners = context.Bool(operands[next++]);
  for (; next < operands.size(); ++next) {
    r.scales.push_back(operands[next].is_none()
                           ? std::nullopt
                           : std::optional<double>(context.Double(operands[next])));
  }
  return r;
}

// CPU's upsample_{1,2,3}d_common_check: sizes per spatial dim, all positive.
void CheckSizes(LoweringContext& context, const std::vector<int64_t>& input_size,
                const std::vector<int64_t>& output_size, size_t spatial) {
  TORCH_CHECK(output_size.size() == spatial, context.op_name(),
              ": It is expected output_size equals to ", spatial, ", but got size ",
              output_size.size());
  TORCH_CHECK(input_size.size() == spatial + 2, context.op_name(),
              ": It is expected input_size equals to ", spatial + 2, ", but got size ",
              input_size.size());
  bool positive = true;
  for (size_t d = 0; d < spatial; ++d) {
    positive = positive && input_size[2 + d] > 0 && output_size[d] > 0;
  }
  TORCH_CHECK(positive, context.op_name(),
              ": Input and output sizes should be greater than 0, but got input ",
              c10::IntArrayRef(input_size).slice(2), " output ", c10::IntArrayRef(output_size));
}

Taps TapsOf(const Resample& r, c10::ScalarType dtype, size_t d, int64_t in) {
  const std::optional<double> scale = d < r.scales.size() ? r.scales[d] : std::nullopt;
  return ResampleTaps(r.mode, dtype, in, r.output_size[d], r.align_corners, scale);
}

Value IndexConstant(FunctionBuilder& b, const std::vector<int64_t>& index) {
  return b.ConstantDenseInt(TensorType{ElementType::kS64, {static_cast<int64_t>(index.size())}},
                            index);
}

// A per-position weight along `axis`, broadcast to `dims`.
Value WeightAlong(FunctionBuilder& b, const std::vector<double>& weights, ElementType type,
                  int64_t axis, const std::vector<int64_t>& dims) {
  Value vector = b.ConstantDense(TensorType{type, {static_cast<int64_t>(weights.size())}}, weights);
  return b.BroadcastInDim(vector, dims, {axis});
}

// x with positions `index` taken along `axis` (which becomes index.size() long).
Value TakeAlong(FunctionBuilder& b, Value x, int64_t axis, const std::vector<int64_t>& index) {
  FunctionBuilder::GatherDimensions dimensions;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (d != axis) dimensions.offset_dims.push_back(d);
  }
  dimensions.collapsed_slice_dims = {axis};
  dimensions.start_index_map = {axis};
  dimensions.index_vector_dim = 1;
  std::vector<int64_t> slice_sizes = x.dims();
  slice_sizes[axis] = 1;
  return b.Gather(x, IndexConstant(b, index), dimensions, slice_sizes);
}

// The transpose of TakeAlong: a tensor `length` long along `axis` with each slice of `updates`
// added at its position in `index`.
Value AddAlong(FunctionBuilder& b, Value updates, int64_t axis, const std::vector<int64_t>& index,
               int64_t length) {
  std::vector<int64_t> dims = updates.dims();
  dims[axis] = length;
  FunctionBuilder::ScatterDimensions dimensions;
  for (int64_t d = 0; d < updates.rank(); ++d) {
    if (d != axis) dimensions.update_window_dims.push_back(d);
  }
  dimensions.inserted_window_dims = {axis};
  dimensions.scatter_dims_to_operand_dims = {axis};
  dimensions.index_vector_dim = 1;
  return b.Scatter({b.Constant(updates.element_type(), 0.0, dims)}, IndexConstant(b, index),
                   {updates}, dimensions, [](FunctionBuilder& body, std::span<const Value> args) {
                     return std::vector<Value>{body.Add(args[0], args[1])};
                   })[0];
}

// The CPU kernel that CPU's NotImplementedError names for a dtype it lacks.
const char* WeightKernelName(Mode mode, size_t spatial) {
  switch (mode) {
    case Mode::kLinear:
      return spatial == 2 ? "upsample_bilinear2d_channels_last" : "compute_indices_weights_linear";
    case Mode::kCubic:
      return "compute_indices_weights_cubic";
    default:
      return "compute_index_ranges_weights";
  }
}

// CPU's uint8 resampling in integers: the last dim first, each dim whose size changes rounded
// and clamped back to [0, 255] before the next.
Value UpsampleUint8(FunctionBuilder& b, Value x, const Resample& r, size_t spatial) {
  x = b.Convert(x, ElementType::kS32);
  for (size_t d = spatial; d-- > 0;) {
    const int64_t axis = static_cast<int64_t>(2 + d);
    const int64_t in = x.dims()[axis];
    if (in == r.output_size[d]) continue;
    const std::optional<double> scale = d < r.scales.size() ? r.scales[d] : std::nullopt;
    const FixedPointTaps fixed =
        ResampleTapsUint8(r.mode, in, r.output_size[d], r.align_corners, scale);
    Value sum;
    for (size_t k = 0; k < fixed.taps.index.size(); ++k) {
      Value term = TakeAlong(b, x, axis, fixed.taps.index[k]);
      term = b.Multiply(
          term, WeightAlong(b, fixed.taps.weights[k], ElementType::kS32, axis, term.dims()));
      sum = sum.valid() ? b.Add(sum, term) : term;
    }
    const std::vector<int64_t> dims = sum.dims();
    Value half = b.ConstantInt(ElementType::kS32,
                               fixed.precision > 0 ? int64_t{1} << (fixed.precision - 1) : 0, dims);
    Value shifted = b.ShiftRightArithmetic(b.Add(sum, half),
                                           b.ConstantInt(ElementType::kS32, fixed.precision, dims));
    x = b.Clamp(b.ConstantInt(ElementType::kS32, 0), shifted,
                b.ConstantInt(ElementType::kS32, 255));
  }
  return b.Convert(x, ElementType::kU8);
}

// upsample_{nearest,linear}{1,2,3}d / _upsample_nearest_exact{1,2,3}d(self, output_size,
//   [align_corners,] scales...)
template <Mode kMode, size_t kSpatial>
std::vector<Value> Upsample(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = operands[0].dtype;
  if (!IsNearest(kMode) && !c10::isFloatingType(dtype) && !(dtype == c10::kByte && kSpatial == 2)) {
    CheckKernelDtype(context, false, WeightKernelName(kMode, kSpatial), dtype);
  }
  if (dtype == c10::kByte && !IsNearest(kMode) && kSpatial == 2) {
    const Resample r = ReadArguments(context, operands, kMode, 2);
    CheckSizes(context, operands[0].value.dims(), r.output_size, kSpatial);
    return {UpsampleUint8(b, operands[0].value, r, kSpatial)};
  }
  Value x = context.Convert(operands[0].value, ComputeDtype(dtype));
  const Resample r = ReadArguments(context, operands, kMode, 2);
  CheckSizes(context, x.dims(), r.output_size, kSpatial);
  // CPU's kernels combine the last dim innermost (w before h before d); resampling the last dim
  // first keeps the same rounding order.
  for (size_t d = kSpatial; d-- > 0;) {
    const int64_t axis = static_cast<int64_t>(2 + d);
    const Taps taps = TapsOf(r, dtype, d, x.dims()[axis]);
    Value sum;
    for (size_t k = 0; k < taps.index.size(); ++k) {
      Value term = TakeAlong(b, x, axis, taps.index[k]);
      if (!IsNearest(kMode)) {
        term = b.Multiply(term,
                          WeightAlong(b, taps.weights[k], term.element_type(), axis, term.dims()));
      }
      sum = sum.valid() ? b.Add(sum, term) : term;
    }
    x = sum;
  }
  return {context.Convert(x, dtype)};
}

// upsample_*_backward(grad_output, output_size, input_size, [align_corners,] scales...)
template <Mode kMode, size_t kSpatial>
std::vector<Value> UpsampleBackward(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  const c10::ScalarType dtype = operands[0].dtype;
  Value grad = context.Convert(operands[0].value, ComputeDtype(dtype));
  const std::vector<int64_t> input_size = context.IntList(operands[2]);
  const Resample r = ReadArguments(context, operands, kMode, 3);
  CheckSizes(context, input_size, r.output_size, kSpatial);
  std::vector<int64_t> expected = {input_size[0], input_size[1]};
  expected.insert(expected.end(), r.output_size.begin(), r.output_size.end());
  for (size_t d = 0; d < expected.size(); ++d) {
    TORCH_CHECK(
        grad.rank() == static_cast<int64_t>(expected.size()) && grad.dims()[d] == expected[d],
        context.op_name(), ": Expected grad_output to have the same shape as output; ",
        "output.size(", d, ") = ", expected[d], " but got grad_output with sizes ",
        c10::IntArrayRef(grad.dims()));
  }
  // The forward resampled the last dim first, so its transpose goes first to last.
  for (size_t d = 0; d < kSpatial; ++d) {
    const int64_t axis = static_cast<int64_t>(2 + d);
    const Taps taps = TapsOf(r, dtype, d, input_size[axis]);
    // Every tap's contributions in one scatter: the taps' positions and weighted gradients
    // side by side along the axis.
    std::vector<int64_t> index;
    std::vector<Value> updates;
    for (size_t k = 0; k < taps.index.size(); ++k) {
      index.insert(index.end(), taps.index[k].begin(), taps.index[k].end());
      updates.push_back(!IsNearest(kMode)
                            ? b.Multiply(grad, WeightAlong(b, taps.weights[k], grad.element_type(),
                                                           axis, grad.dims()))
                            : grad);
    }
    Value combined = updates.size() == 1 ? updates[0] : b.Concatenate(updates, axis);
    grad = AddAlong(b, combined, axis, index, input_size[axis]);
  }
  return {context.Convert(grad, dtype)};
}

TORCH_TPU_LOWERING((Upsample<Mode::kNearest, 1>), "aten::upsample_nearest1d",
                   "aten::upsample_nearest1d.out");
TORCH_TPU_LOWERING((Upsample<Mode::kNearest, 2>), "aten::upsample_nearest2d",
                   "aten::upsample_nearest2d.out");
TORCH_TPU_LOWERING((Upsample<Mode::kNearest, 3>), "aten::upsample_nearest3d",
                   "aten::upsample_nearest3d.out");
TORCH_TPU_LOWERING((Upsample<Mode::kNearestExact, 1>), "aten::_upsample_nearest_exact1d",
                   "aten::_upsample_nearest_exact1d.out");
TORCH_TPU_LOWERING((Upsample<Mode::kNearestExact, 2>), "aten::_upsample_nearest_exact2d",
                   "aten::_upsample_nearest_exact2d.out");
TORCH_TPU_LOWERING((Upsample<Mode::kNearestExact, 3>), "aten::_upsample_nearest_exact3d",
                   "aten::_upsample_nearest_exact3d.out");
TORCH_TPU_LOWERING((Upsample<Mode::kLinear, 1>), "aten::upsample_linear1d",
                   "aten::upsample_linear1d.out");
TORCH_TPU_LOWERING((Upsample<Mode::kLinear, 2>), "aten::upsample_bilinear2d",
                   "aten::upsample_bilinear2d.out");
TORCH_TPU_LOWERING((Upsample<Mode::kLinear, 3>), "aten::upsample_trilinear3d",
                   "aten::upsample_trilinear3d.out");
TORCH_TPU_LOWERING((Upsample<Mode::kCubic, 2>), "aten::upsample_bicubic2d",
                   "aten::upsample_bicubic2d.out");
TORCH_TPU_LOWERING((Upsample<Mode::kLinearAntialias, 2>), "aten::_upsample_bilinear2d_aa",
                   "aten::_upsample_bilinear2d_aa.out");
TORCH_TPU_LOWERING((Upsample<Mode::kCubicAntialias, 2>), "aten::_upsample_bicubic2d_aa",
                   "aten::_upsample_bicubic2d_aa.out");

TORCH_TPU_LOWERING((UpsampleBackward<Mode::kNearest, 1>), "aten::upsample_nearest1d_backward",
                   "aten::upsample_nearest1d_backward.grad_input");
TORCH_TPU_LOWERING((UpsampleBackward<Mode::kNearest, 2>), "aten::upsample_nearest2d_backward",
                   "aten::upsample_nearest2d_backward.grad_input");
TORCH_TPU_LOWERING((UpsampleBackward<Mode::kNearest, 3>), "aten::upsample_nearest3d_backward",
                   "aten::upsample_nearest3d_backward.grad_input");
TORCH_TPU_LOWERING((UpsampleBackward<Mode::kNearestExact, 1>),
                   "aten::_upsample_nearest_exact1d_backward",
                   "aten::_upsample_nearest_exact1d_backward.grad_input");
TORCH_TPU_LOWERING((UpsampleBackward<Mode::kNearestExact, 2>),
                   "aten::_upsample_nearest_exact2d_backward",
                   "aten::_upsample_nearest_exact2d_backward.grad_input");
TORCH_TPU_LOWERING((UpsampleBackward<Mode::kNearestExact, 3>),
                   "aten::_upsample_nearest_exact3d_backward",
                   "aten::_upsample_nearest_exact3d_backward.grad_input");
TORCH_TPU_LOWERING((UpsampleBackward<Mode::kLinear, 1>), "aten::upsample_linear1d_backward",
                   "aten::upsample_linear1d_backward.grad_input");
TORCH_TPU_LOWERING((UpsampleBackward<Mode::kLinear, 2>), "aten::upsample_bilinear2d_backward",
                   "aten::upsample_bilinear2d_backward.grad_input");
TORCH_TPU_LOWERING((UpsampleBackward<Mode::kLinear, 3>), "aten::upsample_trilinear3d_backward",
                   "aten::upsample_trilinear3d_backward.grad_input");
TORCH_TPU_LOWERING((UpsampleBackward<Mode::kCubic, 2>), "aten::upsample_bicubic2d_backward",
                   "aten::upsample_bicubic2d_backward.grad_input");
TORCH_TPU_LOWERING((UpsampleBackward<Mode::kLinearAntialias, 2>),
                   "aten::_upsample_bilinear2d_aa_backward",
                   "aten::_upsample_bilinear2d_aa_backward.grad_input");
TORCH_TPU_LOWERING((UpsampleBackward<Mode::kCubicAntialias, 2>),
                   "aten::_upsample_bicubic2d_aa_backward",
                   "aten::_upsample_bicubic2d_aa_backward.grad_input");

}  // namespace

}  // namespace torch_tpu::lowering

// fractional_max_pool2d / fractional_max_pool3d. The pooling windows start at pseudo-random
// offsets, but the random draws arrive as an input tensor (one sample per plane and dim), so the
// lowering is deterministic: it computes CPU's window starts from the samples on the device and
// takes the max over each window's taps, one gather per tap. The backward is max pooling's
// scatter of the gradient to the argmax indices (pooling.cc).
#include <c10/util/Exception.h>

#include <vector>

#include "lowering/context.h"
#include "lowering/dtype.h"

namespace torch_tpu::lowering {
namespace {

// CPU's generate_intervals for one dim: window o starts at
// trunc((o + sample) * alpha) - trunc(sample * alpha) with alpha = (in - pool) / (out - 1), and
// the last window ends at the input's end. `sample` is [planes]; the result is [planes, out].
Value WindowStarts(LoweringContext& context, Value sample, int64_t in, int64_t out, int64_t pool) {
  auto& b = context.builder();
  const int64_t planes = sample.dims()[0];
  const ElementType type = sample.element_type();
  const std::vector<int64_t> dims = {planes, out};
  if (out == 1) return b.ConstantInt(ElementType::kS64, in - pool, dims);
  // CPU divides in scalar_t: a float quotient for float samples.
  const double alpha =
      type == ElementType::kF64
          ? static_cast<double>(in - pool) / static_cast<double>(out - 1)
          : static_cast<double>(static_cast<float>(in - pool) / static_cast<float>(out - 1));
  Value alpha_value = b.Constant(type, alpha, dims);
  Value s = b.BroadcastInDim(sample, dims, {0});
  Value o = b.Iota(TensorType{type, dims}, 1);
  Value start = b.Subtract(b.Convert(b.Multiply(b.Add(o, s), alpha_value), ElementType::kS64),
                           b.Convert(b.Multiply(s, alpha_value), ElementType::kS64));
  Value is_last = b.Compare(b.Iota(TensorType{ElementType::kS64, dims}, 1),
                            b.ConstantInt(ElementType::kS64, out - 1, dims), Direction::kEq);
  return b.Select(is_last, b.ConstantInt(ElementType::kS64, in - pool, dims), start);
}

// fractional_max_pool{2,3}d(self, kernel_size, output_size, random_samples) -> (output, indices)
template <size_t kSpatial>
std::vector<Value> FractionalMaxPool(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value x = operands[0].value;
  const std::vector<int64_t> kernel = context.IntList(operands[1]);
  const std::vector<int64_t> output_size = context.IntList(operands[2]);
  const int64_t spatial = static_cast<int64_t>(kSpatial);
  const int64_t leading = x.rank() - spatial;
  TORCH_CHECK(leading == 1 || leading == 2, context.op_name(), ": expected ", spatial + 1, "D or ",
              spatial + 2, "D tensor for input, but got: ", c10::IntArrayRef(x.dims()));
  TORCH_CHECK(kernel.size() == kSpatial && output_size.size() == kSpatial, context.op_name(),
              ": kernel_size and output_size must have ", spatial, " elements");
  const std::vector<int64_t> in(x.dims().end() - spatial, x.dims().end());
  static const char* const kDimNames[3] = {"time", "height", "width"};
  for (int64_t d = 0; d < spatial; ++d) {
    const char* name = kDimNames[3 - spatial + d];
    TORCH_CHECK(output_size[d] + kernel[d] - 1 <= in[d], context.op_name(), ": pool ", name, " ",
                kernel[d], " too large relative to input ", name, " ", in[d]);
  }
  int64_t planes = 1, plane = 1;
  for (int64_t d = 0; d < leading; ++d) planes *= x.dims()[d];
  for (int64_t d = 0; d < spatial; ++d) plane *= in[d];
  Value samples = context.Convert(operands[3].value, ComputeDtype(operands[3].dtype));
  TORCH_CHECK(samples.type().NumElements() == planes * spatial, context.op_name(),
              ": expected random_samples with ", planes * spatial, " elements, but got sizes ",
              c10::IntArrayRef(samples.dims()));
  samples = b.Reshape(samples, {planes, spatial});
  // Window starts per dim, [planes, out_d]; 2-D takes its samples width first, 3-D time first.
  std::vector<Value> starts(kSpatial);
  for (int64_t d = 0; d < spatial; ++d) {
    const int64_t component = kSpatial == 2 ? spatial - 1 - d : d;
    Value sample =
        b.Reshape(b.Slice(samples, {0, component}, {planes, component + 1}, {1, 1}), {planes});
    starts[d] = WindowStarts(context, sample, in[d], output_size[d], kernel[d]);
  }
  // Flat position within the plane of each output's window origin, [planes, outputs...].
  std::vector<int64_t> dims = {planes};
  dims.insert(dims.end(), output_size.begin(), output_size.end());
  Value origin = b.ConstantInt(ElementType::kS64, 0, dims);
  int64_t stride = plane;
  for (int64_t d = 0; d < spatial; ++d) {
    stride /= in[d];
    Value along = b.BroadcastInDim(starts[d], dims, {0, 1 + d});
    origin = b.Add(origin, b.Multiply(along, b.ConstantInt(ElementType::kS64, stride, dims)));
  }
  Value plane_offset = b.Multiply(b.Iota(TensorType{ElementType::kS64, dims}, 0),
                                  b.ConstantInt(ElementType::kS64, plane, dims));
  Value flat_input = b.Reshape(x, {planes * plane});
  const bool is_float = stablehlo::IsFloat(x.element_type());
  // Taps in CPU's scan order; a later tap wins when strictly greater or NaN (so the first of
  // equal maxima and the last NaN are kept).
  Value best, best_index;
  int64_t taps = 1;
  for (int64_t k : kernel) taps *= k;
  for (int64_t t = 0; t < taps; ++t) {
    int64_t offset = 0, rest = t, tap_stride = 1;
    for (int64_t d = spatial; d-- > 0;) {
      offset += (rest % kernel[d]) * tap_stride;
      rest /= kernel[d];
      tap_stride *= in[d];
    }
    Value index = b.Add(origin, b.ConstantInt(ElementType::kS64, offset, dims));
    Value value = b.Gather1D(flat_input, b.Add(plane_offset, index));
    if (t == 0) {
      best = value;
      best_index = index;
      continue;
    }
    Value take = b.Compare(value, best, Direction::kGt);
    if (is_float) take = b.Or(take, b.Compare(value, value, Direction::kNe));
    best = b.Select(take, value, best);
    best_index = b.Select(take, index, best_index);
  }
  std::vector<int64_t> result_dims(x.dims().begin(), x.dims().begin() + leading);
  result_dims.insert(result_dims.end(), output_size.begin(), output_size.end());
  return {b.Reshape(best, result_dims), b.Reshape(best_index, result_dims)};
}
TORCH_TPU_LOWERING(FractionalMaxPool<2>, "aten::fractional_max_pool2d",
                   "aten::fractional_max_pool2d.output");
TORCH_TPU_LOWERING(FractionalMaxPool<3>, "aten::fractional_max_pool3d",
                   "aten::fractional_max_pool3d.output");

}  // namespace
}  // namespace torch_tpu::lowering

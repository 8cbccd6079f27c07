// Sliding windows: the backward of Tensor.unfold (every window element's gradient is added back
// at the input position it was read from), and im2col / col2im (nn.functional.unfold / fold).
#include <c10/util/Exception.h>

#include <array>
#include <numeric>

#include "lowering/context.h"
#include "lowering/opmath.h"

namespace torch_tpu::lowering {
namespace {

// unfold_backward(grad_in, input_sizes, dim, size, step): grad_in has the input's dims with `dim`
// replaced by the window count, plus a trailing window dim of `size`.
std::vector<Value> UnfoldBackward(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value grad = operands[0].value;
  std::vector<int64_t> input_sizes = context.IntList(operands[1]);
  const bool scalar_input = input_sizes.empty();
  if (scalar_input) input_sizes = {1};
  const int64_t rank = static_cast<int64_t>(input_sizes.size());
  const int64_t dim = context.WrapDim(context.Int(operands[2]), rank);
  const int64_t size = context.Int(operands[3]), step = context.Int(operands[4]);
  TORCH_CHECK(step > 0, context.op_name(), ": step is ", step, " but must be > 0");
  std::vector<int64_t> expected = input_sizes;
  const int64_t length = input_sizes[dim];
  const int64_t windows = length >= size ? (length - size) / step + 1 : 0;
  expected[dim] = windows;
  expected.push_back(size);
  grad = b.Reshape(grad, expected);

  // Move `dim` next to the window dim and flatten the two: position w * step + j.
  std::vector<int64_t> permutation;
  for (int64_t d = 0; d < rank; ++d) {
    if (d != dim) permutation.push_back(d);
  }
  permutation.push_back(dim);
  std::vector<int64_t> rest_dims;
  for (int64_t d : permutation) {
    if (d != dim) rest_dims.push_back(input_sizes[d]);
  }
  std::vector<int64_t> grad_permutation = permutation;
  grad_permutation.push_back(rank);
  std::vector<int64_t> flat_dims = rest_dims;
  flat_dims.push_back(windows * size);
  Value updates = b.Reshape(b.Transpose(grad, grad_permutation), flat_dims);
  Value window_start = b.Multiply(b.Iota(TensorType{ElementType::kS64, {windows, size}}, 0),
                                  b.ConstantInt(ElementType::kS64, step, {windows, size}));
  Value positions = b.Add(window_start, b.Iota(TensorType{ElementType::kS64, {windows, size}}, 1));
  positions = b.Reshape(positions, {windows * size, 1});

  std::vector<int64_t> result_dims = rest_dims;
  result_dims.push_back(length);
  FunctionBuilder::ScatterDimensions dimensions;
  dimensions.update_window_dims.resize(rank - 1);
  std::iota(dimensions.update_window_dims.begin(), dimensions.update_window_dims.end(), 0);
  dimensions.inserted_window_dims = {rank - 1};
  dimensions.scatter_dims_to_operand_dims = {rank - 1};
  dimensions.index_vector_dim = 1;
  Value zeros = b.Constant(grad.element_type(), 0.0, result_dims);
  Value result = b.Scatter({zeros}, positions, {updates}, dimensions,
                           [](FunctionBuilder& body, std::span<const Value> args) {
                             return std::vector<Value>{body.Add(args[0], args[1])};
                           })[0];
  std::vector<int64_t> inverse(rank);
  for (int64_t i = 0; i < rank; ++i) inverse[permutation[i]] = i;
  result = b.Transpose(result, inverse);
  if (scalar_input) result = b.Reshape(result, {});
  return {result};
}
TORCH_TPU_LOWERING(UnfoldBackward, "aten::unfold_backward", "aten::unfold_backward.out");

// The 2-d window geometry shared by im2col and col2im: kernel, dilation, padding and stride (one
// pair each) and the number of window positions along each spatial dim.
struct Windows2d {
  std::array<int64_t, 2> kernel, dilation, padding, stride, count;
};

Windows2d WindowGeometry(LoweringContext& context, std::span<const Operand> operands, size_t first,
                         const std::array<int64_t, 2>& spatial) {
  Windows2d w;
  const char* names[] = {"kernel_size", "dilation", "padding", "stride"};
  std::array<int64_t, 2>* fields[] = {&w.kernel, &w.dilation, &w.padding, &w.stride};
  for (size_t i = 0; i < 4; ++i) {
    std::vector<int64_t> values = context.IntList(operands[first + i]);
    TORCH_CHECK(values.size() == 2, context.op_name(), ": It is expected ", names[i],
                " equals to 2, but got size ", values.size());
    *fields[i] = {values[0], values[1]};
  }
  for (size_t d = 0; d < 2; ++d) {
    TORCH_CHECK(w.kernel[d] > 0 && w.dilation[d] > 0 && w.stride[d] > 0 && w.padding[d] >= 0,
                context.op_name(), ": kernel size, dilation and stride should be greater than zero"
                " and padding non-negative");
    w.count[d] =
        (spatial[d] + 2 * w.padding[d] - (w.dilation[d] * (w.kernel[d] - 1) + 1)) / w.stride[d] +
        1;
  }
  for (size_t d = 0; d < 2; ++d) {
    TORCH_CHECK(w.count[d] >= 1, context.op_name(),
                ": Given input with spatial size (", spatial[0], ", ", spatial[1],
                "), kernel_size=(", w.kernel[0], ", ", w.kernel[1], "), dilation=(",
                w.dilation[0], ", ", w.dilation[1], "), padding=(", w.padding[0], ", ",
                w.padding[1], "), calculated shape of the array of sliding blocks as (",
                w.count[0], ", ", w.count[1], "), but its components must be at least one.");
  }
  return w;
}

// im2col(self, kernel_size, dilation, padding, stride): [N,] C, H, W -> [N,] C*kh*kw, L with
// rows ordered (channel, kernel row, kernel column): one strided slice of the zero-padded input
// per kernel offset.
std::vector<Value> Im2Col(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value x = operands[0].value;
  const bool batched = x.rank() == 4;
  TORCH_CHECK(x.rank() == 3 || x.rank() == 4, context.op_name(),
              ": Expected 3D or 4D (batch mode) tensor for input, got ", x.type().ToString());
  if (!batched) x = b.Reshape(x, {1, x.dims()[0], x.dims()[1], x.dims()[2]});
  const int64_t n = x.dims()[0], c = x.dims()[1];
  const Windows2d w = WindowGeometry(context, operands, 1, {x.dims()[2], x.dims()[3]});
  Value padded = b.Pad(x, b.Constant(x.element_type(), 0.0), {0, 0, w.padding[0], w.padding[1]},
                       {0, 0, w.padding[0], w.padding[1]}, {0, 0, 0, 0});
  std::vector<Value> columns;
  for (int64_t i = 0; i < w.kernel[0]; ++i) {
    for (int64_t j = 0; j < w.kernel[1]; ++j) {
      const int64_t top = i * w.dilation[0], left = j * w.dilation[1];
      Value window = b.Slice(padded, {0, 0, top, left},
                             {n, c, top + (w.count[0] - 1) * w.stride[0] + 1,
                              left + (w.count[1] - 1) * w.stride[1] + 1},
                             {1, 1, w.stride[0], w.stride[1]});
      columns.push_back(b.Reshape(window, {n, c, 1, w.count[0] * w.count[1]}));
    }
  }
  Value result = b.Reshape(b.Concatenate(columns, 2),
                           {n, c * w.kernel[0] * w.kernel[1], w.count[0] * w.count[1]});
  if (!batched) result = b.Reshape(result, {result.dims()[1], result.dims()[2]});
  return {result};
}
TORCH_TPU_LOWERING(Im2Col, "aten::im2col", "aten::im2col.out");

// col2im(self, output_size, kernel_size, dilation, padding, stride): the transpose of im2col;
// each kernel offset's columns are spread (interior padding by the stride) over the padded
// output and summed, then the padding is cut off.
std::vector<Value> Col2Im(LoweringContext& context, std::span<const Operand> operands) {
  auto& b = context.builder();
  Value x = operands[0].value;
  const bool batched = x.rank() == 3;
  TORCH_CHECK(x.rank() == 2 || x.rank() == 3, context.op_name(),
              ": Expected 2D or 3D (batch mode) tensor for input, got ", x.type().ToString());
  if (!batched) x = b.Reshape(x, {1, x.dims()[0], x.dims()[1]});
  const std::vector<int64_t> output_size = context.IntList(operands[1]);
  TORCH_CHECK(output_size.size() == 2, context.op_name(),
              ": It is expected output_size equals to 2, but got size ", output_size.size());
  const Windows2d w = WindowGeometry(context, operands, 2, {output_size[0], output_size[1]});
  const int64_t n = x.dims()[0], kernel_area = w.kernel[0] * w.kernel[1];
  TORCH_CHECK(x.dims()[1] % kernel_area == 0, context.op_name(),
              ": Expected size of input's dimension 1 to be divisible by the product of "
              "kernel_size, but got input.size(1)=", x.dims()[1], " and kernel_size=(",
              w.kernel[0], ", ", w.kernel[1], ")");
  TORCH_CHECK(x.dims()[2] == w.count[0] * w.count[1], context.op_name(),
              ": Given output_size=(", output_size[0], ", ", output_size[1], "), kernel_size=(",
              w.kernel[0], ", ", w.kernel[1], "), dilation=(", w.dilation[0], ", ",
              w.dilation[1], "), padding=(", w.padding[0], ", ", w.padding[1], "), stride=(",
              w.stride[0], ", ", w.stride[1], "), expected size of input's dimension 2 to match "
              "the calculated number of sliding blocks ", w.count[0], " * ", w.count[1], " = ",
              w.count[0] * w.count[1], ", but got input.size(2)=", x.dims()[2], ".");
  const int64_t c = x.dims()[1] / kernel_area;
  const c10::ScalarType dtype = LoweringContext::DtypeOf(x);
  Value blocks = b.Reshape(context.Convert(x, ComputeDtype(dtype)),
                           {n, c, w.kernel[0], w.kernel[1], w.count[0], w.count[1]});
  const int64_t height = output_size[0] + 2 * w.padding[0];
  const int64_t width = output_size[1] + 2 * w.padding[1];
  Value zero = b.Constant(blocks.element_type(), 0.0);
  Value sum = b.Constant(blocks.element_type(), 0.0, {n, c, height, width});
  for (int64_t i = 0; i < w.kernel[0]; ++i) {
    for (int64_t j = 0; j < w.kernel[1]; ++j) {
      Value block = b.Reshape(b.Slice(blocks, {0, 0, i, j, 0, 0},
                                      {n, c, i + 1, j + 1, w.count[0], w.count[1]},
                                      {1, 1, 1, 1, 1, 1}),
                              {n, c, w.count[0], w.count[1]});
      const int64_t top = i * w.dilation[0], left = j * w.dilation[1];
      const int64_t rows = (w.count[0] - 1) * w.stride[0] + 1;
      const int64_t cols = (w.count[1] - 1) * w.stride[1] + 1;
      sum = b.Add(sum, b.Pad(block, zero, {0, 0, top, left},
                             {0, 0, height - top - rows, width - left - cols},
                             {0, 0, w.stride[0] - 1, w.stride[1] - 1}));
    }
  }
  Value result = b.Slice(sum, {0, 0, w.padding[0], w.padding[1]},
                         {n, c, w.padding[0] + output_size[0], w.padding[1] + output_size[1]},
                         {1, 1, 1, 1});
  result = context.Convert(result, dtype);
  if (!batched) result = b.Reshape(result, {c, output_size[0], output_size[1]});
  return {result};
}
TORCH_TPU_LOWERING(Col2Im, "aten::col2im", "aten::col2im.out");

}  // namespace
}  // namespace torch_tpu::lowering

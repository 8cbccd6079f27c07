// Backward of Tensor.unfold (sliding windows along one dim): every window element's gradient
// is added back at the input position it was read from.
#include <c10/util/Exception.h>

#include <numeric>

#include "lowering/context.h"

namespace torch_tpu::lowering {
namespace {

using stablehlo::ElementType;
using stablehlo::FunctionBuilder;
using stablehlo::TensorType;
using stablehlo::Value;

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

}  // namespace
}  // namespace torch_tpu::lowering

// Reductions: sum and mean over dimensions, with keepdim and dtype arguments.
#include <c10/util/Exception.h>

#include <algorithm>

#include "lowering/context.h"

namespace torch_tpu::lowering {
namespace {

using stablehlo::FunctionBuilder;
using stablehlo::Value;

// Dimensions to reduce: all when `dims` is None or empty (PyTorch's convention for sum/mean).
std::vector<int64_t> ReductionDims(LoweringContext& context, const Operand& dims, int64_t rank) {
  std::vector<int64_t> result;
  if (!dims.is_none()) {
    for (int64_t dim : context.IntList(dims)) result.push_back(context.WrapDim(dim, rank));
  }
  if (result.empty()) {
    for (int64_t i = 0; i < rank; ++i) result.push_back(i);
  }
  std::sort(result.begin(), result.end());
  TORCH_CHECK(std::adjacent_find(result.begin(), result.end()) == result.end(), context.op_name(),
              ": dim appears multiple times in the list of dims");
  return result;
}

Value SumOver(LoweringContext& context, Value input, const std::vector<int64_t>& dims,
              bool keepdim) {
  auto& builder = context.builder();
  Value zero = builder.Constant(input.element_type(), 0.0);
  Value result = builder.Reduce({input}, {zero}, dims,
                                [](FunctionBuilder& body, std::span<const Value> args) {
                                  return std::vector<Value>{body.Add(args[0], args[1])};
                                })[0];
  if (!keepdim) return result;
  std::vector<int64_t> kept = input.dims();
  for (int64_t dim : dims) kept[dim] = 1;
  return builder.Reshape(result, kept);
}

c10::ScalarType SumDtype(c10::ScalarType input, std::optional<c10::ScalarType> requested) {
  if (requested) return *requested;
  return c10::isIntegralType(input, /*includeBool=*/true) ? c10::kLong : input;
}

// sum.dim_IntList(self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None)
std::vector<Value> SumDims(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  const auto dims = ReductionDims(context, operands[1], self.value.rank());
  const c10::ScalarType dtype = SumDtype(self.dtype, context.OptionalDtype(operands[3]));
  Value input = context.Convert(self.value, dtype);
  return {SumOver(context, input, dims, context.Bool(operands[2]))};
}

// sum(self, *, ScalarType? dtype=None)
std::vector<Value> SumAll(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  const c10::ScalarType dtype = SumDtype(self.dtype, context.OptionalDtype(operands[1]));
  Operand none;
  const auto dims = ReductionDims(context, none, self.value.rank());
  return {SumOver(context, context.Convert(self.value, dtype), dims, false)};
}

Value MeanOver(LoweringContext& context, const Operand& self, const std::vector<int64_t>& dims,
               bool keepdim, std::optional<c10::ScalarType> requested) {
  const c10::ScalarType dtype = requested.value_or(self.dtype);
  TORCH_CHECK(c10::isFloatingType(dtype) || c10::isComplexType(dtype), context.op_name(),
              ": mean(): could not infer output dtype. ",
              requested ? "Optional" : "Input", " dtype must be either a floating point or "
              "complex dtype. Got: ", dtype);
  int64_t count = 1;
  for (int64_t dim : dims) count *= self.value.dims()[dim];
  // Accumulate low-precision floats in f32, as PyTorch's CPU and CUDA kernels do.
  const bool widen = dtype == c10::kHalf || dtype == c10::kBFloat16;
  const c10::ScalarType accumulate = widen ? c10::kFloat : dtype;
  Value sum = SumOver(context, context.Convert(self.value, accumulate), dims, keepdim);
  Value divisor = context.Constant(static_cast<double>(count), accumulate, sum.dims());
  return context.Convert(context.builder().Divide(sum, divisor), dtype);
}

// mean.dim(self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None)
std::vector<Value> MeanDims(LoweringContext& context, std::span<const Operand> operands) {
  const auto dims = ReductionDims(context, operands[1], operands[0].value.rank());
  return {MeanOver(context, operands[0], dims, context.Bool(operands[2]),
                   context.OptionalDtype(operands[3]))};
}

// mean(self, *, ScalarType? dtype=None)
std::vector<Value> MeanAll(LoweringContext& context, std::span<const Operand> operands) {
  Operand none;
  const auto dims = ReductionDims(context, none, operands[0].value.rank());
  return {MeanOver(context, operands[0], dims, false, context.OptionalDtype(operands[1]))};
}

}  // namespace

TORCH_TPU_REGISTER_LOWERINGS(reduction) {
  registry.Register("aten::sum.dim_IntList", SumDims, "", "aten::sum.IntList_out");
  registry.Register("aten::sum", SumAll);
  registry.Register("aten::mean.dim", MeanDims, "", "aten::mean.out");
  registry.Register("aten::mean", MeanAll);
}

}  // namespace torch_tpu::lowering

// Reductions: sum and mean over dimensions, with keepdim and dtype arguments.
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>

#include "lowering/extremum.h"
#include "lowering/opmath.h"
#include "lowering/reduction_ops.h"

namespace torch_tpu::lowering {

int64_t LowestOf(stablehlo::ElementType type) {
  if (stablehlo::IsUnsignedInteger(type) || stablehlo::IsPred(type)) return 0;
  const int bits = stablehlo::BitWidth(type);
  return bits == 64 ? INT64_MIN : -(int64_t{1} << (bits - 1));
}

uint64_t HighestOf(stablehlo::ElementType type) {
  if (stablehlo::IsPred(type)) return 1;
  const int bits = stablehlo::BitWidth(type);
  if (stablehlo::IsUnsignedInteger(type))
    return bits == 64 ? UINT64_MAX : (uint64_t{1} << bits) - 1;
  return (uint64_t{1} << (bits - 1)) - 1;
}

stablehlo::Value ExtremeIdentity(stablehlo::FunctionBuilder& builder,
                                 stablehlo::ElementType type, bool maximum) {
  if (stablehlo::IsFloat(type)) return builder.Constant(type, maximum ? -INFINITY : INFINITY);
  if (maximum) return builder.ConstantInt(type, LowestOf(type));
  return stablehlo::IsUnsignedInteger(type)
             ? builder.ConstantUnsigned(type, HighestOf(type))
             : builder.ConstantInt(type, static_cast<int64_t>(HighestOf(type)));
}

namespace {

// Half types accumulate in f32 and round once, as CPU's sum kernels do; a bf16 accumulator
// loses whole units after a few hundred elements.
Value SumOver(LoweringContext& context, Value input, const std::vector<int64_t>& dims,
              bool keepdim) {
  const c10::ScalarType dtype = LoweringContext::DtypeOf(input);
  Value sum = ReduceOver(context, context.Convert(input, ComputeDtype(dtype)), dims,
                         ReduceKind::kSum, keepdim);
  return context.Convert(sum, dtype);
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
TORCH_TPU_LOWERING(SumDims, "aten::sum.dim_IntList", "aten::sum.IntList_out");

// count_nonzero.dim_IntList(self, int[] dim): an int64 sum of (x != 0).
std::vector<Value> CountNonzero(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  const auto dims = ReductionDims(context, operands[1], self.value.rank());
  Value nonzero = context.Convert(context.Convert(self.value, c10::kBool), c10::kLong);
  return {SumOver(context, nonzero, dims, false)};
}
TORCH_TPU_LOWERING(CountNonzero, "aten::count_nonzero.dim_IntList",
                   "aten::count_nonzero.dim_IntList_out");

// trace(self): the sum of a matrix's diagonal (integers sum in int64).
std::vector<Value> Trace(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  TORCH_CHECK(self.value.rank() == 2, context.op_name(), ": expected a matrix, but got tensor ",
              self.value.type().ToString());
  auto& b = context.builder();
  const c10::ScalarType dtype = SumDtype(self.dtype, std::nullopt);
  Value x = context.Convert(context.Convert(self.value, dtype), ComputeDtype(dtype));
  const stablehlo::TensorType index_type{ElementType::kS64, x.dims()};
  Value diagonal = b.Compare(b.Iota(index_type, 0), b.Iota(index_type, 1),
                             FunctionBuilder::ComparisonDirection::kEq);
  Value kept = b.Select(diagonal, x, b.Constant(x.element_type(), 0.0, x.dims()));
  return {context.Convert(SumOver(context, kept, {0, 1}, false), dtype)};
}
TORCH_TPU_LOWERING(Trace, "aten::trace", "aten::trace.out");

// sum(self, *, ScalarType? dtype=None)
std::vector<Value> SumAll(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  const c10::ScalarType dtype = SumDtype(self.dtype, context.OptionalDtype(operands[1]));
  Operand none;
  const auto dims = ReductionDims(context, none, self.value.rank());
  return {SumOver(context, context.Convert(self.value, dtype), dims, false)};
}
TORCH_TPU_LOWERING(SumAll, "aten::sum");

Value MeanOver(LoweringContext& context, const Operand& self, const std::vector<int64_t>& dims,
               bool keepdim, std::optional<c10::ScalarType> requested) {
  const c10::ScalarType dtype = requested.value_or(self.dtype);
  TORCH_CHECK(c10::isFloatingType(dtype) || c10::isComplexType(dtype), context.op_name(),
              ": mean(): could not infer output dtype. ", requested ? "Optional" : "Input",
              " dtype must be either a floating point or "
              "complex dtype. Got: ",
              dtype);
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
TORCH_TPU_LOWERING(MeanDims, "aten::mean.dim", "aten::mean.out");

// mean(self, *, ScalarType? dtype=None)
std::vector<Value> MeanAll(LoweringContext& context, std::span<const Operand> operands) {
  Operand none;
  const auto dims = ReductionDims(context, none, operands[0].value.rank());
  return {MeanOver(context, operands[0], dims, false, context.OptionalDtype(operands[1]))};
}
TORCH_TPU_LOWERING(MeanAll, "aten::mean");

// amax/amin(self, int[1] dim=[], bool keepdim=False)
template <ReduceKind kKind>
std::vector<Value> Extreme(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  const auto dims = ReductionDims(context, operands[1], self.value.rank());
  for (int64_t dim : dims) {
    TORCH_CHECK_INDEX(self.value.rank() == 0 || self.value.dims()[dim] > 0, context.op_name(),
                      ": Expected reduction dim ", dim, " to have non-zero size.");
  }
  return {ReduceOver(context, self.value, dims, kKind, context.Bool(operands[2]))};
}
TORCH_TPU_LOWERING(Extreme<ReduceKind::kMax>, "aten::amax", "aten::amax.out");
TORCH_TPU_LOWERING(Extreme<ReduceKind::kMin>, "aten::amin", "aten::amin.out");

// max(self) / min(self): over all elements.
template <ReduceKind kKind>
std::vector<Value> ExtremeAll(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  TORCH_CHECK(self.value.type().NumElements() > 0, context.op_name(),
              ": max(): Expected reduction dim to be specified for input.numel() == 0. Specify "
              "the reduction dim with the 'dim' argument.");
  Operand none;
  return {ReduceOver(context, self.value, ReductionDims(context, none, self.value.rank()), kKind,
                     false)};
}
TORCH_TPU_LOWERING(ExtremeAll<ReduceKind::kMax>, "aten::max", "aten::max.unary_out");

// hash_tensor(self, int[1] dim=[], *, bool keepdim=False, int mode=0): CPU's xor_sum, the XOR of
// every element's 64 bits: floats widened to double and reinterpreted, integers converted to
// uint64 (signed ones sign-extend), bools as 0 or 1.
std::vector<Value> HashTensor(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  const int64_t mode = context.Int(operands[3]);
  TORCH_CHECK(mode == 0, "Unknown hash_tensor mode: ", mode);
  CheckKernelDtype(context, !c10::isComplexType(self.dtype), "xor_sum_cpu", self.dtype);
  const auto dims = ReductionDims(context, operands[1], self.value.rank());
  // CPU's checks of a reduction over no elements, in its words.
  if (self.value.type().NumElements() == 0) {
    TORCH_CHECK(!context.IntList(operands[1]).empty(),
                "hash_tensor: Expected reduction dim to be specified for input.numel() == 0. "
                "Specify the reduction dim with the 'dim' argument.");
    for (int64_t dim : dims) {
      TORCH_CHECK_INDEX(self.value.dims()[dim] > 0, "hash_tensor: Expected reduction dim ", dim,
                        " to have non-zero size.");
    }
  }
  auto& b = context.builder();
  Value bits;
  if (c10::isFloatingType(self.dtype)) {
    bits = b.BitcastConvert(context.Convert(self.value, c10::kDouble), ElementType::kU64);
  } else if (c10::isSignedType(self.dtype)) {
    bits = b.BitcastConvert(context.Convert(self.value, c10::kLong), ElementType::kU64);
  } else {
    bits = context.Convert(self.value, c10::kUInt64);
  }
  return {ReduceOver(context, bits, dims, ReduceKind::kXor, context.Bool(operands[2]))};
}
TORCH_TPU_LOWERING(HashTensor, "aten::hash_tensor", "aten::hash_tensor.out");
TORCH_TPU_LOWERING(ExtremeAll<ReduceKind::kMin>, "aten::min", "aten::min.unary_out");

// Reduction body over (value, index) pairs keeping the max (min), NaN counting as extreme; among
// equal values (NaNs included) the lower index wins.
FunctionBuilder::RegionBody ExtremeWithIndex(bool maximum, bool is_float) {
  return [=](FunctionBuilder& body, std::span<const Value> args) {
    Value acc = args[0], acc_index = args[1], value = args[2], index = args[3];
    Value better = body.Compare(value, acc, maximum ? Direction::kGt : Direction::kLt);
    Value equal = body.Compare(value, acc, Direction::kEq);
    if (is_float) {
      Value value_nan = body.Compare(value, value, Direction::kNe);
      Value acc_nan = body.Compare(acc, acc, Direction::kNe);
      better = body.Or(better, body.And(value_nan, body.Not(acc_nan)));
      equal = body.Or(equal, body.And(value_nan, acc_nan));
    }
    Value earlier = body.Compare(index, acc_index, Direction::kLt);
    Value take = body.Or(better, body.And(equal, earlier));
    return std::vector<Value>{body.Select(take, value, acc), body.Select(take, index, acc_index)};
  };
}

// (values, indices) of the max/min along `dim`: lowest index among ties, NaN counts as extreme.
std::pair<Value, Value> ArgExtreme(LoweringContext& context, Value input, int64_t dim, bool maximum,
                                   bool keepdim) {
  auto& builder = context.builder();
  const ElementType type = input.element_type();
  Value indices = builder.Iota(stablehlo::TensorType{ElementType::kS64, input.dims()}, dim);
  Value init_index = builder.ConstantInt(ElementType::kS64, 0);
  auto results = builder.Reduce(
      {input, indices}, {ExtremeIdentity(builder, type, maximum), init_index}, {dim},
      ExtremeWithIndex(maximum, stablehlo::IsFloat(type)));
  if (!keepdim) return {results[0], results[1]};
  const auto kept = KeptDims(input.dims(), {dim});
  return {builder.Reshape(results[0], kept), builder.Reshape(results[1], kept)};
}

// max.dim / min.dim(self, int dim, bool keepdim=False) -> (values, indices)
template <bool kMaximum>
std::vector<Value> ExtremeDim(LoweringContext& context, std::span<const Operand> operands) {
  Value input = operands[0].value;
  if (input.rank() == 0) {
    return {input, context.ConstantInt(0, c10::kLong)};
  }
  const int64_t dim = context.WrapDim(context.Int(operands[1]), input.rank());
  TORCH_CHECK_INDEX(input.dims()[dim] > 0, context.op_name(), ": Expected reduction dim ", dim,
                    " to have non-zero size.");
  auto [values, indices] = ArgExtreme(context, input, dim, kMaximum, context.Bool(operands[2]));
  return {values, indices};
}
TORCH_TPU_LOWERING(ExtremeDim<true>, "aten::max.dim", "aten::max.dim_max");
TORCH_TPU_LOWERING(ExtremeDim<false>, "aten::min.dim", "aten::min.dim_min");

// argmax / argmin(self, int? dim=None, bool keepdim=False)
template <bool kMaximum>
std::vector<Value> ArgExtremeOp(LoweringContext& context, std::span<const Operand> operands) {
  TORCH_CHECK(operands[0].dtype != c10::kBool, context.op_name(), ": ",
              kMaximum ? "argmax" : "argmin", "(): does not support bool input");
  auto& builder = context.builder();
  Value input = operands[0].value;
  const bool keepdim = context.Bool(operands[2]);
  if (operands[1].is_none()) {
    TORCH_CHECK(input.type().NumElements() > 0, context.op_name(),
                ": Expected reduction dim to be specified for input.numel() == 0.");
    Value flat = builder.Reshape(input, {input.type().NumElements()});
    Value index = ArgExtreme(context, flat, 0, kMaximum, false).second;
    if (keepdim) return {builder.Reshape(index, std::vector<int64_t>(input.rank(), 1))};
    return {index};
  }
  if (input.rank() == 0) return {context.ConstantInt(0, c10::kLong)};
  const int64_t dim = context.WrapDim(context.Int(operands[1]), input.rank());
  return {ArgExtreme(context, input, dim, kMaximum, keepdim).second};
}
TORCH_TPU_LOWERING(ArgExtremeOp<true>, "aten::argmax", "aten::argmax.out");
TORCH_TPU_LOWERING(ArgExtremeOp<false>, "aten::argmin", "aten::argmin.out");

c10::ScalarType ProductDtype(c10::ScalarType input, std::optional<c10::ScalarType> requested) {
  if (requested) return *requested;
  return c10::isIntegralType(input, true) ? c10::kLong : input;
}

// prod(self, *, ScalarType? dtype=None) / prod.dim_int(self, int dim, bool keepdim, *, dtype)
std::vector<Value> Product(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  if (operands.size() == 2) {
    const auto dtype = ProductDtype(self.dtype, context.OptionalDtype(operands[1]));
    Operand none;
    return {ReduceOver(context, context.Convert(self.value, dtype),
                       ReductionDims(context, none, self.value.rank()), ReduceKind::kProduct,
                       false)};
  }
  const auto dtype = ProductDtype(self.dtype, context.OptionalDtype(operands[3]));
  std::vector<int64_t> dims = {
      self.value.rank() == 0 ? 0 : context.WrapDim(context.Int(operands[1]), self.value.rank())};
  if (self.value.rank() == 0) return {context.Convert(self.value, dtype)};
  return {ReduceOver(context, context.Convert(self.value, dtype), dims, ReduceKind::kProduct,
                     context.Bool(operands[2]))};
}
TORCH_TPU_LOWERING(Product, "aten::prod");
TORCH_TPU_LOWERING(Product, "aten::prod.dim_int", "aten::prod.int_out");

// any/all: .dim(self, int dim, keepdim), .dims(self, int[]? dim, keepdim), (self)
template <ReduceKind kKind>
std::vector<Value> Logical(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  Value input = context.Convert(self.value, c10::kBool);
  Operand none;
  const auto dims = ReductionDims(context, operands.size() > 1 ? operands[1] : none, input.rank());
  const bool keepdim = operands.size() > 2 && context.Bool(operands[2]);
  Value result = input.rank() == 0 ? input : ReduceOver(context, input, dims, kKind, keepdim);
  // uint8 inputs give uint8 results, like PyTorch.
  return {self.dtype == c10::kByte ? context.Convert(result, c10::kByte) : result};
}
TORCH_TPU_LOWERING(Logical<ReduceKind::kOr>, "aten::any", "aten::any.all_out");
TORCH_TPU_LOWERING(Logical<ReduceKind::kOr>, "aten::any.dim", "aten::any.out");
TORCH_TPU_LOWERING(Logical<ReduceKind::kOr>, "aten::any.dims", "aten::any.dims_out");
TORCH_TPU_LOWERING(Logical<ReduceKind::kAnd>, "aten::all", "aten::all.all_out");
TORCH_TPU_LOWERING(Logical<ReduceKind::kAnd>, "aten::all.dim", "aten::all.out");
TORCH_TPU_LOWERING(Logical<ReduceKind::kAnd>, "aten::all.dims", "aten::all.dims_out");

// (variance, mean) of self over dims with Bessel-style correction, computed in f32 for halves.
// `correction` is None (1) or a runtime scalar.
std::pair<Value, Value> VarianceAndMean(LoweringContext& context, const Operand& self,
                                        const std::vector<int64_t>& dims, const Operand& correction,
                                        bool keepdim) {
  auto& builder = context.builder();
  TORCH_CHECK(c10::isFloatingType(self.dtype), context.op_name(),
              ": std and var only support floating point and complex dtypes");
  const c10::ScalarType compute = ComputeDtype(self.dtype);
  Value x = context.Convert(self.value, compute);
  int64_t count = 1;
  for (int64_t dim : dims) count *= x.dims()[dim];
  Value sum = ReduceOver(context, x, dims, ReduceKind::kSum, true);
  Value mean =
      builder.Divide(sum, context.Constant(static_cast<double>(count), compute, sum.dims()));
  Value centered = builder.Subtract(x, context.BroadcastTo(mean, x.dims()));
  Value squares =
      ReduceOver(context, builder.Multiply(centered, centered), dims, ReduceKind::kSum, keepdim);
  Value correction_value = correction.is_none() ? context.Constant(1.0, compute)
                                                : context.Convert(correction.value, compute);
  Value divisor = builder.Maximum(
      builder.Subtract(context.Constant(static_cast<double>(count), compute), correction_value),
      context.Constant(0.0, compute));
  Value variance = builder.Divide(squares, context.BroadcastTo(divisor, squares.dims()));
  if (!keepdim) mean = builder.Reshape(mean, variance.dims());
  return {context.Convert(variance, self.dtype), context.Convert(mean, self.dtype)};
}

// var.correction / std.correction(self, int[1]? dim=None, *, Scalar? correction=None, bool
// keepdim=False)
template <bool kStd, bool kWithMean>
std::vector<Value> Variance(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  const auto dims = ReductionDims(context, operands[1], self.value.rank());
  auto [variance, mean] =
      VarianceAndMean(context, self, dims, operands[2], context.Bool(operands[3]));
  Value result = variance;
  if (kStd) {
    const c10::ScalarType compute = ComputeDtype(self.dtype);
    result =
        context.Convert(context.builder().Sqrt(context.Convert(variance, compute)), self.dtype);
  }
  if (kWithMean) return {result, mean};
  return {result};
}
TORCH_TPU_LOWERING((Variance<false, false>), "aten::var.correction", "aten::var.correction_out");
TORCH_TPU_LOWERING((Variance<true, false>), "aten::std.correction", "aten::std.correction_out");
TORCH_TPU_LOWERING((Variance<false, true>), "aten::var_mean.correction");
TORCH_TPU_LOWERING((Variance<true, true>), "aten::std_mean.correction");

// logsumexp(self, int[1] dim, bool keepdim=False)
std::vector<Value> LogSumExp(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  auto& builder = context.builder();
  const c10::ScalarType result_dtype =
      c10::isFloatingType(self.dtype) ? self.dtype : c10::get_default_dtype_as_scalartype();
  const c10::ScalarType compute = ComputeDtype(result_dtype);
  Value x = context.Convert(self.value, compute);
  const auto dims = ReductionDims(context, operands[1], x.rank());
  const bool keepdim = context.Bool(operands[2]);
  Value maximum = ReduceOver(context, x, dims, ReduceKind::kMax, true);
  // An all -inf slice would give inf - inf; use 0 as its shift instead.
  Value finite = builder.IsFinite(maximum);
  maximum = builder.Select(finite, maximum, context.Constant(0.0, compute, maximum.dims()));
  Value shifted = builder.Exp(builder.Subtract(x, context.BroadcastTo(maximum, x.dims())));
  Value sum = ReduceOver(context, shifted, dims, ReduceKind::kSum, true);
  Value result = builder.Add(builder.Log(sum), maximum);
  if (!keepdim) {
    std::vector<int64_t> reduced;
    for (int64_t d = 0; d < x.rank(); ++d) {
      if (std::find(dims.begin(), dims.end(), d) == dims.end()) reduced.push_back(x.dims()[d]);
    }
    result = builder.Reshape(result, reduced);
  }
  return {context.Convert(result, result_dtype)};
}
TORCH_TPU_LOWERING(LogSumExp, "aten::logsumexp", "aten::logsumexp.out");

// The vector norm of order `order` (a runtime scalar) of `input` over `dims`, in input's dtype.
Value NormOver(LoweringContext& context, Value input, Value order_value,
               const std::vector<int64_t>& dims, bool keepdim) {
  auto& builder = context.builder();
  const c10::ScalarType compute = LoweringContext::DtypeOf(input);
  Value x = builder.Abs(input);
  // The order is a runtime scalar; the common orders get exact formulas, chosen on the device.
  Value order = context.Convert(order_value, compute);
  auto splat = [&](double value, const Value& like) {
    return context.Constant(value, compute, like.dims());
  };
  Value ord = context.BroadcastTo(order, x.dims());
  Value powered = builder.Power(x, ord);
  Value general_sum = ReduceOver(context, powered, dims, ReduceKind::kSum, keepdim);
  Value ord_reduced = context.BroadcastTo(order, general_sum.dims());
  Value general = builder.Power(general_sum, builder.Divide(splat(1.0, general_sum), ord_reduced));
  Value two =
      builder.Sqrt(ReduceOver(context, builder.Multiply(x, x), dims, ReduceKind::kSum, keepdim));
  Value one = ReduceOver(context, x, dims, ReduceKind::kSum, keepdim);
  Value infinity = ReduceOver(context, x, dims, ReduceKind::kMax, keepdim);
  Value negative_infinity = ReduceOver(context, x, dims, ReduceKind::kMin, keepdim);
  Value zero = ReduceOver(
      context,
      context.Convert(builder.Compare(x, splat(0.0, x), FunctionBuilder::ComparisonDirection::kNe),
                      compute),
      dims, ReduceKind::kSum, keepdim);
  auto is = [&](double value) {
    return builder.Compare(ord_reduced, splat(value, ord_reduced), Direction::kEq);
  };
  Value result = builder.Select(is(2.0), two, general);
  result = builder.Select(is(1.0), one, result);
  result = builder.Select(is(INFINITY), infinity, result);
  result = builder.Select(is(-INFINITY), negative_infinity, result);
  return builder.Select(is(0.0), zero, result);
}

// linalg_vector_norm(self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *, ScalarType?
// dtype=None)
std::vector<Value> VectorNorm(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  const bool complex = c10::isComplexType(self.dtype);
  TORCH_CHECK(c10::isFloatingType(self.dtype) || complex, context.op_name(),
              ": linalg.vector_norm: Expected a floating point or complex tensor as input. Got ",
              self.dtype);
  TORCH_CHECK(
      operands[1].kind == Operand::Kind::kScalar || operands[1].kind == Operand::Kind::kStatic,
      context.op_name(), ": ord must be a number");
  const auto requested = context.OptionalDtype(operands[4]);
  if (requested) {
    const c10::ScalarType dtype = *requested;
    TORCH_CHECK(c10::isFloatingType(dtype) || c10::isComplexType(dtype), context.op_name(),
                ": linalg.vector_norm: dtype should be floating point or complex, but got ",
                dtype);
    TORCH_CHECK(complex == c10::isComplexType(dtype), context.op_name(),
                ": linalg.vector_norm: dtype should be ", complex ? "complex" : "real", " for ",
                complex ? "complex" : "real", " inputs, but got ", dtype);
    TORCH_CHECK(c10::promoteTypes(self.dtype, dtype) == dtype, context.op_name(),
                ": linalg.vector_norm: the dtype of the input (", self.dtype,
                ") should be convertible without narrowing to the specified dtype (", dtype, ")");
  }
  // The norm of complex numbers is the norm of their moduli, a real number.
  const c10::ScalarType input_dtype = requested.value_or(self.dtype);
  const c10::ScalarType result_dtype = c10::toRealValueType(input_dtype);
  const c10::ScalarType compute = ComputeDtype(result_dtype);
  Value x = complex ? context.builder().Abs(context.Convert(self.value, input_dtype))
                    : context.Convert(self.value, compute);
  const auto dims = ReductionDims(context, operands[2], x.rank());
  Value result = NormOver(context, x, operands[1].value, dims, context.Bool(operands[3]));
  return {context.Convert(result, result_dtype)};
}
TORCH_TPU_LOWERING(VectorNorm, "aten::linalg_vector_norm", "aten::linalg_vector_norm.out");

// renorm(self, Scalar p, int dim, Scalar maxnorm): each slice along dim whose p-norm exceeds
// maxnorm is scaled to maxnorm / (norm + 1e-7), CPU's factor.
std::vector<Value> Renorm(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  auto& b = context.builder();
  TORCH_CHECK(c10::isFloatingType(self.dtype), context.op_name(),
              ": renorm: Expected a floating point tensor as input. Got ", self.dtype);
  TORCH_CHECK(self.value.rank() > 1, context.op_name(),
              ": renorm: input needs at least 2 dimensions, got ", self.value.rank(),
              " dimensions");
  const c10::ScalarType compute = ComputeDtype(self.dtype);
  Value x = context.Convert(self.value, compute);
  const int64_t dim = context.WrapDim(context.Int(operands[2]), x.rank());
  std::vector<int64_t> others;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (d != dim) others.push_back(d);
  }
  Value norm = NormOver(context, x, operands[1].value, others, /*keepdim=*/true);
  Value maxnorm = context.BroadcastTo(context.Convert(operands[3].value, compute), norm.dims());
  // CPU keeps the factor in a tensor of the input dtype: half types round it before the product.
  Value factor = RoundThrough(
      context,
      b.Select(b.Compare(norm, maxnorm, FunctionBuilder::ComparisonDirection::kGt),
               b.Divide(maxnorm, b.Add(norm, context.Constant(1e-7, compute, norm.dims()))),
               context.Constant(1.0, compute, norm.dims())),
      self.dtype);
  return {context.Convert(b.Multiply(x, context.BroadcastTo(factor, x.dims())), self.dtype)};
}
TORCH_TPU_LOWERING(Renorm, "aten::renorm", "aten::renorm_", "aten::renorm.out");

// embedding_renorm(self, indices, float max_norm, float norm_type), what nn.Embedding(max_norm=)
// runs before each lookup: each row of the 2-D `self` that `indices` names (negative indices
// wrap, as CPU's row selection does) is scaled by max_norm / (norm + 1e-7) when its
// norm_type-norm exceeds max_norm. A row named twice is scaled once: every copy scatters the
// same scaled row, computed from the row as it was.
std::vector<Value> EmbeddingRenorm(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  const Operand& indices = operands[1];
  auto& b = context.builder();
  TORCH_CHECK(self.value.rank() == 2, context.op_name(), ": Expected 2-dimensional tensor, but got ",
              self.value.rank(),
              "-dimensional tensor for argument #1 'self' (while checking arguments for "
              "embedding_renorm_)");
  TORCH_CHECK(indices.dtype == c10::kLong || indices.dtype == c10::kInt, context.op_name(),
              ": Expected tensor for argument #2 'indices' to have one of the following scalar "
              "types: Long, Int; but got ",
              indices.dtype, " instead (while checking arguments for embedding_renorm_)");
  TORCH_CHECK(c10::isFloatingType(self.dtype), context.op_name(),
              ": embedding_renorm_: expected a floating point weight, got ", self.dtype);
  const int64_t rows = self.value.dims()[0], width = self.value.dims()[1];
  const int64_t count = indices.value.type().NumElements();
  if (count == 0 || rows == 0 || width == 0) return {self.value};
  Value index = b.Reshape(context.Convert(indices.value, c10::kLong), {count});
  context.CheckIndicesInRange(index, rows, /*negative_wraps=*/true);
  Value zero = b.ConstantInt(stablehlo::ElementType::kS64, 0, {count});
  index = b.Select(b.Compare(index, zero, FunctionBuilder::ComparisonDirection::kLt),
                   b.Add(index, b.ConstantInt(stablehlo::ElementType::kS64, rows, {count})), index);
  Value index_column = b.Reshape(index, {count, 1});
  FunctionBuilder::GatherDimensions gather;
  gather.offset_dims = {1};
  gather.collapsed_slice_dims = {0};
  gather.start_index_map = {0};
  gather.index_vector_dim = 1;
  const c10::ScalarType compute = ComputeDtype(self.dtype);
  Value selected = context.Convert(b.Gather(self.value, index_column, gather, {1, width}), compute);
  // CPU reads each row's norm as a value of the weight's dtype.
  // max_norm and norm_type are `float` arguments: constants of the program.
  Value order = context.Constant(context.Double(operands[3]), compute, {});
  Value norm = RoundThrough(context, NormOver(context, selected, order, {1}, true), self.dtype);
  Value max_norm = context.Constant(context.Double(operands[2]), compute, norm.dims());
  Value factor = b.Select(
      b.Compare(norm, max_norm, FunctionBuilder::ComparisonDirection::kGt),
      b.Divide(max_norm, b.Add(norm, context.Constant(1e-7, compute, norm.dims()))),
      context.Constant(1.0, compute, norm.dims()));
  Value scaled = context.Convert(
      b.Multiply(selected, context.BroadcastTo(factor, selected.dims())), self.dtype);
  FunctionBuilder::ScatterDimensions scatter;
  scatter.update_window_dims = {1};
  scatter.inserted_window_dims = {0};
  scatter.scatter_dims_to_operand_dims = {0};
  scatter.index_vector_dim = 1;
  return {b.Scatter({self.value}, index_column, {scaled}, scatter,
                    FunctionBuilder::RegionBody())[0]};
}
TORCH_TPU_LOWERING(EmbeddingRenorm, "aten::embedding_renorm", "aten::embedding_renorm_",
                   "aten::embedding_renorm.out");

// cumsum / cumprod(self, int dim, *, ScalarType? dtype=None): an inclusive scan as a window
// reduction over all preceding elements.
template <ReduceKind kKind>
std::vector<Value> Cumulative(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  auto& builder = context.builder();
  const auto requested = context.OptionalDtype(operands[2]);
  const c10::ScalarType dtype =
      requested ? *requested : (c10::isIntegralType(self.dtype, true) ? c10::kLong : self.dtype);
  // Half types accumulate in f32 and round each output once, as on CPU.
  Value x = context.Convert(context.Convert(self.value, dtype), ComputeDtype(dtype));
  if (x.rank() == 0) return {context.Convert(x, dtype)};
  const int64_t dim = context.WrapDim(context.Int(operands[1]), x.rank());
  const int64_t length = x.dims()[dim];
  if (length == 0) return {context.Convert(x, dtype)};
  std::vector<int64_t> window(x.rank(), 1);
  window[dim] = length;
  std::vector<std::pair<int64_t, int64_t>> padding(x.rank(), {0, 0});
  padding[dim] = {length - 1, 0};
  const ElementType type = x.element_type();
  Value init = builder.Constant(type, kKind == ReduceKind::kSum ? 0.0 : 1.0);
  Value scan = builder.ReduceWindow(
      {x}, {init}, window, {}, {}, {}, padding,
      [](FunctionBuilder& body, std::span<const Value> args) {
        return std::vector<Value>{kKind == ReduceKind::kSum ? body.Add(args[0], args[1])
                                                            : body.Multiply(args[0], args[1])};
      })[0];
  return {context.Convert(scan, dtype)};
}
TORCH_TPU_LOWERING(Cumulative<ReduceKind::kSum>, "aten::cumsum", "aten::cumsum_",
                   "aten::cumsum.out");
TORCH_TPU_LOWERING(Cumulative<ReduceKind::kProduct>, "aten::cumprod", "aten::cumprod_",
                   "aten::cumprod.out");

// nansum(self, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None)
std::vector<Value> NanSum(LoweringContext& context, std::span<const Operand> operands) {
  const Operand& self = operands[0];
  auto& builder = context.builder();
  const c10::ScalarType dtype = SumDtype(self.dtype, context.OptionalDtype(operands[3]));
  Value x = context.Convert(self.value, dtype);
  if (c10::isFloatingType(dtype)) {
    Value zero = context.Constant(0.0, dtype, x.dims());
    x = builder.Select(builder.Compare(x, x, FunctionBuilder::ComparisonDirection::kNe), zero, x);
  }
  return {SumOver(context, x, ReductionDims(context, operands[1], x.rank()),
                  context.Bool(operands[2]))};
}
TORCH_TPU_LOWERING(NanSum, "aten::nansum", "aten::nansum.out");

// aminmax(self, *, int? dim=None, bool keepdim=False) -> (min, max)
std::vector<Value> AminMax(LoweringContext& context, std::span<const Operand> operands) {
  Value x = operands[0].value;
  Operand dims;
  if (!operands[1].is_none()) dims = operands[1];
  const auto reduce = ReductionDims(context, dims, x.rank());
  const bool keepdim = context.Bool(operands[2]);
  return {ReduceOver(context, x, reduce, ReduceKind::kMin, keepdim),
          ReduceOver(context, x, reduce, ReduceKind::kMax, keepdim)};
}
TORCH_TPU_LOWERING(AminMax, "aten::aminmax", "aten::aminmax.out");

// norm.ScalarOpt_dim(self, Scalar? p, int[1] dim, bool keepdim=False), norm.Scalar(self, p=2)
// and norm.ScalarOpt_dim_dtype(..., *, ScalarType dtype): linalg_vector_norm with PyTorch's
// argument order.
std::vector<Value> Norm(LoweringContext& context, std::span<const Operand> operands) {
  Operand order = operands[1];
  if (order.is_none()) {
    order = Operand{};
    order.kind = Operand::Kind::kStatic;
    order.ivalue = c10::IValue(2.0);
  }
  if (order.kind == Operand::Kind::kStatic) {
    // linalg_vector_norm takes the order as a runtime scalar value.
    order.kind = Operand::Kind::kScalar;
    order.value = context.Constant(order.ivalue.toScalar().toDouble(), c10::kDouble);
    order.dtype = c10::kDouble;
  }
  Operand dims, keepdim, dtype;
  keepdim.ivalue = c10::IValue(false);
  if (operands.size() >= 4) {
    dims = operands[2];
    keepdim = operands[3];
  }
  if (operands.size() >= 5) dtype = operands[4];
  std::vector<Operand> forwarded = {operands[0], order, dims, keepdim, dtype};
  return VectorNorm(context, forwarded);
}
TORCH_TPU_LOWERING(Norm, "aten::norm.ScalarOpt_dim", "aten::norm.out");
TORCH_TPU_LOWERING(Norm, "aten::norm.ScalarOpt_dim_dtype", "aten::norm.dtype_out");
TORCH_TPU_LOWERING(Norm, "aten::norm.Scalar", "aten::norm.Scalar_out");

}  // namespace

std::vector<int64_t> ReductionDims(LoweringContext& context, const Operand& dims, int64_t rank) {
  std::vector<int64_t> result;
  if (rank == 0) {
    // A 0-d tensor accepts dim 0 / -1 but has nothing to reduce.
    if (!dims.is_none()) {
      for (int64_t dim : context.IntList(dims)) context.WrapDim(dim, rank);
    }
    return result;
  }
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

std::vector<int64_t> KeptDims(const std::vector<int64_t>& dims,
                              const std::vector<int64_t>& reduced) {
  std::vector<int64_t> kept = dims;
  for (int64_t dim : reduced) kept[dim] = 1;
  return kept;
}

Value ReduceOver(LoweringContext& context, Value input, const std::vector<int64_t>& dims,
                 ReduceKind kind, bool keepdim) {
  auto& builder = context.builder();
  if (dims.empty()) return input;
  const ElementType type = input.element_type();
  Value init;
  switch (kind) {
    case ReduceKind::kSum:
      init = builder.Constant(type, 0.0);
      break;
    case ReduceKind::kProduct:
      init = builder.Constant(type, 1.0);
      break;
    case ReduceKind::kAnd:
      init = builder.Constant(type, 1.0);
      break;
    case ReduceKind::kOr:
    case ReduceKind::kXor:
      init = builder.Constant(type, 0.0);
      break;
    case ReduceKind::kMax:
    case ReduceKind::kMin:
      init = ExtremeIdentity(builder, type, kind == ReduceKind::kMax);
      break;
  }
  Value result = builder.Reduce(
      {input}, {init}, dims, [kind](FunctionBuilder& body, std::span<const Value> args) {
        switch (kind) {
          case ReduceKind::kSum:
            return std::vector<Value>{body.Add(args[0], args[1])};
          case ReduceKind::kProduct:
            return std::vector<Value>{body.Multiply(args[0], args[1])};
          case ReduceKind::kMax:
            return std::vector<Value>{NanPropagatingExtremum(body, args[0], args[1], true)};
          case ReduceKind::kMin:
            return std::vector<Value>{NanPropagatingExtremum(body, args[0], args[1], false)};
          case ReduceKind::kAnd:
            return std::vector<Value>{body.And(args[0], args[1])};
          case ReduceKind::kOr:
            return std::vector<Value>{body.Or(args[0], args[1])};
          case ReduceKind::kXor:
            return std::vector<Value>{body.Xor(args[0], args[1])};
        }
        return std::vector<Value>{};
      })[0];
  if (!keepdim) return result;
  return builder.Reshape(result, KeptDims(input.dims(), dims));
}

}  // namespace torch_tpu::lowering

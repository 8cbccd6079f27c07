#include "lowering/context.h"

#include <c10/util/Exception.h>

#include <sstream>

#include "lowering/float8.h"

namespace torch_tpu::lowering {

Value LoweringContext::Convert(Value value, c10::ScalarType dtype) {
  const ElementType target = ToElementTypeOrThrow(dtype, op_name_.c_str());
  if (value.element_type() == target) return value;
  // float8 goes through float32 both ways, as PyTorch's conversions do.
  if (stablehlo::IsFloat8(value.element_type())) {
    return Convert(Float32FromFloat8(builder_, value), dtype);
  }
  if (stablehlo::IsFloat8(target)) {
    return Float8FromFloat32(builder_, Convert(value, c10::kFloat), target);
  }
  if (stablehlo::IsComplex(value.element_type()) && !stablehlo::IsComplex(target)) {
    // PyTorch casts complex to bool as "nonzero" and to real types by dropping the imaginary part.
    if (target == ElementType::kPred) {
      return builder_.Compare(value, builder_.Constant(value.element_type(), 0.0, value.dims()),
                              stablehlo::FunctionBuilder::ComparisonDirection::kNe);
    }
    return builder_.Convert(builder_.Real(value), target);
  }
  if (value.element_type() == ElementType::kPred && stablehlo::IsComplex(target)) {
    return builder_.OptimizationBarrier(
        builder_.Convert(builder_.Convert(value, stablehlo::ComplexPartType(target)), target));
  }
  if (value.element_type() == ElementType::kPred && stablehlo::IsFloat(target)) {
    // XLA's algebraic simplifier rewrites x * convert(mask) into select(mask, x, 0), which gives
    // 0 where PyTorch (IEEE) gives NaN for inf * False and nan * False: the barrier keeps the
    // converted mask a plain number.
    return builder_.OptimizationBarrier(builder_.Convert(value, target));
  }
  return builder_.Convert(value, target);
}

Value LoweringContext::BroadcastTo(Value value, const std::vector<int64_t>& dims) {
  if (value.dims() == dims) return value;
  const int64_t rank = static_cast<int64_t>(dims.size());
  const int64_t value_rank = value.rank();
  TORCH_CHECK(value_rank <= rank, op_name_, ": cannot broadcast a tensor of rank ", value_rank,
              " to rank ", rank);
  // Size-1 dimensions that stretch are dropped first: broadcast_in_dim needs equal sizes or 1,
  // and reshaping them away keeps the op a pure broadcast.
  std::vector<int64_t> kept_dims, broadcast_dimensions;
  for (int64_t i = 0; i < value_rank; ++i) {
    const int64_t target_dim = rank - value_rank + i;
    const int64_t size = value.dims()[i];
    TORCH_CHECK(size == dims[target_dim] || size == 1, op_name_, ": the size of tensor a (", size,
                ") must match the size of tensor b (", dims[target_dim],
                ") at non-singleton dimension ", i);
    if (size == dims[target_dim]) {
      kept_dims.push_back(size);
      broadcast_dimensions.push_back(target_dim);
    }
  }
  if (static_cast<int64_t>(kept_dims.size()) != value_rank) {
    value = builder_.Reshape(value, kept_dims);
  }
  return builder_.BroadcastInDim(value, dims, broadcast_dimensions);
}

Value LoweringContext::Constant(double value, c10::ScalarType dtype,
                                const std::vector<int64_t>& dims) {
  return builder_.Constant(ToElementTypeOrThrow(dtype, op_name_.c_str()), value, dims);
}

Value LoweringContext::ConstantInt(int64_t value, c10::ScalarType dtype,
                                   const std::vector<int64_t>& dims) {
  return builder_.ConstantInt(ToElementTypeOrThrow(dtype, op_name_.c_str()), value, dims);
}

std::vector<int64_t> LoweringContext::BroadcastShape(
    std::span<const std::vector<int64_t>> shapes) const {
  size_t rank = 0;
  for (const auto& shape : shapes) rank = std::max(rank, shape.size());
  std::vector<int64_t> result(rank, 1);
  for (const auto& shape : shapes) {
    const size_t offset = rank - shape.size();
    for (size_t i = 0; i < shape.size(); ++i) {
      int64_t& target = result[offset + i];
      if (shape[i] == target || shape[i] == 1) continue;
      TORCH_CHECK(target == 1, op_name_, ": the size of tensor a (", target,
                  ") must match the size of tensor b (", shape[i], ") at non-singleton dimension ",
                  offset + i);
      target = shape[i];
    }
  }
  return result;
}

c10::ScalarType LoweringContext::PromotedType(std::span<const Operand> operands) const {
  std::vector<PromotionInput> inputs;
  for (const Operand& operand : operands) {
    if (!operand.is_value()) continue;
    PromotionInput::Category category = PromotionInput::Category::kDimensioned;
    if (operand.kind == Operand::Kind::kScalar || operand.wrapped_number) {
      category = PromotionInput::Category::kWrappedNumber;
    } else if (operand.value.rank() == 0) {
      category = PromotionInput::Category::kZeroDim;
    }
    inputs.push_back({operand.dtype, category});
  }
  return ResultType(inputs);
}

std::vector<Value> LoweringContext::PromoteAndBroadcast(std::span<const Operand> operands,
                                                        c10::ScalarType dtype) {
  std::vector<std::vector<int64_t>> shapes;
  for (const Operand& operand : operands) {
    if (operand.is_value()) shapes.push_back(operand.value.dims());
  }
  const std::vector<int64_t> shape = BroadcastShape(shapes);
  std::vector<Value> values;
  for (const Operand& operand : operands) {
    if (operand.is_value()) values.push_back(BroadcastTo(Convert(operand.value, dtype), shape));
  }
  return values;
}

int64_t LoweringContext::Int(const Operand& operand) const {
  TORCH_CHECK(operand.kind == Operand::Kind::kStatic && operand.ivalue.isInt(), op_name_,
              ": expected an int argument");
  return operand.ivalue.toInt();
}

double LoweringContext::Double(const Operand& operand) const {
  TORCH_CHECK(operand.kind == Operand::Kind::kStatic &&
                  (operand.ivalue.isDouble() || operand.ivalue.isInt()),
              op_name_, ": expected a float argument");
  return operand.ivalue.isDouble() ? operand.ivalue.toDouble()
                                   : static_cast<double>(operand.ivalue.toInt());
}

bool LoweringContext::Bool(const Operand& operand) const {
  TORCH_CHECK(operand.kind == Operand::Kind::kStatic && operand.ivalue.isBool(), op_name_,
              ": expected a bool argument");
  return operand.ivalue.toBool();
}

std::vector<int64_t> LoweringContext::IntList(const Operand& operand) const {
  if (operand.kind == Operand::Kind::kStatic && operand.ivalue.isInt()) {
    return {operand.ivalue.toInt()};
  }
  TORCH_CHECK(operand.kind == Operand::Kind::kStatic && operand.ivalue.isIntList(), op_name_,
              ": expected an int[] argument");
  return operand.ivalue.toIntVector();
}

std::optional<c10::ScalarType> LoweringContext::OptionalDtype(const Operand& operand) const {
  if (operand.is_none()) return std::nullopt;
  TORCH_CHECK(operand.kind == Operand::Kind::kStatic && operand.ivalue.isInt(), op_name_,
              ": expected a dtype argument");
  return static_cast<c10::ScalarType>(operand.ivalue.toInt());
}

stablehlo::Value LoweringContext::rng_state(size_t index) const {
  TORCH_CHECK(index < rng_states_.size(), op_name_, ": missing random generator state");
  return rng_states_[index];
}

int64_t LoweringContext::WrapDim(int64_t dim, int64_t rank) const {
  const int64_t bound = std::max<int64_t>(rank, 1);
  TORCH_CHECK_INDEX(dim >= -bound && dim < bound, op_name_,
                    ": dimension out of range (expected to be in range of [", -bound, ", ",
                    bound - 1, "], but got ", dim, ")");
  return dim < 0 ? dim + bound : dim;
}

int64_t LoweringContext::WrapExistingDim(int64_t dim, int64_t rank) const {
  TORCH_CHECK_INDEX(rank > 0, op_name_, ": Dimension specified as ", dim,
                    " but tensor has no dimensions");
  return WrapDim(dim, rank);
}

}  // namespace torch_tpu::lowering

namespace torch_tpu::lowering {

void LoweringContext::CheckIndicesInRange(stablehlo::Value indices, int64_t bound,
                                          bool negative_wraps) {
  using Direction = stablehlo::FunctionBuilder::ComparisonDirection;
  const stablehlo::ElementType type = indices.element_type();
  if (indices.type().NumElements() == 0) return;
  stablehlo::Value low = builder_.ConstantInt(type, negative_wraps ? -bound : 0, indices.dims());
  stablehlo::Value high = builder_.ConstantInt(type, bound, indices.dims());
  stablehlo::Value outside = builder_.Or(builder_.Compare(indices, low, Direction::kLt),
                                         builder_.Compare(indices, high, Direction::kGe));
  std::vector<int64_t> all_dims(indices.dims().size());
  for (size_t d = 0; d < all_dims.size(); ++d) all_dims[d] = static_cast<int64_t>(d);
  stablehlo::Value any = outside;
  if (!all_dims.empty()) {
    any = builder_.Reduce(
        {outside}, {builder_.Constant(stablehlo::ElementType::kPred, 0.0)}, all_dims,
        [](stablehlo::FunctionBuilder& body, std::span<const stablehlo::Value> args) {
          return std::vector<stablehlo::Value>{body.Or(args[0], args[1])};
        })[0];
  }
  device_checks_.push_back({any, "index out of range: an index is not in [" +
                                     std::to_string(negative_wraps ? -bound : 0) + ", " +
                                     std::to_string(bound) + ")"});
}

void LoweringContext::CheckNotViolated(stablehlo::Value violated, std::string what) {
  device_checks_.push_back({violated, std::move(what)});
}

}  // namespace torch_tpu::lowering

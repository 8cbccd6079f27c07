// Which lowerings take float8 tensors, and how (lowering/float8.h). PyTorch's CPU kernels
// implement few ops for float8: copies, views and data movement, eq/ne, abs, mul, isnan, mm and
// addmm (isinf/isfinite for e5m2, the format with infinities). The same ops work on tpu; the rest
// raise NotImplementedError here instead of running XLA's float8 arithmetic, whose results CPU
// never gives.
#include <c10/util/Exception.h>

#include <algorithm>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "lowering/context.h"
#include "lowering/float8.h"

namespace torch_tpu::lowering {
namespace {

struct Float8Rule {
  enum class Kind {
    // Moves, selects or fills values: runs on the bit patterns (uint8), since XLA may compute
    // float8 data movement in a wider type (the CPU plugin's concatenate and select do), which
    // turns e5m2's NaN payloads into one NaN.
    kBits,
    kInFloat32,  // arithmetic: operands cast to the float8 result type, computed in float32
    kAsIs,       // the lowering handles float8 itself
    kAbs,        // CPU's float8 abs is `x < 0 ? -x : x`: -0 and NaN keep their bits
  };
  Kind kind = Kind::kBits;
  // kBits: the operands holding the values moved (each a tensor, a Python number or a tensor
  // list). Tensors must have the float8 dtype (else PyTorch's promotion error); Python numbers
  // are cast to it.
  std::vector<size_t> values = {0};
  // kBits: operands cast to the float8 dtype whatever their dtype (fill's value).
  std::vector<size_t> cast = {};
  // kInFloat32: Python numbers are cast to the float8 type first (comparisons do, as CPU's
  // TensorIterator casts them to the common dtype); else they stay as given (addmm's alpha).
  bool round_scalars = false;
  // CPU's mul kernel has no float8 path for a Python number or a CPU scalar operand.
  bool tensors_only = false;
  // Only for these float8 dtypes (empty: all four).
  std::vector<c10::ScalarType> only;
  // index_put: CPU implements accumulate=False only for float8; operand index of the flag.
  std::optional<size_t> false_flag;
};

const std::map<std::string, Float8Rule, std::less<>>& Rules() {
  using Kind = Float8Rule::Kind;
  static const auto* rules = new std::map<std::string, Float8Rule, std::less<>>{
      {"torch_tpu::broadcast_to", {}},
      {"aten::clone", {}},
      {"aten::cat", {}},
      {"aten::stack", {}},
      {"aten::index_select", {}},
      {"aten::flip", {}},
      {"aten::roll", {}},
      {"aten::repeat", {}},
      {"aten::index.Tensor", {}},
      {"aten::index_put", {.values = {0, 2}, .false_flag = 3}},
      {"aten::_index_put_impl", {.values = {0, 2}, .false_flag = 3}},
      {"aten::where.self", {.values = {1, 2}}},
      {"aten::fill.Scalar", {.cast = {1}}},
      {"aten::fill.Tensor", {.cast = {1}}},
      {"aten::zero", {}},
      {"aten::eq.Tensor", {Kind::kInFloat32, {}, {}, true}},
      {"aten::eq.Scalar", {Kind::kInFloat32, {}, {}, true}},
      {"aten::ne.Tensor", {Kind::kInFloat32, {}, {}, true}},
      {"aten::ne.Scalar", {Kind::kInFloat32, {}, {}, true}},
      {"aten::isnan", {Kind::kInFloat32}},
      {"aten::isinf", {Kind::kInFloat32, {}, {}, false, false, {c10::kFloat8_e5m2}}},
      {"aten::isfinite", {Kind::kInFloat32, {}, {}, false, false, {c10::kFloat8_e5m2}}},
      {"aten::abs", {Kind::kAbs}},
      {"aten::mul.Tensor", {Kind::kInFloat32, {}, {}, false, true}},
      {"aten::mm", {Kind::kInFloat32}},
      {"aten::addmm", {Kind::kInFloat32}},
      // lowering/scaled_mm.cc converts its float8 operands itself.
      {"aten::_scaled_mm", {Kind::kAsIs}},
  };
  return *rules;
}

// The first float8 dtype among the tensor operands, if any.
std::optional<c10::ScalarType> Float8Operand(std::span<const Operand> operands) {
  for (const Operand& operand : operands) {
    if (operand.kind == Operand::Kind::kTensor && c10::isFloat8Type(operand.dtype)) {
      return operand.dtype;
    }
    if (operand.kind == Operand::Kind::kTensorList) {
      for (c10::ScalarType dtype : operand.dtypes) {
        if (c10::isFloat8Type(dtype)) return dtype;
      }
    }
  }
  return std::nullopt;
}

[[noreturn]] void RaiseUnsupported(const std::string& op, c10::ScalarType dtype) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, op, ": not implemented for '", dtype,
                              "' on the tpu device (as in PyTorch's CPU kernels)");
}

// Operands cast to the float8 result type and then to float32, so that the lowering computes in
// float32 and `result` is rounded once.
std::vector<Value> InFloat32(const Float8Rule& rule, const LoweringFunction& function,
                             LoweringContext& context, std::span<const Operand> operands,
                             c10::ScalarType float8) {
  // Raises PyTorch's "Promotion for Float8 Types is not supported" for mixed dtypes.
  const c10::ScalarType result = context.PromotedType(operands);
  if (!c10::isFloat8Type(result)) RaiseUnsupported(context.op_name(), float8);
  std::vector<Operand> converted(operands.begin(), operands.end());
  for (Operand& operand : converted) {
    const bool scalar = operand.kind == Operand::Kind::kScalar || operand.wrapped_number;
    if (!operand.is_value()) continue;
    if (rule.tensors_only && scalar) RaiseUnsupported(context.op_name(), float8);
    if (scalar && !rule.round_scalars) continue;
    operand.value = context.Convert(context.Convert(operand.value, result), c10::kFloat);
    operand.dtype = c10::kFloat;
  }
  std::vector<Value> results = function(context, converted);
  for (Value& value : results) {
    if (value.element_type() == ElementType::kF32) value = context.Convert(value, result);
  }
  return results;
}

// The op on the operands' bit patterns: float8 values as uint8, results back as float8.
std::vector<Value> OnBits(const Float8Rule& rule, const LoweringFunction& function,
                          LoweringContext& context, std::span<const Operand> operands,
                          c10::ScalarType float8) {
  auto& b = context.builder();
  const ElementType type = ToElementTypeOrThrow(float8, context.op_name().c_str());
  const auto as_bits = [&](Operand& operand, bool cast) {
    if (operand.kind == Operand::Kind::kTensorList) {
      for (size_t i = 0; i < operand.values.size(); ++i) {
        if (operand.dtypes[i] != float8) (void)c10::promoteTypes(float8, operand.dtypes[i]);
        operand.values[i] = b.BitcastConvert(operand.values[i], ElementType::kU8);
        operand.dtypes[i] = c10::kByte;
      }
      return;
    }
    if (!operand.is_value()) return;
    const bool scalar = operand.kind == Operand::Kind::kScalar || operand.wrapped_number;
    // Raises PyTorch's "Promotion for Float8 Types is not supported" for another dtype.
    if (!cast && !scalar && operand.dtype != float8) (void)c10::promoteTypes(float8, operand.dtype);
    operand.value = b.BitcastConvert(context.Convert(operand.value, float8), ElementType::kU8);
    operand.dtype = c10::kByte;
  };
  std::vector<Operand> converted(operands.begin(), operands.end());
  for (size_t index : rule.values) {
    if (index < converted.size()) as_bits(converted[index], /*cast=*/false);
  }
  for (size_t index : rule.cast) {
    if (index < converted.size()) as_bits(converted[index], /*cast=*/true);
  }
  std::vector<Value> results = function(context, converted);
  for (Value& value : results) {
    if (value.element_type() == ElementType::kU8) value = b.BitcastConvert(value, type);
  }
  return results;
}

Value Float8Abs(LoweringContext& context, const Value& value) {
  auto& b = context.builder();
  const Value negative = b.Compare(Float32FromFloat8(b, value),
                                   b.Constant(ElementType::kF32, 0.0, value.dims()),
                                   FunctionBuilder::ComparisonDirection::kLt);
  const Value code = b.BitcastConvert(value, ElementType::kU8);
  const Value magnitude = b.And(code, b.ConstantUnsigned(ElementType::kU8, 0x7F, value.dims()));
  return b.BitcastConvert(b.Select(negative, magnitude, code), value.element_type());
}

}  // namespace

LoweringFunction WithFloat8Rules(const std::string& functional, LoweringFunction function) {
  const auto found = Rules().find(functional);
  const Float8Rule* rule = found == Rules().end() ? nullptr : &found->second;
  return [functional, rule, function = std::move(function)](
             LoweringContext& context, std::span<const Operand> operands) -> std::vector<Value> {
    const std::optional<c10::ScalarType> float8 = Float8Operand(operands);
    if (!float8.has_value()) {
      std::vector<Value> results = function(context, operands);
      if (rule != nullptr) return results;
      for (const Value& value : results) {
        // A float8 result from other dtypes (a dtype= argument): CPU has no kernel either.
        if (stablehlo::IsFloat8(value.element_type())) {
          RaiseUnsupported(context.op_name(), LoweringContext::DtypeOf(value));
        }
      }
      return results;
    }
    if (rule == nullptr) RaiseUnsupported(context.op_name(), *float8);
    if (!rule->only.empty() &&
        std::find(rule->only.begin(), rule->only.end(), *float8) == rule->only.end()) {
      RaiseUnsupported(context.op_name(), *float8);
    }
    if (rule->false_flag.has_value() && *rule->false_flag < operands.size() &&
        context.Bool(operands[*rule->false_flag])) {
      RaiseUnsupported(context.op_name(), *float8);
    }
    if (rule->kind == Float8Rule::Kind::kAsIs) return function(context, operands);
    if (rule->kind == Float8Rule::Kind::kAbs) return {Float8Abs(context, operands[0].value)};
    if (rule->kind == Float8Rule::Kind::kBits) {
      return OnBits(*rule, function, context, operands, *float8);
    }
    return InFloat32(*rule, function, context, operands, *float8);
  };
}

}  // namespace torch_tpu::lowering

#include "aten/scalar_conversions.h"

#include <ATen/Dispatch.h>
#include <ATen/ScalarOps.h>
#include <ATen/native/TypeProperties.h>

#include <map>
#include <utility>

namespace torch_tpu::aten {
namespace {

struct Conversion {
  const char* scalar;
  std::vector<const char*> operands;
  // add/sub alpha: CPU's alpha_check (a lowering's check here) comes before the conversion.
  bool alpha = false;
  // sub and rsub add -alpha * other, so -alpha is what must fit.
  bool negated = false;
  // where's scalar branch: CPU lets half types round (to inf) instead.
  bool half_types_round = false;
};

const std::map<std::string, std::vector<Conversion>>& Conversions() {
  static const std::map<std::string, std::vector<Conversion>> table = {
      {"aten::fill.Scalar", {{"value", {"self"}}}},
      {"aten::masked_fill.Scalar", {{"value", {"self"}}}},
      {"aten::index_fill.int_Scalar", {{"value", {"self"}}}},
      {"aten::add.Tensor", {{"alpha", {"self", "other"}, true}}},
      {"aten::add.Scalar", {{"alpha", {"self", "other"}, true}}},
      {"aten::sub.Tensor", {{"alpha", {"self", "other"}, true, true}}},
      {"aten::sub.Scalar", {{"alpha", {"self", "other"}, true, true}}},
      {"aten::rsub.Tensor", {{"alpha", {"self", "other"}, true, true}}},
      {"aten::rsub.Scalar", {{"alpha", {"self", "other"}, true, true}}},
      {"aten::clamp", {{"min", {"self", "min", "max"}}, {"max", {"self", "min", "max"}}}},
      {"aten::clamp_min", {{"min", {"self", "min"}}}},
      {"aten::clamp_max", {{"max", {"self", "max"}}}},
      {"aten::where.ScalarOther", {{"other", {"self", "other"}, false, false, true}}},
      {"aten::where.ScalarSelf", {{"self", {"self", "other"}, false, false, true}}},
  };
  return table;
}

}  // namespace

std::vector<ScalarConversion> ScalarConversionsOf(const std::string& functional_name,
                                                  const c10::FunctionSchema& schema) {
  std::vector<ScalarConversion> conversions;
  auto found = Conversions().find(functional_name);
  if (found == Conversions().end()) return conversions;
  for (const Conversion& conversion : found->second) {
    auto scalar = schema.argumentIndexWithName(conversion.scalar);
    if (!scalar) continue;
    ScalarConversion resolved{*scalar, {}, conversion.alpha, conversion.negated,
                              conversion.half_types_round};
    for (const char* operand : conversion.operands) {
      if (auto index = schema.argumentIndexWithName(operand)) resolved.operands.push_back(*index);
    }
    conversions.push_back(std::move(resolved));
  }
  return conversions;
}

void CheckScalarConversions(const std::vector<ScalarConversion>& conversions,
                            const std::vector<c10::IValue>& arguments) {
  for (const ScalarConversion& conversion : conversions) {
    const c10::IValue& value = arguments[conversion.scalar];
    if (!value.isScalar()) continue;  // an absent clamp bound
    // add's default alpha converts exactly to every dtype (bool included): most calls skip
    // working out the result type.
    if (conversion.alpha && !conversion.negated && value.isInt() && value.toInt() == 1) continue;
    at::native::ResultTypeState state{};
    for (size_t index : conversion.operands) {
      const c10::IValue& operand = arguments[index];
      if (operand.isTensor() && operand.toTensor().defined()) {
        state = at::native::update_result_type_state(operand.toTensor(), state);
      } else if (operand.isScalar()) {
        at::Tensor wrapped = c10::scalar_to_tensor(operand.toScalar());
        wrapped.unsafeGetTensorImpl()->set_wrapped_number(true);
        state = at::native::update_result_type_state(wrapped, state);
      }
    }
    const c10::ScalarType dtype = at::native::result_type(state);
    if (conversion.half_types_round && (dtype == c10::kHalf || dtype == c10::kBFloat16)) continue;
    const c10::Scalar given = value.toScalar();
    if (conversion.alpha &&
        ((given.isBoolean() && dtype != c10::kBool) ||
         (c10::isIntegralType(dtype, /*includeBool=*/true) && !given.isIntegral(true)))) {
      continue;  // the lowering raises CPU's alpha error
    }
    // A bool alpha of sub is a bool subtraction, which the lowering rejects.
    if (conversion.negated && given.isBoolean()) continue;
    const c10::Scalar scalar = conversion.negated ? -given : given;
    switch (dtype) {
#define TORCH_TPU_CHECKED_CONVERSION(type, name) \
  case c10::ScalarType::name:                    \
    (void)scalar.to<type>();                     \
    break;
      AT_FORALL_SCALAR_TYPES_WITH_COMPLEX(TORCH_TPU_CHECKED_CONVERSION)
#undef TORCH_TPU_CHECKED_CONVERSION
      default:
        break;
    }
  }
}

}  // namespace torch_tpu::aten

// Helpers shared by the parts of an eager launch (exec/launch_internals.h).
#include "exec/launch_internals.h"

#include <c10/util/Exception.h>

#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>

#include "stablehlo/builder.h"

namespace torch_tpu::exec {

namespace launch_internals {

// "aten::add.Tensor(f32[3, 4], f32[4], 1.0)": the op and its inputs, for error messages.
std::string Describe(std::string_view op, const std::vector<c10::IValue>& operands) {
  std::ostringstream text;
  text << op << '(';
  auto tensor_text = [&](const at::Tensor& tensor) {
    text << tensor.scalar_type() << tensor.sizes();
    if (tensor.device().is_cpu()) text << " on cpu";
  };
  for (size_t i = 0; i < operands.size(); ++i) {
    if (i) text << ", ";
    const c10::IValue& value = operands[i];
    if (value.isTensor()) {
      tensor_text(value.toTensor());
    } else if (value.isTensorList()) {
      text << '[';
      const auto list = value.toTensorList();
      for (size_t k = 0; k < list.size(); ++k) {
        if (k) text << ", ";
        tensor_text(list.get(k));
      }
      text << ']';
    } else if (value.isOptionalTensorList()) {
      text << '[';
      const auto list = value.toOptionalTensorList();
      for (size_t k = 0; k < list.size(); ++k) {
        if (k) text << ", ";
        const std::optional<at::Tensor> entry = list.get(k);
        if (entry.has_value()) {
          tensor_text(*entry);
        } else {
          text << "None";
        }
      }
      text << ']';
    } else {
      text << value;
    }
  }
  text << ')';
  return text.str();
}

// Whether any tensor operand is complex.
bool HasComplexTensor(const std::vector<c10::IValue>& operands) {
  for (const c10::IValue& value : operands) {
    if (value.isTensor() && value.toTensor().is_complex()) return true;
    if (value.isTensorList()) {
      for (const at::Tensor& tensor : value.toTensorList()) {
        if (tensor.is_complex()) return true;
      }
    }
  }
  return false;
}

// A lowering failed to build. The builder rejects complex operands exactly where a lowering has
// no complex path: that is CPU's NotImplementedError for a dtype its kernel lacks.
[[noreturn]] void RaiseLoweringFailure(std::string_view op,
                                       const std::vector<c10::IValue>& operands,
                                       const std::exception& error) {
  const std::string description = Describe(op, operands);
  TORCH_CHECK_NOT_IMPLEMENTED(
      dynamic_cast<const stablehlo::BuilderError*>(&error) == nullptr ||
          !HasComplexTensor(operands),
      description, ": not implemented for complex dtypes on the tpu device (", error.what(), ")");
  TORCH_CHECK(false, description, ": ", error.what());
}

}  // namespace launch_internals

}  // namespace torch_tpu::exec

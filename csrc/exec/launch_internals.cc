// Helpers shared by the parts of an eager launch (exec/launch_internals.h).
#include "exec/launch_internals.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>

#include "exec/growing_shapes.h"
#include "exec/program_signature.h"
#include "exec/scalar_buffers.h"
#include "exec/view_io.h"
#include "lowering/dtype.h"
#include "runtime/storage_buffer.h"
#include "stablehlo/builder.h"

namespace torch_tpu::exec {

using runtime::StorageBuffer;
using stablehlo::ElementType;

namespace launch_internals {

// TORCH_TPU_GROWING_SHAPES=0: every launch gets its exact-shape program, and every result its own
// storage (exec/growing_shapes.h).
bool GrowingShapesEnabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("TORCH_TPU_GROWING_SHAPES");
    return !(value && std::strcmp(value, "0") == 0);
  }();
  return enabled;
}

StorageBuffer* StorageOf(const at::Tensor& tensor) {
  return static_cast<StorageBuffer*>(tensor.storage().data_ptr().get_context());
}

StridedView ViewOf(const at::Tensor& tensor) {
  return StridedView{tensor.sizes().vec(), tensor.strides().vec(), tensor.storage_offset()};
}

// How a program reads an operand: as laid out, or (`flat_elements` >= 0) a full-shape operand
// as its contiguous elements; 0-d operands stay 0-d so type promotion sees them as before.
StridedView ReadViewOf(const at::Tensor& tensor, int64_t flat_elements) {
  if (flat_elements < 0 || tensor.dim() == 0) return ViewOf(tensor);
  return StridedView{{flat_elements}, {1}, tensor.storage_offset()};
}

void AddReadView(ProgramSignature& signature, const at::Tensor& tensor, int64_t flat_elements) {
  if (flat_elements < 0 || tensor.dim() == 0) {
    signature.AddView(tensor);
    return;
  }
  const int64_t one = 1;
  signature.AddView(tensor.scalar_type(), c10::IntArrayRef(&flat_elements, 1),
                    c10::IntArrayRef(&one, 1), tensor.storage_offset());
  signature.AddViewBits(tensor);
}

HostScalar FromScalar(const c10::Scalar& scalar, std::string_view op) {
  HostScalar host{};
  if (scalar.isBoolean()) {
    host.type = ElementType::kPred;
    host.bytes[0] = scalar.toBool() ? 1 : 0;
    host.size = 1;
  } else if (scalar.isIntegral(/*includeBool=*/false)) {
    host.type = ElementType::kS64;
    int64_t value = scalar.toLong();
    std::memcpy(host.bytes, &value, sizeof(value));
    host.size = sizeof(value);
  } else if (scalar.isComplex()) {
    host.type = ElementType::kC128;
    const c10::complex<double> value = scalar.toComplexDouble();
    std::memcpy(host.bytes, &value, sizeof(value));
    host.size = sizeof(value);
  } else {
    host.type = ElementType::kF64;
    double value = scalar.toDouble();
    std::memcpy(host.bytes, &value, sizeof(value));
    host.size = sizeof(value);
  }
  return host;
}

HostScalar FromHostTensor(const at::Tensor& tensor, std::string_view op) {
  HostScalar host{};
  host.type = lowering::ToElementTypeOrThrow(tensor.scalar_type(), std::string(op).c_str());
  host.size = tensor.element_size();
  std::memcpy(host.bytes, tensor.const_data_ptr(), host.size);
  return host;
}

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

// Lowering an eager launch's op into a program, and its results' layouts.
#include "exec/launch_internals.h"

#include <c10/util/Exception.h>

#include <string>

#include "exec/growing_shapes.h"
#include "exec/program_builder.h"
#include "exec/scalar_buffers.h"
#include "exec/view_io.h"
#include "lowering/complex.h"
#include "lowering/context.h"
#include "lowering/matmul_precision.h"
#include "lowering/dtype.h"
#include "runtime/storage_buffer.h"
#include "stablehlo/builder.h"

namespace torch_tpu::exec {

using lowering::Operand;
using stablehlo::ElementType;
using stablehlo::Value;
using Kind = EagerLaunch::OperandKind;

namespace {

// How a program reads an operand: as laid out, or (`flat_elements` >= 0) a full-shape operand
// as its contiguous elements; 0-d operands stay 0-d so type promotion sees them as before.
StridedView ReadViewOf(const at::Tensor& tensor, int64_t flat_elements) {
  if (flat_elements < 0 || tensor.dim() == 0) return ViewOf(tensor);
  return StridedView{{flat_elements}, {1}, tensor.storage_offset()};
}

}  // namespace

std::vector<Value> EagerLaunch::Lower(const lowering::LoweringFunction& function,
                                      ProgramBuilder& program, std::span<const int> tensor_slots,
                                      std::span<const int> destination_slots,
                                      std::span<const HostScalar> host_scalars,
                                      const std::string& description,
                                      std::vector<bool>& written,
                                      const TensorReader* reader) const {
  const std::string op_name(op_name_);
  std::vector<Operand> lowering_operands;
  size_t tensor_index = 0, scalar_index = 0;
  auto read_tensor = [&](const at::Tensor& tensor) {
    const int slot = tensor_slots[tensor_index++];
    if (reader != nullptr) return (*reader)(tensor, slot);
    Value stored =
        program.Read(slot, lowering::ToElementTypeOrThrow(tensor.scalar_type(), op_name.c_str()),
                     ReadViewOf(tensor, FlatElementsFor(tensor)));
    return lowering::ApplyViewBits(program.builder(), stored, tensor.is_conj(), tensor.is_neg());
  };
  for (size_t i = 0; i < operands_.size(); ++i) {
    Operand operand;
    const c10::IValue& value = operands_[i];
    switch (operand_kinds_[i]) {
      case Kind::kTensor: {
        const at::Tensor& tensor = value.toTensor();
        operand.kind = Operand::Kind::kTensor;
        operand.dtype = tensor.scalar_type();
        operand.value = read_tensor(tensor);
        break;
      }
      case Kind::kHostScalarTensor: {
        const at::Tensor& tensor = value.toTensor();
        operand.kind = Operand::Kind::kTensor;
        operand.dtype = tensor.scalar_type();
        operand.wrapped_number = tensor.unsafeGetTensorImpl()->is_wrapped_number();
        operand.value = program.RuntimeScalar(host_scalars[scalar_index++].type);
        break;
      }
      case Kind::kScalar:
        operand.kind = Operand::Kind::kScalar;
        operand.value = program.RuntimeScalar(host_scalars[scalar_index++].type);
        operand.dtype = lowering::ToScalarType(operand.value.element_type());
        break;
      case Kind::kTensorList:
        operand.kind = Operand::Kind::kTensorList;
        for (const at::Tensor& tensor : value.toTensorList()) {
          operand.values.push_back(read_tensor(tensor));
          operand.dtypes.push_back(tensor.scalar_type());
        }
        break;
      case Kind::kOptionalTensorList:
        operand.kind = Operand::Kind::kTensorList;
        for (const auto& entry : value.toOptionalTensorList()) {
          const std::optional<at::Tensor> tensor = entry;
          operand.values.push_back(tensor.has_value() ? read_tensor(*tensor) : Value());
          operand.dtypes.push_back(tensor.has_value() ? tensor->scalar_type()
                                                      : c10::ScalarType::Undefined);
        }
        break;
      case Kind::kStatic:
        operand.kind = Operand::Kind::kStatic;
        operand.ivalue = value;
        break;
    }
    lowering_operands.push_back(std::move(operand));
  }
  std::vector<Value> rng_values;
  for (size_t r = 0; r < rng_states_.size(); ++r) rng_values.push_back(program.RngState());
  lowering::LoweringContext context(program.builder(), op_name);
  context.set_rng_states(rng_values);
  const lowering::MatmulPrecisionScope precision(matmul_precision_);
  std::vector<Value> results = function(context, lowering_operands);

  written.assign(results.size(), false);
  for (size_t d = 0; d < destinations_.size(); ++d) {
    const auto& [index, destination] = destinations_[d];
    TORCH_INTERNAL_ASSERT(index < results.size(), op_name, ": no result ", index);
    written[index] = true;
    Value result = results[index];
    const StridedView view = ReadViewOf(destination, FlatElementsFor(destination));
    TORCH_CHECK(result.dims() == view.sizes, op_name, ": output with shape ", destination.sizes(),
                " doesn't match the broadcast shape ", c10::IntArrayRef(result.dims()));
    const c10::ScalarType result_dtype = lowering::LoweringContext::DtypeOf(result);
    TORCH_CHECK(!check_cast_ || c10::canCast(result_dtype, destination.scalar_type()), op_name,
                ": result type ", result_dtype, " can't be cast to the desired output type ",
                destination.scalar_type());
    const ElementType type =
        lowering::ToElementTypeOrThrow(destination.scalar_type(), op_name.c_str());
    // A conjugated or negated view stores the conjugate or negation of what it shows.
    program.Write(destination_slots[d], type, view,
                  lowering::ApplyViewBits(program.builder(),
                                          context.Convert(result, destination.scalar_type()),
                                          destination.is_conj(), destination.is_neg()));
  }
  if (DeviceChecksEnabled()) program.AddDeviceChecks(context.device_checks(), description);
  return results;
}

std::vector<std::vector<int64_t>> EagerLaunch::NewResultStrides(
    const std::vector<Value>& results, const std::vector<bool>& written,
    std::vector<int>& result_new_index) const {
  std::vector<std::vector<int64_t>> layouts;
  // Flattened results are contiguous, as PyTorch makes them for contiguous operands.
  if (output_strides_ && !Flattened()) layouts = output_strides_();
  result_new_index.assign(results.size(), -1);
  std::vector<std::vector<int64_t>> new_strides;
  for (size_t r = 0; r < results.size(); ++r) {
    if (written[r]) continue;
    const std::vector<int64_t>& sizes = results[r].dims();
    std::vector<int64_t> strides = DenseStridesLike(sizes, {});
    if (new_strides.size() < layouts.size()) {
      const std::vector<int64_t>& wanted = layouts[new_strides.size()];
      if (wanted.size() == sizes.size() && DenseStridesLike(sizes, wanted) == wanted) {
        strides = wanted;
      }
    }
    result_new_index[r] = static_cast<int>(new_strides.size());
    new_strides.push_back(std::move(strides));
  }
  return new_strides;
}

const at::Tensor* EagerLaunch::FlatShapeOperand() const {
  // Random bits are drawn per element position of the shape: flattening would change them.
  if (!pointwise_ || !rng_states_.empty()) return nullptr;
  const at::Tensor* shaped = nullptr;  // the first operand or destination of dimension >= 1
  bool worth_it = false;
  auto fits = [&](const at::Tensor& tensor) {
    if (tensor.dim() == 0) return true;
    if (!tensor.is_contiguous()) return false;
    if (shaped == nullptr) {
      shaped = &tensor;
    } else if (tensor.sizes() != shaped->sizes()) {
      return false;
    }
    worth_it = worth_it || tensor.dim() >= 2;
    return true;
  };
  for (size_t i = 0; i < operands_.size(); ++i) {
    switch (operand_kinds_[i]) {
      case Kind::kTensor:
        if (!fits(operands_[i].toTensor())) return nullptr;
        break;
      case Kind::kHostScalarTensor:
      case Kind::kScalar:
      case Kind::kStatic:
        break;
      default:
        return nullptr;
    }
  }
  // A 0-d destination of a full-shape result is a shape error, reported with the real shapes.
  for (const auto& [index, destination] : destinations_) {
    if (destination.dim() == 0 || !fits(destination)) return nullptr;
  }
  return worth_it ? shaped : nullptr;
}

void EagerLaunch::RestoreFlattenedShapes(std::vector<at::Tensor>& results,
                                         const at::Tensor* flat_shape,
                                         const std::vector<int>& result_new_index) const {
  if (flat_shape == nullptr && !flat_lists_) return;
  for (size_t r = 0; r < results.size(); ++r) {
    if (result_new_index[r] < 0) continue;
    if (flat_shape != nullptr) {
      results[r].unsafeGetTensorImpl()->set_sizes_contiguous(flat_shape->sizes());
    } else if (r < flat_result_sizes_.size()) {
      results[r].unsafeGetTensorImpl()->set_sizes_contiguous(flat_result_sizes_[r]);
    }
  }
}

}  // namespace torch_tpu::exec

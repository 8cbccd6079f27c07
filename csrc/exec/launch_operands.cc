// An eager launch's operands: how they are collected and checked, and the snapshot
// (storages, runtime scalars, signature) they become.
#include "exec/launch_internals.h"

#include <c10/core/DefaultDtype.h>
#include <c10/util/Exception.h>
#include <c10/util/MaybeOwned.h>

#include <cstring>
#include <string>

#include "exec/growing_shapes.h"
#include "exec/program_execution.h"
#include "exec/program_signature.h"
#include "exec/scalar_buffers.h"
#include "lowering/dtype.h"
#include "lowering/matmul_precision.h"
#include "runtime/device.h"
#include "runtime/storage_buffer.h"

namespace torch_tpu::exec {

using stablehlo::ElementType;
using Kind = EagerLaunch::OperandKind;
using launch_internals::Describe;

namespace {

// A result is written into `destination`: a tpu tensor (both ways of taking one check this).
void CheckDestinationDevice(std::string_view op_name, const at::Tensor& destination) {
  TORCH_CHECK(destination.device().is_privateuseone(), op_name,
              ": cannot write a tpu result into a tensor on ", destination.device());
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

}  // namespace

EagerLaunch::EagerLaunch(std::string_view op_name)
    : op_name_(op_name),
      matmul_precision_(lowering::kUnsignedMatmulPrecision) {}

EagerLaunch::~EagerLaunch() { ReleaseBorrowed(); }

void EagerLaunch::ReleaseBorrowed() noexcept {
  for (size_t i = 0; borrowed_operands_.bits != 0 && i < operands_.size(); ++i) {
    if (borrowed_operands_.Has(i)) c10::MaybeOwnedTraits<c10::IValue>::destroyBorrow(operands_[i]);
  }
  for (size_t d = 0; borrowed_destinations_.bits != 0 && d < destinations_.size(); ++d) {
    if (borrowed_destinations_.Has(d)) {
      c10::MaybeOwnedTraits<at::Tensor>::destroyBorrow(destinations_[d].second);
    }
  }
  borrowed_operands_.bits = 0;
  borrowed_destinations_.bits = 0;
}

void EagerLaunch::AddTensor(const at::Tensor& tensor) {
  CheckTensorOperand(tensor);
  operands_.emplace_back(tensor);
}

void EagerLaunch::AddBorrowedTensor(const at::Tensor& tensor) {
  CheckTensorOperand(tensor);
  // A host scalar tensor is read when the op is lowered, which a deferred op does after its
  // caller returned: it is kept (wrapped numbers have no PyObject to incref anyway).
  if (operands_.size() >= 64 || operand_kinds_.back() == Kind::kHostScalarTensor) {
    operands_.emplace_back(tensor);
    return;
  }
  // The slot first: growing the vector may throw, and a borrow destroyed on the way out would
  // decrement a count it never took.
  operands_.emplace_back();
  operands_.back() = c10::IValue(c10::MaybeOwnedTraits<at::Tensor>::createBorrow(tensor));
  borrowed_operands_.bits |= uint64_t{1} << (operands_.size() - 1);
}

void EagerLaunch::CheckTensorOperand(const at::Tensor& tensor) {
  TORCH_CHECK(tensor.defined(), op_name_, ": undefined tensor argument");
  if (tensor.device().is_cpu()) {
    TORCH_CHECK(tensor.dim() == 0,
                "Expected all tensors to be on the same device, but found at least two devices, ",
                "tpu and cpu! (in ", op_name_, ", a cpu tensor of shape ", tensor.sizes(), ")");
    operand_kinds_.push_back(Kind::kHostScalarTensor);
  } else {
    TORCH_CHECK(tensor.device().is_privateuseone(), op_name_,
                ": expected a tpu tensor, got one on ", tensor.device());
    operand_kinds_.push_back(Kind::kTensor);
  }
}

void EagerLaunch::AddScalar(const c10::Scalar& scalar) {
  operand_kinds_.push_back(Kind::kScalar);
  operands_.emplace_back(scalar);
}

void EagerLaunch::AddTensorList(const std::vector<at::Tensor>& tensors) {
  for (const auto& tensor : tensors) {
    TORCH_CHECK(tensor.device().is_privateuseone(),
                "Expected all tensors to be on the same device, but found at least two devices, ",
                "tpu and ", tensor.device(), "! (in ", op_name_, ", a tensor list)");
  }
  operand_kinds_.push_back(Kind::kTensorList);
  operands_.emplace_back(c10::List<at::Tensor>(tensors));
}

void EagerLaunch::AddOptionalTensor(const std::optional<at::Tensor>& tensor) {
  if (tensor.has_value() && tensor->defined()) {
    AddTensor(*tensor);
  } else {
    AddStatic(c10::IValue());
  }
}

void EagerLaunch::AddOptionalTensorList(const std::vector<std::optional<at::Tensor>>& tensors) {
  c10::List<std::optional<at::Tensor>> list;
  for (const auto& tensor : tensors) {
    const bool present = tensor.has_value() && tensor->defined();
    TORCH_CHECK(!present || tensor->device().is_privateuseone(), op_name_,
                ": expected all index tensors on tpu, got one on ", tensor->device());
    list.push_back(present ? tensor : std::nullopt);
  }
  operand_kinds_.push_back(Kind::kOptionalTensorList);
  operands_.emplace_back(std::move(list));
}

void EagerLaunch::AddStatic(const c10::IValue& value) {
  operand_kinds_.push_back(Kind::kStatic);
  operands_.push_back(value);
}

void EagerLaunch::AddRngState(uint64_t seed, uint64_t offset) {
  rng_states_.emplace_back(seed, offset);
}

void EagerLaunch::WriteResultTo(size_t index, const at::Tensor& destination, bool check_cast) {
  check_cast_ = check_cast_ && check_cast;
  CheckDestinationDevice(op_name_, destination);
  destinations_.emplace_back(index, destination);
}

void EagerLaunch::WriteResultToBorrowed(size_t index, const at::Tensor& destination) {
  CheckDestinationDevice(op_name_, destination);
  if (destinations_.size() >= 64) {
    destinations_.emplace_back(index, destination);
    return;
  }
  destinations_.emplace_back(index, at::Tensor());  // the slot first, as AddBorrowedTensor
  destinations_.back().second = c10::MaybeOwnedTraits<at::Tensor>::createBorrow(destination);
  borrowed_destinations_.bits |= uint64_t{1} << (destinations_.size() - 1);
}

int EagerLaunch::DeviceIndex() const {
  std::optional<c10::Device> device;
  auto visit = [&](const at::Tensor& tensor) {
    if (!tensor.device().is_privateuseone()) return;
    if (!device) {
      device = tensor.device();
      return;
    }
    TORCH_CHECK(*device == tensor.device(),
                "Expected all tensors to be on the same device, but found at least two devices, ",
                *device, " and ", tensor.device(), "! (in ", op_name_, ")");
  };
  for (size_t i = 0; i < operands_.size(); ++i) {
    switch (operand_kinds_[i]) {
      case Kind::kTensor:
        visit(operands_[i].toTensor());
        break;
      case Kind::kTensorList:
        for (const at::Tensor& tensor : operands_[i].toTensorList()) visit(tensor);
        break;
      case Kind::kOptionalTensorList:
        for (const auto& entry : operands_[i].toOptionalTensorList()) {
          const std::optional<at::Tensor> tensor = entry;
          if (tensor.has_value()) visit(*tensor);
        }
        break;
      default:
        break;
    }
  }
  for (const auto& [index, destination] : destinations_) visit(destination);
  return device ? device->index() : runtime::CurrentDevice();
}

std::string EagerLaunch::Description() const {
  // A flattened program serves every shape with its element count: its errors say so.
  if (flat_lists_) {
    return Describe(op_name_, operands_) +
           " (run flattened: one program for lists of these element counts, any shapes)";
  }
  return flat_elements_ < 0
             ? Describe(op_name_, operands_)
             : Describe(op_name_, operands_) + " (run flattened: one program for " +
                   std::to_string(flat_elements_) + "-element operands of any shape)";
}

void EagerLaunch::TakeSnapshot(const lowering::LoweringFunction& function, Snapshot& snapshot,
                               GrowingCandidate* growing) const {
  ProgramSignature& signature = growing ? growing->family : snapshot.signature;
  signature.Clear();
  if (growing) signature.CollectViewNumbers(&growing->numbers, &growing->is_size);
  signature.AddTag(SignatureTag::kOp);
  signature.Add(static_cast<int64_t>(reinterpret_cast<intptr_t>(&function)));
  signature.AddString(op_name_);
  // Lowerings read the default dtype (true division of integers, float factories...).
  signature.AddTag(SignatureTag::kDefaultDtype);
  signature.Add(static_cast<int64_t>(c10::get_default_dtype_as_scalartype()));
  signature.AddTag(SignatureTag::kMatmulPrecision);
  signature.Add(matmul_precision_);
  for (size_t i = 0; i < operands_.size(); ++i) {
    const c10::IValue& operand = operands_[i];
    switch (operand_kinds_[i]) {
      case Kind::kTensor: {
        const at::Tensor& tensor = operand.toTensor();
        const int slot = snapshot.SlotOf(tensor);
        snapshot.tensor_slots.push_back(slot);
        signature.AddTag(SignatureTag::kTensor);
        signature.Add(slot);
        AddReadView(signature, tensor, FlatElementsFor(tensor));
        break;
      }
      case Kind::kHostScalarTensor: {
        const at::Tensor& tensor = operand.toTensor();
        snapshot.host_scalars.push_back(FromHostTensor(tensor, op_name_));
        signature.AddTag(SignatureTag::kHostScalarTensor);
        signature.Add(static_cast<int64_t>(tensor.scalar_type()));
        signature.Add(tensor.unsafeGetTensorImpl()->is_wrapped_number());
        break;
      }
      case Kind::kScalar:
        snapshot.host_scalars.push_back(FromScalar(operand.toScalar(), op_name_));
        signature.AddTag(SignatureTag::kScalar);
        signature.Add(static_cast<int64_t>(snapshot.host_scalars.back().type));
        break;
      case Kind::kTensorList: {
        const auto list = operand.toTensorList();
        signature.AddTag(SignatureTag::kTensorList);
        signature.Add(static_cast<int64_t>(list.size()));
        for (const at::Tensor& tensor : list) {
          const int slot = snapshot.SlotOf(tensor);
          snapshot.tensor_slots.push_back(slot);
          signature.Add(slot);
          AddReadView(signature, tensor, FlatElementsFor(tensor));
        }
        break;
      }
      case Kind::kOptionalTensorList: {
        const auto list = operand.toOptionalTensorList();
        signature.AddTag(SignatureTag::kOptionalTensorList);
        signature.Add(static_cast<int64_t>(list.size()));
        for (const auto& entry : list) {
          const std::optional<at::Tensor> tensor = entry;
          if (!tensor.has_value()) {
            signature.AddTag(SignatureTag::kAbsent);
            continue;
          }
          const int slot = snapshot.SlotOf(*tensor);
          snapshot.tensor_slots.push_back(slot);
          signature.AddTag(SignatureTag::kTensor);
          signature.Add(slot);
          signature.AddView(*tensor);
        }
        break;
      }
      case Kind::kStatic:
        signature.AddTag(SignatureTag::kStatic);
        signature.AddStatic(operand);
        break;
    }
  }
  signature.AddTag(SignatureTag::kRngStates);
  signature.Add(static_cast<int64_t>(rng_states_.size()));
  for (const auto& [index, destination] : destinations_) {
    const int slot = snapshot.SlotOf(destination);
    snapshot.destination_slots.push_back(slot);
    signature.AddTag(SignatureTag::kDestination);
    signature.Add(static_cast<int64_t>(index));
    signature.Add(slot);
    AddReadView(signature, destination, FlatElementsFor(destination));
  }
  signature.Add(check_cast_);
  signature.Add(flat_lists_);
  if (growing) {
    signature.CollectViewNumbers(nullptr, nullptr);
    for (const auto& slot : snapshot.slots) {
      signature.Add(slot.contents.initialized() ? static_cast<int64_t>(slot.contents.element_type)
                                                : -1);
    }
    signature.Add(flat_elements_ >= 0);
    return;
  }
  // A deferred op's storages are signed by the graph, once per graph slot.
  if (snapshot.read_contents) SignStorageSlots(snapshot.slots, signature);
}

}  // namespace torch_tpu::exec

#include "exec/eager.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "runtime/element_types.h"
#include "exec/executable_cache.h"
#include "exec/metrics.h"
#include "runtime/runtime.h"
#include "runtime/storage_buffer.h"
#include "exec/view_io.h"
#include "lowering/context.h"
#include "lowering/dtype.h"
#include "pjrt/error.h"
#include "stablehlo/module.h"

namespace torch_tpu::exec {

using lowering::Operand;
using runtime::Runtime;
using runtime::StorageBuffer;
using runtime::StorageContents;
using runtime::ToPjrtType;
using stablehlo::ElementType;
using stablehlo::TensorType;
using stablehlo::Value;

ExecutionMode CurrentExecutionMode() {
  static const ExecutionMode mode = [] {
    const char* blocking = std::getenv("TORCH_TPU_LAUNCH_BLOCKING");
    return blocking && std::strcmp(blocking, "1") == 0 ? ExecutionMode::kDebug
                                                       : ExecutionMode::kStrict;
  }();
  return mode;
}

namespace {

enum OperandKind : int {
  kTensorKind,
  kHostScalarTensorKind,
  kScalarKind,
  kListKind,
  kOptionalListKind,
  kStaticKind,
};

StorageBuffer* StorageOf(const at::Tensor& tensor) {
  auto* buffer = static_cast<StorageBuffer*>(tensor.storage().data_ptr().get_context());
  return buffer;
}

// Outstanding executions, so synchronize() can wait for all of them and report failures.
class PendingWork {
 public:
  static PendingWork& Get() {
    static PendingWork pending;
    return pending;
  }
  void Add(pjrt::PjrtEvent event) {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(std::move(event));
    // Drop finished ones from the front so the list stays short in long eager loops.
    while (events_.size() > 64 && events_.front().IsReady()) {
      Drain(events_.front());
      events_.pop_front();
    }
  }
  bool AllReady() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& event : events_) {
      if (!event.IsReady()) return false;
    }
    return true;
  }
  void WaitAll() {
    std::deque<pjrt::PjrtEvent> events;
    std::string first_error;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      events.swap(events_);
      first_error.swap(first_error_);
    }
    for (auto& event : events) {
      try {
        event.Await();
      } catch (const pjrt::PjrtError& error) {
        if (first_error.empty()) first_error = error.what();
      }
    }
    TORCH_CHECK(first_error.empty(), "tpu: an earlier asynchronous device operation failed: ",
                first_error);
  }

 private:
  void Drain(pjrt::PjrtEvent& event) {
    try {
      event.Await();
    } catch (const pjrt::PjrtError& error) {
      if (first_error_.empty()) first_error_ = error.what();
    }
  }
  std::mutex mutex_;
  std::deque<pjrt::PjrtEvent> events_;
  std::string first_error_;
};

// Small device buffers for runtime scalars, reused while the same values keep coming (alpha=1,
// a fixed learning rate...).
class ScalarBufferCache {
 public:
  static ScalarBufferCache& Get() {
    static ScalarBufferCache cache;
    return cache;
  }
  std::shared_ptr<pjrt::PjrtBuffer> Get(ElementType type, const void* data, size_t size) {
    std::string key(reinterpret_cast<const char*>(&type), sizeof(type));
    key.append(static_cast<const char*>(data), size);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = buffers_.find(key);
    if (it != buffers_.end()) return it->second;
    if (buffers_.size() > 4096) buffers_.clear();
    const Runtime& device_runtime = Runtime::Get();
    auto transfer = device_runtime.client().BufferFromHost(data, size, ToPjrtType(type), {},
                                                    device_runtime.device(0));
    Metrics::Get().transfer_to_device_bytes += static_cast<int64_t>(size);
    auto buffer = std::make_shared<pjrt::PjrtBuffer>(std::move(transfer.buffer));
    buffers_.emplace(std::move(key), buffer);
    return buffer;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<pjrt::PjrtBuffer>> buffers_;
};

struct Slot {
  StorageBuffer* storage;
  StorageContents contents;
  int argument = -1;  // program argument index when initialized
};

struct Plan {
  std::shared_ptr<pjrt::PjrtLoadedExecutable> executable;
  struct NewOutput {
    at::ScalarType dtype;
    std::vector<int64_t> sizes;
  };
  std::vector<NewOutput> new_outputs;
  std::vector<int> result_new_index;  // per lowering result: index in new_outputs, or -1
  std::vector<std::pair<int, ElementType>> written_slots;  // (slot, element type) after new ones
};

class PlanCache {
 public:
  static PlanCache& Get() {
    static PlanCache cache;
    return cache;
  }
  std::shared_ptr<const Plan> Find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = plans_.find(key);
    return it == plans_.end() ? nullptr : it->second;
  }
  void Insert(const std::string& key, std::shared_ptr<const Plan> plan) {
    std::lock_guard<std::mutex> lock(mutex_);
    plans_[key] = std::move(plan);
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const Plan>> plans_;
};

StridedView ViewOf(const at::Tensor& tensor) {
  return StridedView{tensor.sizes().vec(), tensor.strides().vec(), tensor.storage_offset()};
}

void AppendView(std::ostringstream& key, const at::Tensor& tensor) {
  key << static_cast<int>(tensor.scalar_type()) << '[';
  for (int64_t size : tensor.sizes()) key << size << ',';
  key << '/';
  for (int64_t stride : tensor.strides()) key << stride << ',';
  key << '+' << tensor.storage_offset() << ']';
}

// Host bytes and element type of a runtime scalar.
struct HostScalar {
  ElementType type;
  alignas(8) unsigned char bytes[8];
  size_t size;
};

HostScalar FromScalar(const c10::Scalar& scalar, const std::string& op) {
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
  } else {
    TORCH_CHECK(scalar.isFloatingPoint(), op, ": complex scalars are not supported on tpu");
    host.type = ElementType::kF64;
    double value = scalar.toDouble();
    std::memcpy(host.bytes, &value, sizeof(value));
    host.size = sizeof(value);
  }
  return host;
}

HostScalar FromHostTensor(const at::Tensor& tensor, const std::string& op) {
  HostScalar host{};
  host.type = lowering::ToElementTypeOrThrow(tensor.scalar_type(), op.c_str());
  host.size = tensor.element_size();
  std::memcpy(host.bytes, tensor.const_data_ptr(), host.size);
  return host;
}

// Static arguments are compiled into the program, so the key must distinguish every value
// exactly (IValue's printer rounds doubles).
void AppendStatic(std::ostringstream& key, const c10::IValue& value) {
  if (value.isDouble()) {
    key << 'd' << std::hexfloat << value.toDouble() << std::defaultfloat;
  } else if (value.isDoubleList()) {
    key << 'D';
    for (double element : value.toDoubleVector()) key << std::hexfloat << element << ',';
    key << std::defaultfloat;
  } else {
    key << 'C' << value;
  }
}

}  // namespace

EagerLaunch::EagerLaunch(std::string op_name) : op_name_(std::move(op_name)) {}

void EagerLaunch::AddTensor(const at::Tensor& tensor) {
  TORCH_CHECK(tensor.defined(), op_name_, ": undefined tensor argument");
  if (tensor.device().is_cpu()) {
    TORCH_CHECK(tensor.dim() == 0, op_name_,
                ": expected all tensors to be on the same device, but found a CPU tensor of "
                "shape ",
                tensor.sizes(), " among tpu tensors");
    operand_kinds_.push_back(kHostScalarTensorKind);
  } else {
    TORCH_CHECK(tensor.device().is_privateuseone(), op_name_,
                ": expected a tpu tensor, got one on ", tensor.device());
    operand_kinds_.push_back(kTensorKind);
  }
  operands_.emplace_back(tensor);
}

void EagerLaunch::AddScalar(const c10::Scalar& scalar) {
  operand_kinds_.push_back(kScalarKind);
  operands_.emplace_back(scalar);
}

void EagerLaunch::AddTensorList(const std::vector<at::Tensor>& tensors) {
  for (const auto& tensor : tensors) {
    TORCH_CHECK(tensor.device().is_privateuseone(), op_name_,
                ": expected all tensors in the list on tpu, got one on ", tensor.device());
  }
  operand_kinds_.push_back(kListKind);
  operands_.emplace_back(c10::List<at::Tensor>(tensors));
}

void EagerLaunch::AddOptionalTensorList(const std::vector<std::optional<at::Tensor>>& tensors) {
  c10::List<std::optional<at::Tensor>> list;
  for (const auto& tensor : tensors) {
    const bool present = tensor.has_value() && tensor->defined();
    TORCH_CHECK(!present || tensor->device().is_privateuseone(), op_name_,
                ": expected all index tensors on tpu, got one on ", tensor->device());
    list.push_back(present ? tensor : std::nullopt);
  }
  operand_kinds_.push_back(kOptionalListKind);
  operands_.emplace_back(std::move(list));
}

void EagerLaunch::AddStatic(const c10::IValue& value) {
  operand_kinds_.push_back(kStaticKind);
  operands_.push_back(value);
}

void EagerLaunch::AddRngState(uint64_t seed, uint64_t offset) {
  rng_states_.emplace_back(seed, offset);
}

void EagerLaunch::WriteResultTo(size_t index, const at::Tensor& destination, bool check_cast) {
  check_cast_ = check_cast_ && check_cast;
  TORCH_CHECK(destination.device().is_privateuseone(), op_name_,
              ": cannot write a tpu result into a tensor on ", destination.device());
  destinations_.emplace_back(index, destination);
}

std::vector<at::Tensor> EagerLaunch::Run(const lowering::LoweringFunction& function) {
  const Runtime& device_runtime = Runtime::Get();
  // Storages, each once even when several operands view it.
  std::vector<Slot> slots;
  auto slot_of = [&](const at::Tensor& tensor) -> int {
    StorageBuffer* storage = StorageOf(tensor);
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i].storage == storage) return static_cast<int>(i);
    }
    slots.push_back(Slot{storage, storage ? storage->contents() : StorageContents{}});
    return static_cast<int>(slots.size()) - 1;
  };

  std::ostringstream key;
  key << op_name_ << '|';
  std::vector<int> tensor_slots;  // slot of every tensor operand/list element, in order
  std::vector<HostScalar> host_scalars;
  for (size_t i = 0; i < operands_.size(); ++i) {
    switch (operand_kinds_[i]) {
      case kTensorKind: {
        const at::Tensor& tensor = operands_[i].toTensor();
        const int slot = slot_of(tensor);
        tensor_slots.push_back(slot);
        key << 'T' << slot;
        AppendView(key, tensor);
        break;
      }
      case kHostScalarTensorKind: {
        const at::Tensor& tensor = operands_[i].toTensor();
        host_scalars.push_back(FromHostTensor(tensor, op_name_));
        key << 'H' << static_cast<int>(tensor.scalar_type())
            << (tensor.unsafeGetTensorImpl()->is_wrapped_number() ? 'w' : 'z');
        break;
      }
      case kScalarKind:
        host_scalars.push_back(FromScalar(operands_[i].toScalar(), op_name_));
        key << 'S' << static_cast<int>(host_scalars.back().type);
        break;
      case kListKind: {
        key << 'L';
        for (const at::Tensor& tensor : operands_[i].toTensorList().vec()) {
          const int slot = slot_of(tensor);
          tensor_slots.push_back(slot);
          key << slot;
          AppendView(key, tensor);
        }
        break;
      }
      case kOptionalListKind: {
        key << 'O';
        for (const auto& entry : operands_[i].toOptionalTensorList().vec()) {
          if (!entry.has_value()) {
            key << 'N';
            continue;
          }
          const int slot = slot_of(*entry);
          tensor_slots.push_back(slot);
          key << slot;
          AppendView(key, *entry);
        }
        break;
      }
      case kStaticKind:
        AppendStatic(key, operands_[i]);
        break;
    }
    key << ';';
  }
  key << 'R' << rng_states_.size();
  std::vector<int> destination_slots;
  for (const auto& [index, destination] : destinations_) {
    destination_slots.push_back(slot_of(destination));
    key << "|D" << index << ':' << destination_slots.back();
    AppendView(key, destination);
  }
  for (const Slot& slot : slots) {
    key << "|s" << (slot.storage ? slot.storage->nbytes() : 0) << ':'
        << (slot.contents.initialized() ? static_cast<int>(slot.contents.element_type) : -1);
  }
  const std::string key_text = key.str();

  std::shared_ptr<const Plan> plan = PlanCache::Get().Find(key_text);
  if (plan) {
    ++Metrics::Get().cache_hits_memory;
  } else {
    auto built = std::make_shared<Plan>();
    stablehlo::Module module;
    stablehlo::FunctionBuilder& builder = module.main();
    // Storage arguments first, then runtime scalars, then rng states.
    std::vector<Value> slot_values(slots.size());
    std::vector<ElementType> slot_types(slots.size());
    int argument_count = 0;
    for (size_t s = 0; s < slots.size(); ++s) {
      if (!slots[s].contents.initialized()) continue;
      const int64_t length = slots[s].contents.length(slots[s].storage->nbytes());
      slot_values[s] = builder.Argument(TensorType{slots[s].contents.element_type, {length}});
      slot_types[s] = slots[s].contents.element_type;
      ++argument_count;
    }
    auto slot_value_as = [&](int s, ElementType type) -> Value {
      if (!slot_values[s].valid()) {
        // Never written: reads as zeros of the first type it is viewed as.
        const size_t nbytes = slots[s].storage ? slots[s].storage->nbytes() : 0;
        slot_values[s] = builder.Constant(
            type, 0.0, {static_cast<int64_t>(nbytes) / stablehlo::ByteWidth(type)});
        slot_types[s] = type;
      }
      return ReinterpretFlat(builder, slot_values[s], type);
    };

    std::vector<Operand> lowering_operands;
    size_t tensor_index = 0, scalar_index = 0;
    auto read_tensor = [&](const at::Tensor& tensor) {
      const int s = tensor_slots[tensor_index++];
      const ElementType type =
          lowering::ToElementTypeOrThrow(tensor.scalar_type(), op_name_.c_str());
      return ReadView(builder, slot_value_as(s, type), ViewOf(tensor));
    };
    for (size_t i = 0; i < operands_.size(); ++i) {
      Operand operand;
      switch (operand_kinds_[i]) {
        case kTensorKind: {
          const at::Tensor& tensor = operands_[i].toTensor();
          operand.kind = Operand::Kind::kTensor;
          operand.dtype = tensor.scalar_type();
          operand.value = read_tensor(tensor);
          break;
        }
        case kHostScalarTensorKind: {
          const at::Tensor& tensor = operands_[i].toTensor();
          operand.kind = Operand::Kind::kTensor;
          operand.dtype = tensor.scalar_type();
          operand.wrapped_number = tensor.unsafeGetTensorImpl()->is_wrapped_number();
          operand.value = builder.Argument(TensorType{host_scalars[scalar_index++].type, {}});
          break;
        }
        case kScalarKind:
          operand.kind = Operand::Kind::kScalar;
          operand.value = builder.Argument(TensorType{host_scalars[scalar_index++].type, {}});
          operand.dtype = lowering::ToScalarType(operand.value.element_type());
          break;
        case kListKind:
          operand.kind = Operand::Kind::kTensorList;
          for (const at::Tensor& tensor : operands_[i].toTensorList().vec()) {
            operand.values.push_back(read_tensor(tensor));
            operand.dtypes.push_back(tensor.scalar_type());
          }
          break;
        case kOptionalListKind:
          operand.kind = Operand::Kind::kTensorList;
          for (const auto& entry : operands_[i].toOptionalTensorList().vec()) {
            operand.values.push_back(entry.has_value() ? read_tensor(*entry) : Value());
            operand.dtypes.push_back(entry.has_value() ? entry->scalar_type()
                                                       : c10::ScalarType::Undefined);
          }
          break;
        case kStaticKind:
          operand.kind = Operand::Kind::kStatic;
          operand.ivalue = operands_[i];
          break;
      }
      lowering_operands.push_back(std::move(operand));
    }
    std::vector<Value> rng_values;
    for (size_t r = 0; r < rng_states_.size(); ++r) {
      rng_values.push_back(builder.Argument(TensorType{ElementType::kU64, {2}}));
    }
    lowering::LoweringContext context(builder, op_name_);
    context.set_rng_states(rng_values);
    std::vector<Value> results = function(context, lowering_operands);

    std::vector<Value> returned;
    built->result_new_index.assign(results.size(), -1);
    std::vector<bool> written(results.size(), false);
    for (const auto& [index, destination] : destinations_) {
      TORCH_INTERNAL_ASSERT(index < results.size(), op_name_, ": no result ", index);
      written[index] = true;
    }
    for (size_t r = 0; r < results.size(); ++r) {
      if (written[r]) continue;
      built->result_new_index[r] = static_cast<int>(built->new_outputs.size());
      built->new_outputs.push_back(
          {lowering::LoweringContext::DtypeOf(results[r]), results[r].dims()});
      returned.push_back(builder.Reshape(results[r], {results[r].type().NumElements()}));
    }
    std::vector<int> dirty;
    for (size_t d = 0; d < destinations_.size(); ++d) {
      const auto& [index, destination] = destinations_[d];
      const int s = destination_slots[d];
      Value result = results[index];
      TORCH_CHECK(result.dims() == destination.sizes().vec(), op_name_, ": output with shape ",
                  destination.sizes(), " doesn't match the broadcast shape ",
                  c10::IntArrayRef(result.dims()));
      const c10::ScalarType result_dtype = lowering::LoweringContext::DtypeOf(result);
      TORCH_CHECK(!check_cast_ || c10::canCast(result_dtype, destination.scalar_type()),
                  op_name_, ": result type ", result_dtype,
                  " can't be cast to the desired output type ", destination.scalar_type());
      const ElementType type =
          lowering::ToElementTypeOrThrow(destination.scalar_type(), op_name_.c_str());
      Value flat = slot_value_as(s, type);
      result = context.Convert(result, destination.scalar_type());
      slot_values[s] = WriteView(builder, flat, ViewOf(destination), result);
      slot_types[s] = type;
      if (std::find(dirty.begin(), dirty.end(), s) == dirty.end()) dirty.push_back(s);
    }
    for (int s : dirty) {
      returned.push_back(slot_values[s]);
      built->written_slots.emplace_back(s, slot_types[s]);
    }
    builder.Return(returned);
    built->executable = ExecutableCache::Get().GetOrCompile(module);
    PlanCache::Get().Insert(key_text, built);
    plan = built;
  }

  // Arguments: initialized storages in slot order, then scalars, then rng states.
  std::vector<std::shared_ptr<pjrt::PjrtBuffer>> keep_alive;
  std::vector<PJRT_Buffer*> arguments;
  for (const Slot& slot : slots) {
    if (slot.contents.initialized()) arguments.push_back(slot.contents.buffer->get());
  }
  ScalarBufferCache& scalar_cache = ScalarBufferCache::Get();
  for (const HostScalar& scalar : host_scalars) {
    keep_alive.push_back(scalar_cache.Get(scalar.type, scalar.bytes, scalar.size));
    arguments.push_back(keep_alive.back()->get());
  }
  for (const auto& [seed, offset] : rng_states_) {
    uint64_t state[2] = {seed, offset};
    int64_t dims[] = {2};
    auto transfer = device_runtime.client().BufferFromHost(state, sizeof(state),
                                                    ToPjrtType(ElementType::kU64), dims,
                                                    device_runtime.device(0));
    keep_alive.push_back(std::make_shared<pjrt::PjrtBuffer>(std::move(transfer.buffer)));
    arguments.push_back(keep_alive.back()->get());
  }

  pjrt::ExecutionResult execution;
  try {
    execution = plan->executable->Execute(std::span<PJRT_Buffer* const>(arguments));
  } catch (const pjrt::PjrtError& error) {
    TORCH_CHECK(false, op_name_, ": ", error.what());
  }
  ++Metrics::Get().execute_count;

  std::vector<at::Tensor> new_tensors;
  c10::Allocator* allocator = c10::GetAllocator(c10::DeviceType::PrivateUse1);
  for (size_t n = 0; n < plan->new_outputs.size(); ++n) {
    const auto& output = plan->new_outputs[n];
    at::Tensor tensor = at::detail::empty_generic(
        output.sizes, allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), output.dtype,
        std::nullopt);
    if (StorageBuffer* storage = StorageOf(tensor)) {
      storage->set_contents(StorageContents{
          std::make_shared<pjrt::PjrtBuffer>(std::move(execution.outputs[n])),
          lowering::ToElementTypeOrThrow(output.dtype, op_name_.c_str())});
    }
    new_tensors.push_back(std::move(tensor));
  }
  for (size_t w = 0; w < plan->written_slots.size(); ++w) {
    const auto& [s, type] = plan->written_slots[w];
    auto& output = execution.outputs[plan->new_outputs.size() + w];
    if (slots[s].storage) {
      slots[s].storage->set_contents(
          StorageContents{std::make_shared<pjrt::PjrtBuffer>(std::move(output)), type});
    }
  }

  if (CurrentExecutionMode() == ExecutionMode::kDebug) {
    try {
      execution.done.Await();
    } catch (const pjrt::PjrtError& error) {
      TORCH_CHECK(false, op_name_, ": device execution failed: ", error.what());
    }
  } else {
    PendingWork::Get().Add(std::move(execution.done));
  }

  std::vector<at::Tensor> results(plan->result_new_index.size());
  for (size_t r = 0; r < results.size(); ++r) {
    if (plan->result_new_index[r] >= 0) results[r] = new_tensors[plan->result_new_index[r]];
  }
  for (const auto& [index, destination] : destinations_) results[index] = destination;
  return results;
}

void SynchronizeAll() { PendingWork::Get().WaitAll(); }

bool AllWorkDone() { return PendingWork::Get().AllReady(); }

}  // namespace torch_tpu::exec

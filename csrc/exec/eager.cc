#include "exec/eager.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/WrapDimMinimal.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "cache/executable_cache.h"
#include "exec/compile_pool.h"
#include "exec/deferred_graph.h"
#include "exec/growing_shapes.h"
#include "exec/launch_queue.h"
#include "exec/launch_lock.h"
#include "exec/pending_work.h"
#include "exec/plan_cache.h"
#include "exec/program_builder.h"
#include "exec/program_execution.h"
#include "exec/program_signature.h"
#include "exec/scalar_buffers.h"
#include "exec/storage_ops.h"
#include "exec/view_io.h"
#include "lowering/complex.h"
#include "lowering/context.h"
#include "lowering/dtype.h"
#include "lowering/matmul_precision.h"
#include "pjrt/error.h"
#include "runtime/device.h"
#include "runtime/device_work.h"
#include "runtime/metrics.h"
#include "runtime/storage.h"
#include "runtime/runtime.h"
#include "runtime/storage_buffer.h"
#include "stablehlo/builder.h"

namespace torch_tpu::exec {

using lowering::Operand;
using runtime::StorageBuffer;
using runtime::StorageContents;
using stablehlo::ElementType;
using stablehlo::Value;
using Kind = EagerLaunch::OperandKind;

namespace {

bool EnvironmentFlag(const char* name) {
  const char* value = std::getenv(name);
  return value && std::strcmp(value, "1") == 0;
}

std::atomic<ExecutionMode>& ModeSetting() {
  // Debugging asks for blocking launches, so it wins over fusing when both are set.
  static std::atomic<ExecutionMode> mode{
      EnvironmentFlag("TORCH_TPU_LAUNCH_BLOCKING")  ? ExecutionMode::kDebug
      : EnvironmentFlag("TORCH_TPU_DEFER_AND_FUSE") ? ExecutionMode::kDeferAndFuse
                                                    : ExecutionMode::kStrict};
  return mode;
}

}  // namespace

ExecutionMode CurrentExecutionMode() { return ModeSetting().load(std::memory_order_relaxed); }

void SetExecutionMode(ExecutionMode mode) {
  const ExecutionMode previous = ModeSetting().exchange(mode);
  if (previous == ExecutionMode::kDeferAndFuse && mode != previous) {
    DeferredGraph::Get().Flush("mode_switch");
  }
}

bool DeviceChecksEnabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("TORCH_TPU_DEVICE_CHECKS");
    return !(value && std::strcmp(value, "0") == 0);
  }();
  return enabled;
}

namespace {

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
[[noreturn]] void RaiseLoweringFailure(std::string_view op, const std::vector<c10::IValue>& operands,
                                       const std::exception& error) {
  const std::string description = Describe(op, operands);
  TORCH_CHECK_NOT_IMPLEMENTED(
      dynamic_cast<const stablehlo::BuilderError*>(&error) == nullptr || !HasComplexTensor(operands),
      description, ": not implemented for complex dtypes on the tpu device (", error.what(), ")");
  TORCH_CHECK(false, description, ": ", error.what());
}


}  // namespace

// A compiled program plus how to bind its arguments and use its results.
struct EagerLaunch::Plan {
  BuiltProgram program;  // its executable is set once `compile` is done
  std::shared_ptr<CompileJob> compile;  // null when compiled on the launching thread
  std::vector<int> result_new_index;  // per lowering result: index in new_outputs, or -1
  std::shared_ptr<const std::string> description;
  // A bucketed program (exec/growing_shapes.h): new outputs are allocated at the bucket's sizes
  // and then take their real sizes, which follow the model; null for exact programs.
  std::shared_ptr<const GrowingModel> growing;
};

// The family of a launch that missed the plan cache, and what it takes to share a program.
struct EagerLaunch::GrowingCandidate {
  ProgramSignature family;
  std::vector<int64_t> numbers;
  std::vector<bool> is_size;
  std::optional<GrowingFit> fit;
  ProgramSignature key;  // of the bucketed program, when `fit`
  std::optional<GrowingPadding> padding;  // for growing sizes; none: sizes must stay fixed
};

// Storages (each once even when several operands view it) and runtime scalars of one launch.
struct EagerLaunch::Snapshot {
  std::vector<StorageSlot> slots;
  std::vector<int> tensor_slots;  // slot of every tensor operand/list element, in order
  std::vector<int> destination_slots;
  std::vector<HostScalar> host_scalars;
  ProgramSignature signature;
  // Defer-and-fuse records storages without their buffers (the graph takes those) and needs
  // each slot's StorageImpl to follow its lifetime.
  bool read_contents = true;
  std::vector<c10::StorageImpl*> storage_impls;

  int SlotOf(const at::Tensor& tensor) {
    StorageBuffer* storage = StorageOf(tensor);
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i].storage == storage) return static_cast<int>(i);
    }
    if (read_contents) {
      slots.push_back(
          StorageSlot{storage, storage ? storage->launch_contents() : StorageContents{}});
    } else {
      slots.push_back(StorageSlot{storage, StorageContents{}});
      storage_impls.push_back(tensor.storage().unsafeGetStorageImpl());
    }
    return static_cast<int>(slots.size()) - 1;
  }
  // Whether a launch queued behind a compile will produce some slot's buffer.
  bool AnyQueued() const {
    for (const auto& slot : slots) {
      if (slot.contents.queued) return true;
    }
    return false;
  }
  void Clear() {
    slots.clear();
    tensor_slots.clear();
    destination_slots.clear();
    host_scalars.clear();
    storage_impls.clear();
  }
};

EagerLaunch::EagerLaunch(std::string_view op_name)
    : op_name_(op_name),
      matmul_precision_(static_cast<int8_t>(lowering::CurrentMatmulPrecision())) {}

void EagerLaunch::AddTensor(const at::Tensor& tensor) {
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
  operands_.emplace_back(tensor);
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
  TORCH_CHECK(destination.device().is_privateuseone(), op_name_,
              ": cannot write a tpu result into a tensor on ", destination.device());
  destinations_.emplace_back(index, destination);
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

std::shared_ptr<const EagerLaunch::Plan> EagerLaunch::BuildPlan(
    const lowering::LoweringFunction& function, const Snapshot& snapshot) const {
  std::vector<StorageSlotInfo> slot_infos;
  for (const auto& slot : snapshot.slots) {
    slot_infos.push_back({slot.storage ? slot.storage->nbytes() : 0, slot.contents.initialized(),
                          slot.contents.element_type});
  }
  std::vector<int> unused_slots;
  std::shared_ptr<Plan> plan = BuildPlanOver(function, snapshot, slot_infos, &unused_slots);
  if (plan) return plan;
  // Some storages were taken only for their shape: build again without their buffers.
  for (int slot : unused_slots) slot_infos[slot].initialized = false;
  return BuildPlanOver(function, snapshot, slot_infos, nullptr);
}

std::shared_ptr<const EagerLaunch::Plan> EagerLaunch::BuildPlanFor(
    const lowering::LoweringFunction& function, const Snapshot& snapshot,
    const ProgramSignature& key, GrowingCandidate* growing, int64_t& growing_symbol) const {
  PlanCache& plans = PlanCache::Get();
  bool built = false;
  if (growing && growing->fit) {
    std::shared_ptr<const Plan> shared;
    std::string failure;
    try {
      shared = plans.GetOrBuild<Plan>(
          growing->key, [&] { return BuildGrowingPlan(function, snapshot, *growing); },
          PlanCache::Options{}, &built);
    } catch (const std::exception& error) {
      // The op does not build padded (a shape check, a lowering that needs exact sizes): its
      // exact program follows and raises whatever the op itself raises.
      failure = error.what();
    }
    if (shared) {
      if (built) ForgetIfCompileFails(growing->key, shared);
      growing_symbol = growing->fit->t;
      return shared;
    }
    GrowingFamilies::Get().Disable(growing->family, op_name_, failure);
  }
  std::shared_ptr<const Plan> exact = plans.GetOrBuild<Plan>(
      key,
      [&]() -> std::shared_ptr<const Plan> {
        try {
          return BuildPlan(function, snapshot);
        } catch (const c10::Error&) {
          throw;
        } catch (const std::exception& error) {
          RaiseLoweringFailure(op_name_, operands_, error);
        }
      },
      PlanCache::Options{}, &built);
  if (built) ForgetIfCompileFails(key, exact);
  if (growing) {
    std::vector<std::vector<int64_t>> output_sizes;
    for (const auto& output : exact->program.new_outputs) output_sizes.push_back(output.sizes);
    GrowingFamilies::Get().Record(growing->family, std::move(growing->numbers),
                                  std::move(output_sizes));
  }
  return exact;
}

void EagerLaunch::ForgetIfCompileFails(const ProgramSignature& key,
                                       const std::shared_ptr<const Plan>& plan) {
  if (!plan->compile) return;
  // Runs at once when the compile has ended already, so the plan is cached by now either way.
  plan->compile->OnCompiled([key, cached = plan.get()](const Executable& executable) {
    if (!executable) PlanCache::Get().Forget(key, cached);
  });
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

std::shared_ptr<EagerLaunch::Plan> EagerLaunch::BuildPlanOver(
    const lowering::LoweringFunction& function, const Snapshot& snapshot,
    std::vector<StorageSlotInfo> slot_infos, std::vector<int>* unused_slots) const {
  auto plan = std::make_shared<Plan>();
  plan->description = std::make_shared<const std::string>(Description());
  ProgramBuilder program(std::move(slot_infos));
  std::vector<bool> written;
  std::vector<Value> results =
      Lower(function, program, snapshot.tensor_slots, snapshot.destination_slots,
            snapshot.host_scalars, *plan->description, written);
  std::vector<std::vector<int64_t>> strides =
      NewResultStrides(results, written, plan->result_new_index);
  for (size_t r = 0; r < results.size(); ++r) {
    if (written[r]) continue;
    program.AddNewOutput(results[r], lowering::LoweringContext::DtypeOf(results[r]),
                         std::move(strides[plan->result_new_index[r]]));
  }
  std::vector<int> unused = program.Finish();
  if (unused_slots != nullptr && !unused.empty()) {
    *unused_slots = std::move(unused);
    return nullptr;
  }
  ProgramBuilder::Uncompiled uncompiled = program.TakeUncompiled();
  plan->program = std::move(uncompiled.program);
  CompileInto(plan, std::move(uncompiled.module));
  return plan;
}

void EagerLaunch::CompileInto(const std::shared_ptr<Plan>& plan, stablehlo::Module module) {
  const std::string& text = *plan->program.module_text;
  if (CurrentExecutionMode() == ExecutionMode::kDebug || !CompilesInBackground()) {
    plan->program.executable = ExecutableCache::Get().GetOrCompile(module, text);
  } else if (!(plan->program.executable = ExecutableCache::Get().FindLoaded(text))) {
    plan->compile = CompileInBackground(std::move(module), plan->program.module_text);
    // The job drops the callback (and with it this reference) once it has run.
    plan->compile->OnCompiled(
        [plan](const Executable& executable) { plan->program.executable = executable; });
  }
}

std::unique_ptr<EagerLaunch::GrowingCandidate> EagerLaunch::FindGrowing(
    const lowering::LoweringFunction& function, const Snapshot& snapshot) const {
  // Random draws depend on positions, written views would need runtime offsets, and complex
  // values are not gathered: those ops keep exact programs.
  if (!GrowingShapesEnabled() || !rng_states_.empty() || !destinations_.empty() || flat_lists_ ||
      HasComplexTensor(operands_)) {
    return nullptr;
  }
  auto candidate = std::make_unique<GrowingCandidate>();
  candidate->padding = PaddingForGrowingSizes(op_name_, pointwise_);
  thread_local Snapshot family_snapshot;
  family_snapshot.Clear();
  TakeSnapshot(function, family_snapshot, candidate.get());
  family_snapshot.Clear();
  candidate->fit = GrowingFamilies::Get().Fit(candidate->family, candidate->numbers,
                                              candidate->is_size, candidate->padding.has_value());
  if (candidate->fit) {
    const GrowingModel& model = *candidate->fit->model;
    ProgramSignature& key = candidate->key;
    key = candidate->family;
    key.AddTag(SignatureTag::kGrowing);
    key.Add(static_cast<int64_t>(model.symbol));
    for (size_t i = 0; i < model.base.size(); ++i) {
      key.Add(model.base[i]);
      key.Add(model.slope[i]);
    }
    for (size_t o = 0; o < model.output_base.size(); ++o) {
      for (size_t d = 0; d < model.output_base[o].size(); ++d) {
        key.Add(model.output_base[o][d]);
        key.Add(model.output_slope[o][d]);
      }
    }
    key.Add(candidate->fit->bucket);
    // Strides moving along the line could reorder the results' layout, which the program fixes.
    if (output_strides_ && !Flattened()) {
      std::vector<std::vector<int64_t>> orders;
      if (output_dim_orders_) {
        orders = output_dim_orders_();
      } else {
        for (const std::vector<int64_t>& layout : output_strides_()) {
          orders.push_back(OuterToInnerOrder(layout));
        }
      }
      for (const std::vector<int64_t>& order : orders) {
        key.Add(static_cast<int64_t>(order.size()));
        for (int64_t dim : order) key.Add(dim);
      }
    }
    SignStorageSlots(snapshot.slots, key);
  }
  return candidate;
}

std::shared_ptr<EagerLaunch::Plan> EagerLaunch::BuildGrowingPlan(
    const lowering::LoweringFunction& function, const Snapshot& snapshot,
    const GrowingCandidate& candidate) const {
  const GrowingFit& fit = *candidate.fit;
  const GrowingPadding padding = candidate.padding.value_or(GrowingPadding::kEdge);
  auto plan = std::make_shared<Plan>();
  plan->growing = fit.model;
  plan->description = std::make_shared<const std::string>(
      Describe(op_name_, operands_) +
      ", or the same op at another length of its growing sequence (one program up to bucket " +
      std::to_string(fit.bucket) + ")");
  std::vector<StorageSlotInfo> slot_infos;
  for (const auto& slot : snapshot.slots) {
    slot_infos.push_back({slot.storage ? slot.storage->nbytes() : 0, slot.contents.initialized(),
                          slot.contents.element_type});
  }
  ProgramBuilder program(std::move(slot_infos));
  // The symbol is the first runtime scalar; the op's own scalars follow it.
  GrowingEmitter emitter(program.builder(), fit, program.RuntimeScalar(ElementType::kS64));
  const std::string op_name(op_name_);
  const TensorReader reader = [&](const at::Tensor& tensor, int slot) {
    const ElementType type = lowering::ToElementTypeOrThrow(tensor.scalar_type(), op_name.c_str());
    const int64_t rank = flat_elements_ >= 0 && tensor.dim() > 0 ? 1 : tensor.dim();
    return lowering::ApplyViewBits(program.builder(),
                                   emitter.ReadNext(program.Flat(slot, type), rank, padding),
                                   tensor.is_conj(), tensor.is_neg());
  };
  std::vector<bool> written;
  std::vector<Value> results = Lower(function, program, snapshot.tensor_slots,
                                     snapshot.destination_slots, snapshot.host_scalars,
                                     *plan->description, written, &reader);
  // cat's result rows come from its list's operands, which are the first reads.
  int64_t concatenated_dim = -1;
  size_t concatenated_reads = 0;
  if (op_name_ == "aten::cat") {
    const auto list = operands_[0].toTensorList();
    for (const at::Tensor& tensor : list) {
      if (tensor.dim() == 1 && tensor.size(0) == 0) {  // legacy skipped operands
        throw std::invalid_argument("cat of a legacy empty operand (1-d, size 0) is not padded");
      }
    }
    concatenated_reads = list.size();
    concatenated_dim = c10::maybe_wrap_dim(operands_[1].toInt(), results[0].rank());
  }
  // Results take the layout PyTorch gives them (its dim order), at the bucket's sizes.
  std::vector<std::vector<int64_t>> layouts;
  if (output_strides_ && !Flattened()) layouts = output_strides_();
  plan->result_new_index.assign(results.size(), -1);
  for (size_t r = 0; r < results.size(); ++r) {
    const auto output = static_cast<size_t>(r);
    plan->result_new_index[r] = static_cast<int>(output);
    std::vector<int64_t> strides = DenseStridesLike(
        results[r].dims(), output < layouts.size() ? layouts[output] : std::vector<int64_t>{});
    Value flat =
        emitter.FlatOutput(results[r], output, strides, concatenated_dim, concatenated_reads);
    program.AddNewFlatOutput(flat, lowering::LoweringContext::DtypeOf(results[r]),
                             results[r].dims(), std::move(strides));
  }
  program.Finish();
  ProgramBuilder::Uncompiled uncompiled = program.TakeUncompiled();
  plan->program = std::move(uncompiled.program);
  CompileInto(plan, std::move(uncompiled.module));
  return plan;
}

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
  const lowering::MatmulPrecisionScope precision(
      static_cast<lowering::MatmulPrecision>(matmul_precision_));
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

std::vector<at::Tensor> EagerLaunch::Run(const lowering::LoweringFunction& function) {
  const int device = DeviceIndex();
  const at::Tensor* flat_shape = FlatShapeOperand();
  flat_elements_ = flat_shape ? flat_shape->numel() : -1;
  if (CurrentExecutionMode() == ExecutionMode::kDeferAndFuse) {
    return Defer(function, device, flat_shape);
  }
  thread_local Snapshot snapshot;
  ReleaseSlotsOnExit release_on_exit{snapshot.slots};
  std::unique_lock<std::mutex> lock(LaunchMutex());
  PlanCache& plans = PlanCache::Get();
  std::unique_ptr<GrowingCandidate> growing;
  int64_t growing_symbol = 0;
  const std::shared_ptr<const Plan> plan = FindOrBuildUnderLock<Plan>(
      lock,
      [&]() -> const ProgramSignature& {
        snapshot.Clear();
        TakeSnapshot(function, snapshot);
        return snapshot.signature;
      },
      [&](const ProgramSignature& key) -> std::shared_ptr<const Plan> {
        if (std::shared_ptr<const Plan> exact = plans.Find<Plan>(key)) return exact;
        growing = FindGrowing(function, snapshot);
        if (!growing || !growing->fit) return nullptr;
        std::shared_ptr<const Plan> shared = plans.Find<Plan>(growing->key);
        if (shared) growing_symbol = growing->fit->t;
        return shared;
      },
      [&](const ProgramSignature& key) {
        return BuildPlanFor(function, snapshot, key, growing.get(), growing_symbol);
      });
  if (plan->growing) {
    HostScalar symbol{ElementType::kS64, {}, sizeof(int64_t)};
    std::memcpy(symbol.bytes, &growing_symbol, sizeof(int64_t));
    snapshot.host_scalars.insert(snapshot.host_scalars.begin(), symbol);
  }

  // A plan whose compile failed queues too: the queue reports the failure like a device error.
  const bool compiled = !plan->compile || (plan->compile->done() && plan->program.executable);
  ProgramRun run;
  if (compiled && !snapshot.AnyQueued() && !LaunchQueue::Get().Busy(device)) {
    const ProgramInputs inputs{snapshot.slots, snapshot.host_scalars, rng_states_};
    run = RunProgram(plan->program, inputs, device, plan->description, plan);
    // Drop our references to the old buffers before other threads launch.
    snapshot.slots.clear();
    lock.unlock();
    CompleteRun(std::move(run.done), plan->program, plan->description);
  } else {
    QueuedLaunch queued;
    queued.owner = plan;
    queued.program = &plan->program;
    if (!compiled) queued.compile = plan->compile;
    for (const StorageSlot& slot : snapshot.slots) queued.slots.push_back(slot.storage);
    queued.host_scalars = snapshot.host_scalars;
    queued.rng_states = rng_states_;
    {
      const runtime::ProducerScope producer(plan->description);  // names the op in OOM errors
      if (compiled && plan->program.executable && runtime::MemoryLimit(device) > 0) {
        // Known now: refused here rather than failing asynchronously on the launch thread.
        runtime::CheckProgramFits(
            device,
            NewOutputBytes(plan->program) + plan->program.executable->temporary_bytes(),
            *plan->description);
      }
      run.new_tensors = AllocateNewOutputs(plan->program, device);
    }
    for (const at::Tensor& tensor : run.new_tensors) {
      queued.new_outputs.push_back(StorageOf(tensor));
    }
    queued.description = plan->description;
    LaunchQueue::Get().Push(device, std::move(queued));
    snapshot.slots.clear();
    lock.unlock();
    // Debug mode waits for every launch (a plan built asynchronously before it was switched on).
    if (CurrentExecutionMode() == ExecutionMode::kDebug) SynchronizeAll();
  }

  std::vector<at::Tensor> results(plan->result_new_index.size());
  for (size_t r = 0; r < results.size(); ++r) {
    if (plan->result_new_index[r] >= 0) results[r] = run.new_tensors[plan->result_new_index[r]];
  }
  if (plan->growing) {
    // Allocated at the bucket's sizes, so the storage has room for the next few calls' results.
    for (size_t r = 0; r < results.size(); ++r) {
      const int output = plan->result_new_index[r];
      if (output < 0) continue;
      const std::vector<int64_t> sizes = plan->growing->OutputSizes(output, growing_symbol);
      results[r].unsafeGetTensorImpl()->set_sizes_and_strides(
          sizes, DenseStridesLike(sizes, plan->program.new_outputs[output].strides));
    }
  }
  RestoreFlattenedShapes(results, flat_shape, plan->result_new_index);
  for (const auto& [index, destination] : destinations_) results[index] = destination;
  return results;
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

namespace {

// A tensor with `tensor`'s geometry and dtype and no device storage.
at::Tensor GeometryOf(const at::Tensor& tensor) {
  at::Tensor meta =
      at::detail::empty_strided_meta(tensor.sizes(), tensor.strides(), tensor.scalar_type());
  meta.unsafeGetTensorImpl()->set_storage_offset(tensor.storage_offset());
  // The math bits are geometry too: they change what a view reads and writes.
  meta._set_conj(tensor.is_conj());
  meta._set_neg(tensor.is_neg());
  return meta;
}

}  // namespace

void EagerLaunch::KeepGeometryOnly() {
  for (size_t i = 0; i < operands_.size(); ++i) {
    switch (operand_kinds_[i]) {
      case Kind::kTensor:
        operands_[i] = GeometryOf(operands_[i].toTensor());
        break;
      case Kind::kTensorList: {
        c10::List<at::Tensor> list;
        for (const at::Tensor& tensor : operands_[i].toTensorList()) {
          list.push_back(GeometryOf(tensor));
        }
        operands_[i] = std::move(list);
        break;
      }
      case Kind::kOptionalTensorList: {
        c10::List<std::optional<at::Tensor>> list;
        for (const auto& entry : operands_[i].toOptionalTensorList()) {
          const std::optional<at::Tensor> tensor = entry;
          list.push_back(tensor.has_value() ? std::optional<at::Tensor>(GeometryOf(*tensor))
                                            : std::nullopt);
        }
        operands_[i] = std::move(list);
        break;
      }
      default:  // host scalar tensors hold no device storage
        break;
    }
  }
  for (auto& [index, destination] : destinations_) destination = GeometryOf(destination);
  output_strides_ = nullptr;  // it refers to the caller's arguments; layouts are known by now
  output_dim_orders_ = nullptr;
}

std::vector<at::Tensor> EagerLaunch::Defer(const lowering::LoweringFunction& function, int device,
                                           const at::Tensor* flat_shape) {
  // The graph reads storages' buffers as they are now: queued launches produce them first.
  LaunchQueue::Get().Drain();
  thread_local Snapshot snapshot;
  snapshot.Clear();
  snapshot.read_contents = false;
  TakeSnapshot(function, snapshot);
  snapshot.signature.AddTag(SignatureTag::kDeferred);
  // The results' dtypes and layouts follow from the signature: lower the op once per signature
  // (without compiling) to learn them; errors the lowering raises surface here, at the call.
  const std::shared_ptr<const DeferredResults> shapes = PlanCache::Get().GetOrBuild<
      DeferredResults>(
      snapshot.signature,
      [&] {
        std::vector<StorageSlotInfo> slot_infos;
        for (const auto& slot : snapshot.slots) {
          slot_infos.push_back(
              {slot.storage ? slot.storage->nbytes() : 0, false, ElementType::kU8});
        }
        ProgramBuilder program(std::move(slot_infos));
        std::vector<bool> written;
        std::vector<Value> results;
        try {
          results = Lower(function, program, snapshot.tensor_slots, snapshot.destination_slots,
                          snapshot.host_scalars, std::string(op_name_), written);
        } catch (const c10::Error&) {
          throw;
        } catch (const std::exception& error) {
          RaiseLoweringFailure(op_name_, operands_, error);
        }
        auto inferred = std::make_shared<DeferredResults>();
        std::vector<std::vector<int64_t>> strides =
            NewResultStrides(results, written, inferred->result_new_index);
        for (size_t r = 0; r < results.size(); ++r) {
          const int index = inferred->result_new_index[r];
          if (index < 0) continue;
          inferred->new_results.push_back({lowering::LoweringContext::DtypeOf(results[r]),
                                           results[r].dims(), std::move(strides[index])});
        }
        return std::shared_ptr<const DeferredResults>(std::move(inferred));
      },
      PlanCache::Options{.holds_executable = false});

  std::vector<at::Tensor> new_tensors;
  {
    runtime::DeviceScope allocation_device(device);
    c10::Allocator* allocator = c10::GetAllocator(c10::DeviceType::PrivateUse1);
    for (const auto& result : shapes->new_results) {
      new_tensors.push_back(at::detail::empty_strided_generic(
          result.sizes, result.strides, allocator,
          c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), result.dtype));
    }
  }
  std::vector<at::Tensor> results(shapes->result_new_index.size());
  for (size_t r = 0; r < results.size(); ++r) {
    if (shapes->result_new_index[r] >= 0) results[r] = new_tensors[shapes->result_new_index[r]];
  }
  RestoreFlattenedShapes(results, flat_shape, shapes->result_new_index);
  for (const auto& [index, destination] : destinations_) results[index] = destination;
  const DeferredGraph::OpRecord record{snapshot.signature,
                                       snapshot.slots,
                                       snapshot.storage_impls,
                                       snapshot.tensor_slots,
                                       snapshot.destination_slots,
                                       snapshot.host_scalars,
                                       shapes,
                                       new_tensors};
  DeferredGraph::Get().Record(std::move(*this), function, device, record);
  return results;
}

void SynchronizeAll() {
  LaunchQueue::Get().Drain();
  DeferredGraph::Get().Flush("synchronize");
  PendingWork::Get().WaitAllAndCheck();
}

bool AllWorkDone() {
  // A query starts pending work (never waits for it), so polling loops make progress.
  DeferredGraph::Get().Flush("query");
  return LaunchQueue::Get().Idle() && PendingWork::Get().AllReady();
}

namespace {

// The runtime's device guard and hooks wait for and resize through the executors.
[[maybe_unused]] const bool device_work_installed = [] {
  runtime::InstallDeviceWork({&SynchronizeAll, &AllWorkDone,
                              [] {
                                DeferredGraph::Get().Flush("memory_stats");
                                LaunchQueue::Get().Drain();
                              },
                              &ResizeStorage});
  return true;
}();

}  // namespace

}  // namespace torch_tpu::exec

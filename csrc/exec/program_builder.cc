#include "exec/program_builder.h"

#include <algorithm>
#include <numeric>

#include "cache/executable_cache.h"
#include "exec/pending_work.h"
#include "exec/tiered_compilation.h"

namespace torch_tpu::exec {

using stablehlo::ElementType;
using stablehlo::TensorType;
using stablehlo::Value;

namespace {

bool IsIdentity(const std::vector<int64_t>& permutation) {
  for (size_t i = 0; i < permutation.size(); ++i) {
    if (permutation[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// Builds with `emit` over `slots`, once more with the unused storages unread, and hands the
// builder to `take`.
template <typename Take>
auto BuildTwice(std::vector<StorageSlotInfo> slots,
                const std::function<void(ProgramBuilder&)>& emit, const Take& take) {
  for (int pass = 0;; ++pass) {
    ProgramBuilder program(slots);
    emit(program);
    std::vector<int> unused = program.Finish();
    if (unused.empty() || pass == 1) return take(program);
    for (int slot : unused) slots[slot].initialized = false;
  }
}

}  // namespace

BuiltProgram BuildProgram(std::vector<StorageSlotInfo> slots,
                          const std::function<void(ProgramBuilder&)>& emit,
                          runtime::CompileTier tier) {
  return BuildTwice(std::move(slots), emit,
                    [tier](ProgramBuilder& program) { return program.Compile(tier); });
}

ProgramBuilder::Uncompiled BuildUncompiledProgram(
    std::vector<StorageSlotInfo> slots, const std::function<void(ProgramBuilder&)>& emit) {
  return BuildTwice(std::move(slots), emit,
                    [](ProgramBuilder& program) { return program.TakeUncompiled(); });
}

std::vector<int64_t> OuterToInnerOrder(const std::vector<int64_t>& strides) {
  std::vector<int64_t> order(strides.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  return order;
}

std::vector<int64_t> DenseStridesLike(const std::vector<int64_t>& sizes,
                                      const std::vector<int64_t>& strides) {
  std::vector<int64_t> result(sizes.size(), 1);
  std::vector<int64_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  if (strides.size() == sizes.size()) {
    // Equal strides (a size-1 dim next to another): the smaller dim is the inner one, as
    // TensorIterator orders them, so sizes (3, 1, 3) with strides (1, 3, 3) stay (1, 3, 3).
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return strides[a] != strides[b] ? strides[a] > strides[b] : sizes[a] > sizes[b];
    });
  }
  int64_t stride = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    result[*it] = stride;
    stride *= std::max<int64_t>(sizes[*it], 1);
  }
  return result;
}

ProgramBuilder::ProgramBuilder(std::vector<StorageSlotInfo> slots) {
  slots_.reserve(slots.size());
  for (StorageSlotInfo& info : slots) slots_.push_back(Slot{info});
}

Value ProgramBuilder::SlotValue(int slot, ElementType type) {
  Slot& entry = slots_[slot];
  if (!entry.value.valid()) {
    if (entry.info.initialized) {
      const int64_t length =
          static_cast<int64_t>(entry.info.nbytes) / stablehlo::ByteWidth(entry.info.element_type);
      entry.value = builder().Argument(TensorType{entry.info.element_type, {length}});
      entry.argument = argument_count_++;
      program_.arguments.push_back({ProgramArgument::Kind::kStorage, slot});
    } else {
      // Never written: reads as zeros of the first type it is viewed as.
      entry.value = builder().Constant(
          type, 0.0, {static_cast<int64_t>(entry.info.nbytes) / stablehlo::ByteWidth(type)});
    }
  }
  return ReinterpretFlat(builder(), entry.value, type);
}

Value ProgramBuilder::Read(int slot, ElementType type, const StridedView& view) {
  return ReadView(builder(), SlotValue(slot, type), view);
}

void ProgramBuilder::Write(int slot, ElementType type, const StridedView& view, Value values) {
  Slot& entry = slots_[slot];
  const int64_t length = static_cast<int64_t>(entry.info.nbytes) / stablehlo::ByteWidth(type);
  entry.written = true;
  if (CoversWholeStorage(view, length)) {
    entry.value = builder().Reshape(values, {length});  // the old contents are not needed
    return;
  }
  if (type == ElementType::kPred && entry.info.element_type != ElementType::kPred) {
    // A bool view of byte storage writes 0/1 bytes; going through a bool copy of the whole
    // storage would turn the other bytes into 0/1 too.
    entry.value = WriteView(builder(), SlotValue(slot, ElementType::kU8), view,
                            builder().Convert(values, ElementType::kU8));
    return;
  }
  entry.value = WriteView(builder(), SlotValue(slot, type), view, values);
}

Value ProgramBuilder::RuntimeScalar(ElementType type) {
  program_.arguments.push_back({ProgramArgument::Kind::kRuntimeScalar, next_runtime_scalar_++});
  ++argument_count_;
  return builder().Argument(TensorType{type, {}});
}

Value ProgramBuilder::RngState() {
  program_.arguments.push_back({ProgramArgument::Kind::kRngState, next_rng_state_++});
  ++argument_count_;
  return builder().Argument(TensorType{ElementType::kU64, {2}});
}

Value ProgramBuilder::PhysicalFlat(Value value, const std::vector<int64_t>& strides) {
  const std::vector<int64_t> order = OuterToInnerOrder(strides);
  Value physical = IsIdentity(order) ? value : builder().Transpose(value, order);
  return builder().Reshape(physical, {value.type().NumElements()});
}

void ProgramBuilder::AddNewOutput(Value value, c10::ScalarType dtype,
                                  std::vector<int64_t> strides) {
  new_output_values_.push_back(PhysicalFlat(value, strides));
  program_.new_outputs.push_back({dtype, value.dims(), std::move(strides)});
}

void ProgramBuilder::AddNewFlatOutput(Value flat, c10::ScalarType dtype, std::vector<int64_t> sizes,
                                      std::vector<int64_t> strides) {
  new_output_values_.push_back(flat);
  program_.new_outputs.push_back({dtype, std::move(sizes), std::move(strides)});
}

void ProgramBuilder::WriteDense(int slot, Value value, const std::vector<int64_t>& strides) {
  Slot& entry = slots_[slot];
  entry.written = true;
  entry.value = PhysicalFlat(value, strides);
}

void ProgramBuilder::WriteFlat(int slot, Value flat) {
  Slot& entry = slots_[slot];
  entry.written = true;
  entry.value = flat;
}

void ProgramBuilder::AddDeviceChecks(
    const std::vector<lowering::LoweringContext::DeviceCheck>& checks,
    const std::string& op_description) {
  if (checks.empty()) return;
  auto& b = builder();
  if (!error_word_.valid()) {
    error_word_ = b.Argument(TensorType{ElementType::kS32, {}});
    program_.error_word_argument = argument_count_++;
    program_.arguments.push_back({ProgramArgument::Kind::kErrorWord, 0});
    check_base_ = b.Argument(TensorType{ElementType::kS32, {}});
    ++argument_count_;
    program_.arguments.push_back({ProgramArgument::Kind::kCheckBase, 0});
  }
  const auto first = static_cast<int32_t>(program_.device_checks.size()) + 1;
  for (const auto& check : checks) {
    const bool index_error = check.what.rfind("index", 0) == 0;
    program_.device_checks.push_back({op_description, check.what, index_error});
  }
  // The first failure is kept: the earliest failing check of the op, and a word that is already
  // set stays as it is.
  Value zero = b.ConstantInt(ElementType::kS32, 0);
  Value code = zero;
  for (int i = static_cast<int>(checks.size()) - 1; i >= 0; --i) {
    code = b.Select(checks[i].violated, b.ConstantInt(ElementType::kS32, first + i), code);
  }
  using Direction = stablehlo::FunctionBuilder::ComparisonDirection;
  Value fires =
      b.And(b.Compare(error_word_, zero, Direction::kEq), b.Compare(code, zero, Direction::kNe));
  error_word_ = b.Select(fires, b.Add(code, check_base_), error_word_);
}

std::vector<int> ProgramBuilder::Finish() {
  auto& b = builder();
  std::vector<Value> returned = new_output_values_;
  std::vector<std::pair<int, int>> aliases;  // (argument, result)
  for (size_t s = 0; s < slots_.size(); ++s) {
    Slot& entry = slots_[s];
    if (!entry.written) continue;
    int aliased = -1;
    if (entry.argument >= 0 && entry.value.type() == b.argument_types()[entry.argument]) {
      aliased = entry.argument;
      aliases.emplace_back(entry.argument, static_cast<int>(returned.size()));
    }
    program_.written_storages.push_back({static_cast<int>(s), entry.value.element_type(), aliased});
    returned.push_back(entry.value);
  }
  if (error_word_.valid()) {
    // Not aliased: donating a 4-byte word saves nothing, and on the CPU plugin donating a buffer
    // whose producer is still running would block the host.
    returned.push_back(error_word_);
  }
  b.Return(returned);
  for (const auto& [argument, result] : aliases) b.AliasArgumentWithResult(argument, result);
  const std::vector<bool> live = b.LiveArguments();
  std::vector<int> unused;
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s].argument >= 0 && !live[slots_[s].argument]) unused.push_back(static_cast<int>(s));
  }
  return unused;
}

BuiltProgram ProgramBuilder::Compile(runtime::CompileTier tier) {
  Uncompiled uncompiled = TakeUncompiled();
  BuiltProgram& program = uncompiled.program;
  runtime::CompileTier served = tier;
  program.executable =
      ExecutableCache::Get().GetOrCompile(uncompiled.module, *program.module_text, tier, &served);
  if (served == runtime::CompileTier::kQuick) {
    program.tiers =
        std::make_shared<ProgramTiers>(program.module_text, uncompiled.module.StructuralHash());
  }
  return std::move(program);
}

ProgramBuilder::Uncompiled ProgramBuilder::TakeUncompiled() {
  program_.module_text = std::make_shared<const std::string>(module_.ToText());
  if (!program_.device_checks.empty()) {
    program_.check_base = PendingWork::Get().RegisterChecks(program_.device_checks);
  }
  return Uncompiled{std::move(program_), std::move(module_)};
}

}  // namespace torch_tpu::exec

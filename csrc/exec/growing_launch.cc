// Eager launches that share one bucketed program along a growing length (exec/growing_shapes.h).
#include "exec/launch_internals.h"

#include <c10/core/WrapDimMinimal.h>

#include <cstdlib>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>

#include "exec/growing_shapes.h"
#include "exec/program_builder.h"
#include "exec/program_execution.h"
#include "exec/program_issue.h"
#include "exec/program_signature.h"
#include "lowering/complex.h"
#include "lowering/context.h"
#include "lowering/dtype.h"
#include "runtime/storage_buffer.h"
#include "stablehlo/builder.h"

namespace torch_tpu::exec {

using stablehlo::ElementType;
using stablehlo::Value;
using launch_internals::Describe;
using launch_internals::HasComplexTensor;

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

}  // namespace

std::unique_ptr<EagerLaunch::GrowingCandidate> EagerLaunch::FindGrowing(
    const lowering::LoweringFunction& function, const Snapshot& snapshot,
    const GrowingReference* reference) const {
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
  // Defer-and-fuse signs storages without their buffers (reading one would run the graph).
  family_snapshot.read_contents = snapshot.read_contents;
  TakeSnapshot(function, family_snapshot, candidate.get());
  family_snapshot.Clear();
  candidate->fit = GrowingFamilies::Get().Fit(candidate->family, candidate->numbers,
                                              candidate->is_size, candidate->padding.has_value());
  if (candidate->fit && reference) reference->Align(*candidate->fit);
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

void EagerLaunch::ForEachTensorOperand(c10::function_ref<void(const at::Tensor&)> visit) const {
  for (size_t i = 0; i < operands_.size(); ++i) {
    if (operand_kinds_[i] == OperandKind::kTensor) {
      visit(operands_[i].toTensor());
    } else if (operand_kinds_[i] == OperandKind::kTensorList) {
      for (const at::Tensor& tensor : operands_[i].toTensorList()) visit(tensor);
    }
  }
}

void EagerLaunch::GrowFullStorages() const {
  ForEachTensorOperand([](const at::Tensor& tensor) { GrowingStorageOrigin::GrowIfFull(tensor); });
}

ExactLaunchRecord EagerLaunch::RecordExact(GrowingCandidate& growing,
                                           std::vector<std::vector<int64_t>> output_sizes) const {
  // The exact launches whose results the operands are, and whether a bucketed one's are among
  // them (GrowingStorageOrigin::LaunchOf).
  std::vector<uint64_t> launches;
  bool reads_bucketed = false;
  ForEachTensorOperand([&](const at::Tensor& tensor) {
    const uint64_t launch = GrowingStorageOrigin::LaunchOf(tensor, reads_bucketed);
    if (launch != 0) launches.push_back(launch);
  });
  return GrowingFamilies::Get().Record(growing.family, std::move(growing.numbers),
                                       std::move(output_sizes), growing.is_size,
                                       growing.padding.has_value(), launches, reads_bucketed);
}

std::vector<EagerLaunch::GrowingResult> EagerLaunch::LowerGrowing(
    const lowering::LoweringFunction& function, ProgramBuilder& program,
    std::span<const int> tensor_slots, std::span<const HostScalar> host_scalars,
    const GrowingFit& fit, GrowingPadding padding, const std::string& description,
    const std::vector<std::vector<int64_t>>& layouts) const {
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
  std::vector<Value> values =
      Lower(function, program, tensor_slots, {}, host_scalars, description, written, &reader);
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
    concatenated_dim = c10::maybe_wrap_dim(operands_[1].toInt(), values[0].rank());
  }
  // Results take the layout PyTorch gives them (its dim order), at the bucket's sizes.
  std::vector<GrowingResult> results;
  for (size_t output = 0; output < values.size(); ++output) {
    std::vector<int64_t> strides = DenseStridesLike(
        values[output].dims(),
        output < layouts.size() ? layouts[output] : std::vector<int64_t>{});
    Value flat =
        emitter.FlatOutput(values[output], output, strides, concatenated_dim, concatenated_reads);
    results.push_back({flat, lowering::LoweringContext::DtypeOf(values[output]),
                       values[output].dims(), std::move(strides)});
  }
  return results;
}

std::string EagerLaunch::DescribeGrowing(const GrowingFit& fit) const {
  return Describe(op_name_, operands_) +
         ", or the same op at another length of its growing sequence (one program up to bucket " +
         std::to_string(fit.bucket) + ")";
}

std::vector<std::vector<int64_t>> EagerLaunch::ResultLayouts() const {
  return output_strides_ && !Flattened() ? output_strides_() : std::vector<std::vector<int64_t>>{};
}

std::shared_ptr<EagerLaunch::Plan> EagerLaunch::BuildGrowingPlan(
    const lowering::LoweringFunction& function, const Snapshot& snapshot,
    const GrowingCandidate& candidate) const {
  const GrowingFit& fit = *candidate.fit;
  auto plan = std::make_shared<Plan>();
  plan->growing = fit.model;
  plan->description = std::make_shared<const std::string>(DescribeGrowing(fit));
  std::vector<StorageSlotInfo> slot_infos;
  for (const auto& slot : snapshot.slots) {
    slot_infos.push_back({slot.storage ? slot.storage->nbytes() : 0, slot.contents.initialized(),
                          slot.contents.element_type});
  }
  ProgramBuilder program(std::move(slot_infos));
  std::vector<GrowingResult> results =
      LowerGrowing(function, program, snapshot.tensor_slots, snapshot.host_scalars, fit,
                   candidate.padding.value_or(GrowingPadding::kEdge), *plan->description,
                   ResultLayouts());
  plan->result_new_index.assign(results.size(), -1);
  for (size_t r = 0; r < results.size(); ++r) {
    plan->result_new_index[r] = static_cast<int>(r);
    program.AddNewFlatOutput(results[r].flat, results[r].dtype, std::move(results[r].sizes),
                             std::move(results[r].strides));
  }
  program.Finish();
  ProgramBuilder::Uncompiled uncompiled = program.TakeUncompiled();
  plan->program = std::move(uncompiled.program);
  CompileForIssue(plan, plan->program, plan->compile, std::move(uncompiled.module));
  return plan;
}

}  // namespace torch_tpu::exec

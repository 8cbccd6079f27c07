// Building and compiling the program of an eager launch that missed the plan cache.
#include "exec/launch_internals.h"

#include <c10/util/Exception.h>

#include <stdexcept>
#include <string>

#include "cache/executable_cache.h"
#include "exec/compile_pool.h"
#include "exec/growing_shapes.h"
#include "exec/plan_cache.h"
#include "exec/program_builder.h"
#include "exec/program_issue.h"
#include "exec/program_signature.h"
#include "lowering/context.h"
#include "lowering/matmul_precision.h"
#include "runtime/storage_buffer.h"

namespace torch_tpu::exec {

using stablehlo::Value;
using launch_internals::RaiseLoweringFailure;

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
    } catch (const lowering::UnsignedMatmulPrecisionRead&) {
      throw;  // not a failure of the padded form: the launch starts again, signed
    } catch (const std::exception& error) {
      // The op does not build padded (a shape check, a lowering that needs exact sizes): its
      // exact program follows and raises whatever the op itself raises.
      failure = error.what();
    }
    if (shared) {
      if (built) ForgetPlanIfCompileFails(growing->key, shared.get(), shared->compile);
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
        } catch (const lowering::UnsignedMatmulPrecisionRead&) {
          throw;  // the launch starts again, signed
        } catch (const std::exception& error) {
          RaiseLoweringFailure(op_name_, operands_, error);
        }
      },
      PlanCache::Options{}, &built);
  if (built) ForgetPlanIfCompileFails(key, exact.get(), exact->compile);
  if (growing) {
    std::vector<std::vector<int64_t>> output_sizes;
    for (const auto& output : exact->program.new_outputs) output_sizes.push_back(output.sizes);
    growing->recorded_launch = RecordExact(*growing, std::move(output_sizes)).launch;
  }
  return exact;
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
  CompileForIssue(plan, plan->program, plan->compile, std::move(uncompiled.module));
  return plan;
}

}  // namespace torch_tpu::exec

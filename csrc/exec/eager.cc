// Eager execution of one op: find (or build) its plan, run it now or queue it.
#include "exec/launch_internals.h"

#include <chrono>
#include <cstring>
#include <mutex>

#include "exec/deferred_graph.h"
#include "exec/growing_shapes.h"
#include "exec/launch_queue.h"
#include "exec/launch_lock.h"
#include "exec/pending_work.h"
#include "exec/plan_cache.h"
#include "exec/program_builder.h"
#include "exec/program_execution.h"
#include "exec/program_issue.h"
#include "exec/program_signature.h"
#include "exec/scalar_buffers.h"
#include "exec/storage_ops.h"
#include "lowering/matmul_precision.h"
#include "runtime/device_work.h"
#include "runtime/storage.h"
#include "runtime/storage_buffer.h"

namespace torch_tpu::exec {

using stablehlo::ElementType;

std::vector<at::Tensor> EagerLaunch::Run(const lowering::LoweringFunction& function) {
  matmul_precision_ = lowering::MatmulPrecisionToSign(&function);
  try {
    return RunSigned(function);
  } catch (const lowering::UnsignedMatmulPrecisionRead&) {
    // The lowering reads the precision, which this launch did not sign (lowering/
    // matmul_precision.h): nothing was built or run; from now on its launches sign it.
    lowering::MarkReadsMatmulPrecision(&function);
    matmul_precision_ = lowering::MatmulPrecisionToSign(&function);
    return RunSigned(function);
  }
}

std::vector<at::Tensor> EagerLaunch::RunSigned(const lowering::LoweringFunction& function) {
  const int device = DeviceIndex();
  const at::Tensor* flat_shape = FlatShapeOperand();
  flat_elements_ = flat_shape ? flat_shape->numel() : -1;
  GrowFullStorages();
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

  const std::vector<at::Tensor> new_tensors =
      IssueProgram(lock, {plan, plan->program, plan->compile, plan->description, device},
                   snapshot.slots, snapshot.host_scalars, rng_states_);

  std::vector<at::Tensor> results(plan->result_new_index.size());
  for (size_t r = 0; r < results.size(); ++r) {
    if (plan->result_new_index[r] >= 0) results[r] = new_tensors[plan->result_new_index[r]];
  }
  if (plan->growing) {
    // Allocated at the bucket's sizes, so the storage has room for the next few calls' results.
    for (size_t r = 0; r < results.size(); ++r) {
      const int output = plan->result_new_index[r];
      if (output < 0) continue;
      const std::vector<int64_t> sizes = plan->growing->OutputSizes(output, growing_symbol);
      results[r].unsafeGetTensorImpl()->set_sizes_and_strides(
          sizes, DenseStridesLike(sizes, plan->program.new_outputs[output].strides));
      GrowingStorageOrigin::Mark(results[r], *growing->fit, output);
    }
  }
  if (growing && !plan->growing && growing->recorded_launch != 0) {
    for (const at::Tensor& tensor : new_tensors) {
      GrowingStorageOrigin::MarkExact(tensor, growing->recorded_launch);
    }
  }
  RestoreFlattenedShapes(results, flat_shape, plan->result_new_index);
  for (const auto& [index, destination] : destinations_) results[index] = destination;
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

#include "exec/program_issue.h"

#include "cache/executable_cache.h"
#include "exec/eager.h"
#include "exec/launch_queue.h"
#include "exec/plan_cache.h"
#include "runtime/storage.h"
#include "runtime/storage_buffer.h"

namespace torch_tpu::exec {

void CompileForIssue(std::shared_ptr<const void> owner, BuiltProgram& program,
                     std::shared_ptr<CompileJob>& job, stablehlo::Module module) {
  const std::string& text = *program.module_text;
  if (CurrentExecutionMode() == ExecutionMode::kDebug || !CompilesInBackground()) {
    program.executable = ExecutableCache::Get().GetOrCompile(module, text);
  } else if (!(program.executable = ExecutableCache::Get().FindLoaded(text))) {
    job = CompileInBackground(std::move(module), program.module_text);
    // The job drops the callback (and with it `owner`) once it has run.
    job->OnCompiled([owner = std::move(owner), &program](const Executable& executable) {
      program.executable = executable;
    });
  }
}

void ForgetPlanIfCompileFails(const ProgramSignature& key, const void* plan,
                              const std::shared_ptr<CompileJob>& compile) {
  if (!compile) return;
  // Runs at once when the compile has ended already, so the plan is cached by now either way.
  compile->OnCompiled([key, plan](const Executable& executable) {
    if (!executable) PlanCache::Get().Forget(key, plan);
  });
}

std::vector<at::Tensor> IssueProgram(
    std::unique_lock<std::mutex>& lock, ProgramToIssue issue, std::vector<StorageSlot>& slots,
    const std::vector<HostScalar>& host_scalars,
    const std::vector<std::pair<uint64_t, uint64_t>>& rng_states) {
  const BuiltProgram& program = issue.program;
  const std::shared_ptr<CompileJob>& compile = issue.compile;
  const std::shared_ptr<const std::string>& description = issue.description;
  const int device = issue.device;
  // A plan whose compile failed queues too: the queue reports the failure like a device error.
  const bool compiled = !compile || (compile->done() && program.executable);
  bool any_queued = false;
  for (const StorageSlot& slot : slots) any_queued = any_queued || slot.contents.queued;
  if (compiled && !any_queued && !LaunchQueue::Get().Busy(device)) {
    const ProgramInputs inputs{slots, host_scalars, rng_states};
    ProgramRun run = RunProgram(program, inputs, device, description, std::move(issue.owner));
    // Drop our references to the old buffers before other threads launch.
    slots.clear();
    lock.unlock();
    CompleteRun(std::move(run.done), program, description);
    return std::move(run.new_tensors);
  }
  QueuedLaunch queued;
  queued.owner = std::move(issue.owner);
  queued.program = &program;
  if (!compiled) queued.compile = compile;
  for (const StorageSlot& slot : slots) queued.slots.push_back(slot.storage);
  queued.host_scalars = host_scalars;
  queued.rng_states = rng_states;
  std::vector<at::Tensor> new_tensors;
  {
    const runtime::ProducerScope producer(description);  // names the program in OOM errors
    if (compiled && program.executable && runtime::MemoryLimit(device) > 0) {
      // Known now: refused here rather than failing asynchronously on the launch thread.
      runtime::CheckProgramFits(device,
                                NewOutputBytes(program) + program.executable->temporary_bytes(),
                                *description);
    }
    new_tensors = AllocateNewOutputs(program, device);
  }
  for (const at::Tensor& tensor : new_tensors) queued.new_outputs.push_back(StorageOf(tensor));
  queued.description = description;
  // Our references to the storages' buffers go before the launch is queued: the launch thread
  // may run it at once, and a written buffer still held here would not be donated.
  slots.clear();
  LaunchQueue::Get().Push(device, std::move(queued));
  lock.unlock();
  // Debug mode waits for every launch (a plan built asynchronously before it was switched on).
  if (CurrentExecutionMode() == ExecutionMode::kDebug) SynchronizeAll();
  return new_tensors;
}

}  // namespace torch_tpu::exec

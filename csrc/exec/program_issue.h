// Issuing a built program: compiling it off the launching thread, then running it at once when
// its executable is ready, or queueing it behind its compile (exec/launch_queue.h). Eager
// launches and compiled graphs both issue their programs here, so Python runs ahead of XLA in
// both: the forward and backward programs of a new compiled graph compile at the same time.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "exec/compile_pool.h"
#include "exec/program_builder.h"
#include "exec/program_execution.h"
#include "exec/program_signature.h"
#include "exec/scalar_buffers.h"
#include "stablehlo/module.h"

namespace torch_tpu::exec {

// Compiles `module` into `program`: on this thread in debug mode or without a compile pool, from
// the process's loaded executables when they hold it, else in the background, setting `job`
// (program.executable is set once it is done). `owner` holds `program` and is kept alive until
// the job has run.
void CompileForIssue(std::shared_ptr<const void> owner, BuiltProgram& program,
                     std::shared_ptr<CompileJob>& job, stablehlo::Module module);

// The plan cached under `key` is forgotten if its background compile fails, so the launches
// already holding it fail with the compile error and the next one compiles again. No-op without
// a `compile` job.
void ForgetPlanIfCompileFails(const ProgramSignature& key, const void* plan,
                              const std::shared_ptr<CompileJob>& compile);

// A built program to issue, and what names it and keeps it alive.
struct ProgramToIssue {
  std::shared_ptr<const void> owner;  // keeps `program` and `compile` alive
  const BuiltProgram& program;
  const std::shared_ptr<CompileJob>& compile;  // null when compiled at the call
  const std::shared_ptr<const std::string>& description;
  int device;
};

// Runs the program over `slots` (read with StorageBuffer::launch_contents) now when its
// executable is ready and neither a slot nor the device waits on a queued launch; else queues it,
// with new tensors handed out at once. The caller holds `lock` (LaunchMutex()) since it read the
// slots; the slots are cleared and the lock released here. Returns the new tensors, in
// BuiltProgram::new_outputs order.
std::vector<at::Tensor> IssueProgram(
    std::unique_lock<std::mutex>& lock, ProgramToIssue issue, std::vector<StorageSlot>& slots,
    const std::vector<HostScalar>& host_scalars,
    const std::vector<std::pair<uint64_t, uint64_t>>& rng_states);

}  // namespace torch_tpu::exec

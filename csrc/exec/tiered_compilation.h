// Tiered compilation of whole-step programs: DeferAndFuse's fused graphs and torch.compile's
// graphs (exec/program_builder.h's BuildProgram).
//
// An optimized XLA compile of such a program costs 0.2-1 s on the CPU plugin, and many of them
// run once: a generation's prompt, the first lengths of a growing sequence before its buckets
// take over (exec/growing_shapes.h), a step at a batch size that comes once. So a new program is
// compiled at the quick tier first (runtime::CompileTier::kQuick: XLA backend optimization level
// 0, about two thirds of the time, slower code). The first run of a program that runs again asks
// the compile pool for its optimized build; later runs keep the quick executable until that is
// ready and then switch to it (RunProgram, exec/program_execution.h, asks here before each
// run). The optimized build is the same module, so it reads the same arguments and writes the
// same outputs: a run takes either one.
//
// The builds round differently (at level 0 LLVM forms no fused multiply-adds), so a step's
// values change in the last bits when it switches, and when that happens depends on timing: two
// runs of a script no longer give the same bits. That is why it is opt-in
// (TORCH_TPU_TIERED_COMPILATION=1), like cuDNN's benchmark mode, which trades the same thing for
// speed; under torch.use_deterministic_algorithms a program keeps one build (the optimized one,
// for programs compiled since). Without a compile pool (TORCH_TPU_COMPILE_THREADS=0) every
// program is compiled optimized at once.
//
// The executable cache keys each tier apart; a quick request takes an optimized program any tier
// holds (a warm process starts from the optimized programs an earlier one tiered up).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "exec/compile_pool.h"
#include "runtime/runtime.h"

namespace torch_tpu::exec {

// The tier a new whole-step program compiles at.
runtime::CompileTier WholeProgramTier();

// The tiers of one program that was compiled quickly. Used under the launch lock
// (exec/launch_lock.h), which every run holds.
class ProgramTiers : public std::enable_shared_from_this<ProgramTiers> {
 public:
  ProgramTiers(std::shared_ptr<const std::string> module_text, uint64_t structural_hash);

  // The executable this run takes: `quick` (the program's own) until the optimized one is
  // ready. The second call starts the optimized compile.
  const Executable& ForRun(const Executable& quick);

 private:
  std::shared_ptr<const std::string> module_text_;
  uint64_t structural_hash_;
  Executable optimized_;
  int runs_ = 0;
  std::shared_ptr<CompileJob> tier_up_;  // under way
  bool tier_up_failed_ = false;
};

// Test and benchmark hook: waits until every optimized compile started so far has ended; the
// programs switch at their next run.
void WaitForTierUps();

}  // namespace torch_tpu::exec

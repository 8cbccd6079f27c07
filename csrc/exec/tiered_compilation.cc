#include "exec/tiered_compilation.h"

#include <ATen/Context.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "runtime/metrics.h"

namespace torch_tpu::exec {

namespace {

// Opt-in: the builds round differently, and which runs take which depends on timing, so a
// process's values would no longer repeat bit for bit from one run of the script to the next.
bool TieredCompilationEnabled() {
  static const bool enabled = [] {
    const char* setting = std::getenv("TORCH_TPU_TIERED_COMPILATION");
    return setting != nullptr && std::strcmp(setting, "1") == 0;
  }();
  return enabled;
}

// Optimized compiles under way, for WaitForTierUps.
std::mutex tier_ups_mutex;
std::vector<std::weak_ptr<CompileJob>> tier_ups;

}  // namespace

runtime::CompileTier WholeProgramTier() {
  // Without a compile pool nothing could tier up: the quick build would be all a program gets.
  // The two builds round differently (no fused multiply-adds at level 0), so under
  // torch.use_deterministic_algorithms a program keeps one build, the optimized one.
  return TieredCompilationEnabled() && CompilesInBackground() &&
                 !at::globalContext().deterministicAlgorithms() &&
                 runtime::Runtime::Get().SupportsQuickCompiles()
             ? runtime::CompileTier::kQuick
             : runtime::CompileTier::kOptimized;
}

ProgramTiers::ProgramTiers(std::shared_ptr<const std::string> module_text,
                           uint64_t structural_hash)
    : module_text_(std::move(module_text)), structural_hash_(structural_hash) {}

const Executable& ProgramTiers::ForRun(const Executable& quick) {
  if (optimized_) return optimized_;
  // Deterministic algorithms turned on after the quick compile: the program keeps that build.
  if (at::globalContext().deterministicAlgorithms()) return quick;
  if (!tier_up_) {
    // The first run may be the only one; the second says the program is worth optimizing.
    if (!tier_up_failed_ && ++runs_ == 2) {
      tier_up_ = TierUpInBackground(weak_from_this(), module_text_, structural_hash_);
      std::lock_guard<std::mutex> lock(tier_ups_mutex);
      std::erase_if(tier_ups, [](const std::weak_ptr<CompileJob>& job) { return job.expired(); });
      tier_ups.push_back(tier_up_);
    }
    return quick;
  }
  if (!tier_up_->done()) return quick;
  optimized_ = tier_up_->Wait();
  const bool failed = !tier_up_->error().empty();
  tier_up_.reset();
  if (optimized_) {
    ++runtime::Metrics::Get().tiered_up_programs;
    return optimized_;
  }
  if (!failed) {
    // The job was another program's, which was dropped before it compiled: ask again.
    runs_ = 1;
    return quick;
  }
  // The quick program stays; the optimized compile is not retried.
  tier_up_failed_ = true;
  runtime::Metrics::Get().RecordReason("tier_up_failures", "compile");
  return quick;
}

void WaitForTierUps() {
  std::vector<std::shared_ptr<CompileJob>> jobs;
  {
    std::lock_guard<std::mutex> lock(tier_ups_mutex);
    for (const auto& job : tier_ups) {
      if (auto held = job.lock()) jobs.push_back(std::move(held));
    }
  }
  for (const auto& job : jobs) job->Wait();
}

}  // namespace torch_tpu::exec

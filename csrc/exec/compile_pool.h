// Compiling off the launching thread. In strict mode a launch on a plan-cache miss lowers its op
// on the Python thread (cheap, and it gives the results' shapes) and hands the XLA compile (the
// executable cache's shared and persistent tiers, then the compiler) to a small pool of threads,
// so Python runs ahead while several programs compile at once; the launch itself waits in the
// launch queue (exec/launch_queue.h) until its executable is ready.
//
// Pool size: TORCH_TPU_COMPILE_THREADS, default min(hardware threads, 8).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pjrt/executable.h"
#include "stablehlo/module.h"

namespace torch_tpu::exec {

using Executable = std::shared_ptr<pjrt::PjrtLoadedExecutable>;

// One module being compiled in the background; every launch that needs the module shares it.
class CompileJob {
 public:
  // Whether the compile has ended (successfully or not); never blocks.
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Blocks until the compile ends; returns the executable, or null when it failed (see error()).
  Executable Wait();
  // The compiler's error text once done() and failed.
  const std::string& error() const { return error_; }
  // Calls `callback` with the executable (null on failure) once compiled: on the compiling
  // thread before done() turns true, or right here when the compile already ended. What a
  // callback writes is therefore visible to whoever sees done() or returns from Wait().
  void OnCompiled(std::function<void(const Executable&)> callback);

 private:
  friend class CompilePool;
  void Run();

  // Compiles (through the executable cache); dropped once run, with the module it holds.
  std::function<Executable()> compile_;
  std::shared_ptr<const std::string> text_;
  bool tier_up_ = false;  // an optimized compile of a program running quickly
  std::mutex mutex_;
  std::condition_variable compiled_;
  std::vector<std::function<void(const Executable&)>> callbacks_;
  Executable executable_;
  std::string error_;
  std::atomic<bool> done_{false};
  // The CPU op that first asked for it, while a profiler records (profiler/device_trace.h).
  uint64_t profiler_correlation_ = 0;
};

// Compiles `module` (`text` is its text) through the executable cache on a pool thread; a module
// already compiling returns the job under way, so one program is never compiled twice at once.
std::shared_ptr<CompileJob> CompileInBackground(stablehlo::Module module,
                                                std::shared_ptr<const std::string> text);
// The same for the optimized program of a module compiled at the quick tier
// (ExecutableCache::TierUp, exec/tiered_compilation.h), for `wanted_by`: once that is gone,
// the job ends without compiling, with no executable and no error.
std::shared_ptr<CompileJob> TierUpInBackground(std::weak_ptr<const void> wanted_by,
                                               std::shared_ptr<const std::string> text,
                                               uint64_t structural_hash);

// Whether plan-cache misses compile in the background: TORCH_TPU_COMPILE_THREADS=0 keeps them on
// the launching thread (as debug mode does).
bool CompilesInBackground();

// Test hook: while held, pool threads wait before starting a compile (at most a minute each), so
// a test can observe launches issued while their programs are still compiling.
void HoldCompiles(bool hold);
// Test hook: the next background compile (not a tier-up) fails with `message` instead of
// compiling, as a compiler error would.
void InjectCompileFailure(std::string message);

}  // namespace torch_tpu::exec

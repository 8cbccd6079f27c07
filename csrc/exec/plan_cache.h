// The one plan cache every executor shares: ProgramSignature -> plan (a built program and what it
// takes to run it). Eager launches, DeferAndFuse graphs and torch.compile graphs all find, build
// and insert their plans here, so they share one failure behaviour and one memory bound.
//
// Failures: a key is built by one thread at a time; a thread that misses while another builds
// it waits for that build. A build that throws is not cached: its exception reaches the builder
// and every waiter, and the next lookup builds again. A plan whose background compile fails is
// forgotten the same way (Forget), so the launches already holding it fail with the compile
// error and later ones compile again.
//
// Memory: plans that hold an executable are bounded, least recently used first, by the memory
// tier's entry bound (TORCH_TPU_CACHE_MEMORY_MAX_ENTRIES, docs/cache.md), lowered when the
// process's memory mappings near their limit (runtime/loaded_executable_cap.h). An executable stays
// loaded only while a cached plan, the memory tier or work in flight holds it; an evicted plan is
// built again at its next use (its executable then comes from the cache tiers or the compiler).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "exec/program_signature.h"
#include "runtime/metrics.h"

namespace torch_tpu::exec {

class PlanCache {
 public:
  static PlanCache& Get();

  struct Options {
    // Whether the plan holds an executable and so counts against the bound; plans that only
    // describe results (a deferred op's shapes) are small and stay.
    bool holds_executable = true;
    // Plans of one owner (a compiled graph) go when it does (ForgetOwner); 0: no owner.
    int64_t owner = 0;
  };

  // The cached plan for `key`, or null (never built, evicted, or being built).
  template <typename Plan>
  std::shared_ptr<const Plan> Find(const ProgramSignature& key) {
    return std::static_pointer_cast<const Plan>(FindAny(key));
  }

  // The plan for `key`: cached, built by another thread meanwhile, or built here by `build` and
  // cached. A null plan from `build` (the key cannot be built that way) is returned, not cached.
  // `*built` tells whether this call built it.
  template <typename Plan, typename Build>
  std::shared_ptr<const Plan> GetOrBuild(const ProgramSignature& key, Build&& build,
                                         Options options, bool* built = nullptr) {
    return std::static_pointer_cast<const Plan>(GetOrBuildAny(
        key, [&]() -> std::shared_ptr<const void> { return build(); }, options, built));
  }

  // Removes `plan` from the cache if it is still the one cached for `key` (its compile failed).
  void Forget(const ProgramSignature& key, const void* plan);
  // Removes every plan of `owner`.
  void ForgetOwner(int64_t owner);

 private:
  PlanCache();
  struct Entry;
  struct Build;
  using Key = ProgramSignature;
  std::shared_ptr<const void> FindAny(const Key& key);
  using BuildAny = std::function<std::shared_ptr<const void>()>;
  std::shared_ptr<const void> GetOrBuildAny(const Key& key, const BuildAny& build, Options options,
                                            bool* built);
  // Caches `plan`, keeping at most `bound` plans that hold executables; evicted plans are moved
  // to `released`, to be destroyed without the lock.
  void InsertLocked(const Key& key, std::shared_ptr<const void> plan, Options options,
                    size_t bound, std::vector<std::shared_ptr<const void>>& released);

  const size_t bound_;  // plans holding executables, as configured
  std::mutex mutex_;
  std::condition_variable built_;
  std::unordered_map<Key, Entry, ProgramSignatureHash> entries_;
  std::list<const Key*> lru_;  // keys of plans holding executables, most recently used first
  std::unordered_map<Key, std::shared_ptr<Build>, ProgramSignatureHash> building_;
};

// The lookup every executor makes under the launch lock (exec/launch_lock.h), which `lock` holds
// on entry and on return: `snapshot()` reads the storages and returns the key they give, `find`
// looks that key up; on a miss `build(key)` builds the plan (through PlanCache::GetOrBuild) with
// the lock released, and the storages are read again, since another thread may have written one
// of them meanwhile: when the key is still the same the plan just built is used. A plan found
// without building counts in metrics()["cache_hits_memory"].
template <typename Plan, typename Snapshot, typename Find, typename BuildFor>
std::shared_ptr<const Plan> FindOrBuildUnderLock(std::unique_lock<std::mutex>& lock,
                                                 Snapshot&& snapshot, Find&& find,
                                                 BuildFor&& build) {
  std::shared_ptr<const Plan> built;
  ProgramSignature built_for;
  for (;;) {
    const ProgramSignature& key = snapshot();
    if (built && key == built_for) return built;
    if (std::shared_ptr<const Plan> plan = find(key)) {
      if (!built) ++runtime::Metrics::Get().cache_hits_memory;
      return plan;
    }
    built_for = key;
    lock.unlock();
    built = build(built_for);
    lock.lock();
  }
}

}  // namespace torch_tpu::exec

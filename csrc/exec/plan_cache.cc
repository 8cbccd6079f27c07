#include "exec/plan_cache.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <utility>
#include <vector>

#include "runtime/loaded_executable_cap.h"

namespace torch_tpu::exec {
namespace {

// The memory tier's entry bound (cache/executable_cache.cc reads the same setting): at least one
// plan stays, the one about to run.
size_t BoundFromEnvironment() {
  constexpr size_t kDefault = 8192;
  const char* setting = std::getenv("TORCH_TPU_CACHE_MEMORY_MAX_ENTRIES");
  if (setting == nullptr || *setting == '\0') return kDefault;
  char* end = nullptr;
  const long long parsed = std::strtoll(setting, &end, 10);
  if (end == setting || *end != '\0' || parsed < 0) return kDefault;
  return std::max<size_t>(static_cast<size_t>(parsed), 1);
}

// How long a thread waits for another thread's build of the same key before building it itself.
// Builds never need a lock a waiter holds, but a lowering may call a Python meta kernel, and a
// waiter entered from Python code that kept the GIL would then wait for a build that waits for
// it: past this, duplicate work replaces a hang.
constexpr std::chrono::seconds kMaxWaitForOtherBuild{10};

}  // namespace

struct PlanCache::Entry {
  std::shared_ptr<const void> plan;
  Options options;
  std::list<const Key*>::iterator lru;  // valid when options.holds_executable
};

struct PlanCache::Build {
  bool done = false;
  std::shared_ptr<const void> plan;
  std::exception_ptr error;
};

PlanCache& PlanCache::Get() {
  static PlanCache* cache = new PlanCache();  // holds executables: never destroyed (runtime.cc)
  return *cache;
}

PlanCache::PlanCache() : bound_(BoundFromEnvironment()) {}

std::shared_ptr<const void> PlanCache::FindAny(const Key& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  Entry& entry = it->second;
  if (entry.options.holds_executable) lru_.splice(lru_.begin(), lru_, entry.lru);
  return entry.plan;
}

std::shared_ptr<const void> PlanCache::GetOrBuildAny(const Key& key, const BuildAny& build,
                                                     Options options, bool* built) {
  if (built != nullptr) *built = false;
  std::unique_lock<std::mutex> lock(mutex_);
  if (auto it = entries_.find(key); it != entries_.end()) {
    if (it->second.options.holds_executable) lru_.splice(lru_.begin(), lru_, it->second.lru);
    return it->second.plan;
  }
  if (auto it = building_.find(key); it != building_.end()) {
    const std::shared_ptr<Build> other = it->second;
    if (built_.wait_for(lock, kMaxWaitForOtherBuild, [&] { return other->done; })) {
      if (other->error) std::rethrow_exception(other->error);
      return other->plan;
    }
  }
  // This thread builds; a key another thread still builds (past the wait) is built twice and
  // cached by whichever ends first.
  std::shared_ptr<Build> mine;
  if (building_.count(key) == 0) {
    mine = std::make_shared<Build>();
    building_.emplace(key, mine);
  }
  lock.unlock();
  std::shared_ptr<const void> plan;
  std::exception_ptr error;
  try {
    plan = build();
  } catch (...) {
    error = std::current_exception();
  }
  std::vector<std::shared_ptr<const void>> released;
  // Outside the lock: it may read the process's memory mappings.
  const size_t bound = options.holds_executable && plan
                            ? std::min(bound_, runtime::LoadedExecutableCap())
                            : bound_;
  lock.lock();
  if (mine) {
    building_.erase(key);
    mine->done = true;
    mine->plan = plan;
    mine->error = error;
  }
  if (!error && plan) InsertLocked(key, plan, options, bound, released);
  lock.unlock();
  if (mine) built_.notify_all();
  released.clear();
  if (error) std::rethrow_exception(error);
  if (built != nullptr) *built = plan != nullptr;
  return plan;
}

void PlanCache::InsertLocked(const Key& key, std::shared_ptr<const void> plan, Options options,
                             size_t bound, std::vector<std::shared_ptr<const void>>& released) {
  auto [it, inserted] = entries_.try_emplace(key);
  if (!inserted) return;  // another thread cached one meanwhile; both are equivalent
  Entry& entry = it->second;
  entry.plan = std::move(plan);
  entry.options = options;
  if (!options.holds_executable) return;
  lru_.push_front(&it->first);
  entry.lru = lru_.begin();
  while (lru_.size() > bound) {
    auto evicted = entries_.find(*lru_.back());
    lru_.pop_back();
    released.push_back(std::move(evicted->second.plan));
    entries_.erase(evicted);
  }
}

void PlanCache::Forget(const Key& key, const void* plan) {
  std::shared_ptr<const void> released;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.plan.get() != plan) return;
  if (it->second.options.holds_executable) lru_.erase(it->second.lru);
  released = std::move(it->second.plan);
  entries_.erase(it);
}

void PlanCache::ForgetOwner(int64_t owner) {
  std::vector<std::shared_ptr<const void>> released;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.options.owner != owner) {
      ++it;
      continue;
    }
    if (it->second.options.holds_executable) lru_.erase(it->second.lru);
    released.push_back(std::move(it->second.plan));
    it = entries_.erase(it);
  }
}

}  // namespace torch_tpu::exec

// The compilation cache: StableHLO module -> loaded executable, in three tiers.
//   1. process memory: loaded executables, LRU-bounded by count and bytes;
//   2. host shared memory: serialized entries in a tmpfs directory all processes of the host
//      share, size-capped; a per-entry lock makes one process compile while the others wait;
//   3. persistent: TORCH_TPU_CACHE_DIR, a directory or an http:// GET/PUT object store.
// Keys hold everything that changes the executable (cache_entry.h); a hit compares the full key,
// never a hash alone. A damaged or foreign entry is counted, logged once and compiled over; an
// unreachable store is dropped for the rest of the process with one warning.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "cache/cache_entry.h"
#include "cache/entry_store.h"
#include "pjrt/executable.h"
#include "stablehlo/module.h"

namespace torch_tpu::cache {

enum class Tier { kMemory, kShared, kRemote };

struct TierInfo {
  std::optional<int64_t> entries;
  std::optional<int64_t> bytes;
  std::string location;  // empty for memory; empty when the tier is off
  bool enabled = false;
};

class ExecutableCache {
 public:
  static ExecutableCache& Get();

  // Returns the executable for `module`, loading or compiling it on a miss. Compile errors throw
  // with the module text dumped to a file (path in the message).
  std::shared_ptr<pjrt::PjrtLoadedExecutable> GetOrCompile(const stablehlo::Module& module);
  // The same, for a caller that already holds `module.ToText()` (emitting it costs a walk).
  std::shared_ptr<pjrt::PjrtLoadedExecutable> GetOrCompile(const stablehlo::Module& module,
                                                           const std::string& text);

  // The first step of GetOrCompile alone: the executable when the memory tier holds it (counted
  // as a hit), else null. Cheap enough for the launching thread (exec/compile_pool.h); throws
  // for malformed cache settings, as GetOrCompile does.
  std::shared_ptr<pjrt::PjrtLoadedExecutable> FindLoaded(const std::string& text);

  // Empties one tier; throws std::runtime_error when the tier's store refuses.
  void Clear(Tier tier);
  TierInfo Info(Tier tier);
  size_t size() const;

 private:
  struct MemoryEntry {
    std::string text;
    std::shared_ptr<pjrt::PjrtLoadedExecutable> executable;
    int64_t bytes;
  };
  struct Config {
    size_t memory_max_entries;
    int64_t memory_max_bytes;
    // Stores stay allocated for the process; a store found unusable is switched off instead.
    std::unique_ptr<DirectoryStore> shared;
    std::unique_ptr<EntryStore> remote;
    std::atomic<bool> shared_on{false};
    std::atomic<bool> remote_on{false};
    std::string remote_error;  // the remote setting cannot be used at all (e.g. https://)
    std::string identity;      // the runtime's part of every key
  };

  Config& config();
  std::shared_ptr<pjrt::PjrtLoadedExecutable> FindInMemory(const std::string& text);
  void InsertInMemory(const std::string& text,
                      const std::shared_ptr<pjrt::PjrtLoadedExecutable>& executable, int64_t bytes);
  // Loads a valid entry for `key` from `store` (its bytes in `entry_bytes`); nullptr on a miss, a
  // bad entry (counted, logged, and left to be overwritten) or an unavailable store (`store` then
  // dropped, with a warning).
  // `read_mutex`, when given, is held while reading the store only, not while loading.
  std::shared_ptr<pjrt::PjrtLoadedExecutable> LoadFrom(EntryStore& store, std::atomic<bool>& on,
                                                       const CacheKey& key, int64_t& bytes,
                                                       std::string& entry_bytes,
                                                       bool& bad_entry_counted,
                                                       std::mutex* read_mutex = nullptr);
  void StoreIn(EntryStore& store, std::atomic<bool>& on, const std::string& digest,
               const std::string& entry);
  std::shared_ptr<pjrt::PjrtLoadedExecutable> Compile(const stablehlo::Module& module,
                                                      const std::string& text);

  mutable std::mutex mutex_;  // guards the memory tier and the stores' presence
  std::once_flag config_once_;
  std::unique_ptr<Config> config_;
  std::list<MemoryEntry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<MemoryEntry>::iterator> by_text_;
  int64_t memory_bytes_ = 0;
};

}  // namespace torch_tpu::cache

namespace torch_tpu::exec {
// The launch path predates the cache's own folder and names it from here.
using cache::ExecutableCache;
}  // namespace torch_tpu::exec

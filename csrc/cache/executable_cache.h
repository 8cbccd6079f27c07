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
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cache/cache_entry.h"
#include "cache/entry_store.h"
#include "pjrt/executable.h"
#include "runtime/runtime.h"
#include "stablehlo/module.h"

namespace torch_tpu::cache {

enum class Tier { kMemory, kShared, kRemote };
using runtime::CompileTier;

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
  // The compile tier is part of every key. A quick request (exec/tiered_compilation.h) is
  // served the optimized program whenever a tier holds it; `served` says which one it got.
  std::shared_ptr<pjrt::PjrtLoadedExecutable> GetOrCompile(
      const stablehlo::Module& module, const std::string& text,
      CompileTier tier = CompileTier::kOptimized, CompileTier* served = nullptr);
  // The optimized program of a module whose quick program runs already: compiled unless a tier
  // holds it, counted in metrics' tier_up_compiles rather than as a compile or a miss. The quick
  // program's memory-tier entry is dropped.
  std::shared_ptr<pjrt::PjrtLoadedExecutable> TierUp(const std::string& text,
                                                     uint64_t structural_hash);

  // How long no compile but a tier-up has been under way in this process (zero while one is).
  static std::chrono::nanoseconds SinceLastCompile();

  // The first step of GetOrCompile alone: the executable when the memory tier holds it (counted
  // as a hit), else null. Cheap enough for the launching thread (exec/compile_pool.h); throws
  // for malformed cache settings, as GetOrCompile does.
  std::shared_ptr<pjrt::PjrtLoadedExecutable> FindLoaded(
      const std::string& text, CompileTier tier = CompileTier::kOptimized,
      CompileTier* served = nullptr);

  // Warm-start preloading (cache/preload.h). Loads the shared or persistent tier's entry named
  // `digest` into the memory tier ahead of its first use; returns whether it did. Anything amiss
  // (missing, damaged, another runtime's, already loaded or being asked for) is left to the
  // demand path, which reports problems: a preload only ever saves time.
  bool Preload(const std::string& digest);
  // The digests of the programs this process asked for, in first-use order (at most
  // kMaxRecordedPrograms).
  std::vector<std::string> ProgramsUsed();
  // Opens the tiers from the settings in the environment now, at import, for the preloader; the
  // first op uses them too unless the script changed the settings in between. False when the
  // cache is in use already or the settings are malformed (then there is nothing to preload).
  bool OpenForPreloading();
  // A manifest (a list of digests) stored under `name` in the shared, else the persistent tier
  // opened for preloading; empty when there is none or it cannot be read. Needs no runtime.
  std::vector<std::string> ReadManifest(const std::string& name);
  // Stores `digests` as the manifest `name` in every tier that is on.
  void WriteManifest(const std::string& name, const std::vector<std::string>& digests);
  static constexpr size_t kMaxRecordedPrograms = 1024;

  // Empties one tier; throws std::runtime_error when the tier's store refuses.
  void Clear(Tier tier);
  TierInfo Info(Tier tier);
  size_t size() const;

 private:
  struct MemoryEntry {
    std::string text;
    CompileTier tier;
    std::shared_ptr<pjrt::PjrtLoadedExecutable> executable;
    int64_t bytes;
    std::string digest;
    // A preloaded entry counts as a hit of the tier it came from at its first use, as it would
    // have without preloading; later uses are memory hits.
    std::optional<Tier> preloaded_from;
  };
  struct Config {
    std::string settings;  // the environment variables it was opened from
    size_t memory_max_entries;
    int64_t memory_max_bytes;
    // Stores stay allocated for the process; a store found unusable is switched off instead.
    std::unique_ptr<DirectoryStore> shared;
    std::unique_ptr<EntryStore> remote;
    std::atomic<bool> shared_on{false};
    std::atomic<bool> remote_on{false};
    std::string remote_error;  // the remote setting cannot be used at all (e.g. https://)
    EntrySigner signer;        // TORCH_TPU_CACHE_KEY: entries written signed, read only signed
    // A read before Prepare found the remote store unreachable (and warned).
    bool remote_unavailable = false;  // guarded by remote_read_mutex_
    std::once_flag prepared;
  };

  // The settings from the environment, with the stores not yet touched.
  static std::shared_ptr<Config> OpenConfig();
  // Creates the stores' directories and switches on those that work; once per config.
  void Prepare(Config& config);
  // The stores, prepared; they need no runtime.
  Config& config();
  // The runtime's part of every key (its compile options are the tier's); starts the runtime.
  const std::string& identity(CompileTier tier = CompileTier::kOptimized);
  static size_t TierIndex(CompileTier tier) { return tier == CompileTier::kQuick ? 1 : 0; }
  // Counts the hit (see MemoryEntry::preloaded_from), whose tier goes to `served_from`.
  std::shared_ptr<pjrt::PjrtLoadedExecutable> FindInMemory(const std::string& text,
                                                           CompileTier compile_tier,
                                                           Tier* served_from = nullptr);
  void InsertInMemory(const std::string& text, CompileTier compile_tier,
                      const std::shared_ptr<pjrt::PjrtLoadedExecutable>& executable, int64_t bytes,
                      const std::string& digest, std::optional<Tier> preloaded_from = {});
  // GetOrCompile after the memory tier missed: the shared tier, then (one process of the host at
  // a time) the persistent tier, then the compiler; what it compiles is stored in every tier.
  // `tier_up`: counted as TierUp's.
  std::shared_ptr<pjrt::PjrtLoadedExecutable> Obtain(const std::string& text,
                                                     uint64_t structural_hash,
                                                     CompileTier compile_tier, bool tier_up);
  // The shared, else the persistent tier's entry for the module at `tier`, loaded into memory;
  // null when neither holds one (nothing is compiled).
  std::shared_ptr<pjrt::PjrtLoadedExecutable> LoadStored(const std::string& text,
                                                         uint64_t structural_hash,
                                                         CompileTier tier);
  // Records the first use of `digest`; callers hold mutex_.
  void RecordUse(const std::string& digest);
  // Reads `digest` from `store`; an unavailable store is switched off (`on`) with a warning.
  // `read_mutex`, when given, is held while reading.
  StoreResult ReadFrom(EntryStore& store, std::atomic<bool>& on, const std::string& digest,
                       StoredKind kind, std::mutex* read_mutex = nullptr);
  // Counts (cache_rejected_entries[reason]) and reports once what `store` holds for `digest`
  // that was refused: not a plain entry, too large, unsigned or signed with another key.
  static void ReportRejected(const EntryStore& store, const std::string& digest,
                             const std::string& reason, const std::string& problem);
  // Loads a valid entry for `key` from `store` (its bytes in `entry_bytes`); nullptr on a miss, a
  // bad entry (counted, logged, and left to be overwritten) or an unavailable store (`store` then
  // dropped, with a warning).
  // `read_mutex`, when given, is held while reading the store only, not while loading.
  std::shared_ptr<pjrt::PjrtLoadedExecutable> LoadFrom(EntryStore& store, std::atomic<bool>& on,
                                                       const CacheKey& key, int64_t& bytes,
                                                       std::string& entry_bytes,
                                                       bool& bad_entry_counted,
                                                       std::mutex* read_mutex = nullptr);
  // Writes `entry`; false when the store is off or refused it (then switched off, with a warning).
  bool StoreIn(EntryStore& store, std::atomic<bool>& on, const std::string& digest,
               const std::string& entry);
  // A program found in the shared tier is written to the persistent tier too, once per host
  // (a marker beside the shared entry remembers it), so a host whose /dev/shm is warm still fills
  // the store other machines start from.
  void PersistSharedHit(Config& settings, const std::string& digest, const std::string& entry);
  // Names the persistent store in those markers.
  static std::string RemoteTag(const Config& settings);
  std::shared_ptr<pjrt::PjrtLoadedExecutable> Compile(const std::string& text,
                                                      uint64_t structural_hash, CompileTier tier,
                                                      bool tier_up);

  mutable std::mutex mutex_;  // guards the memory tier and the stores' presence
  // One remote read at a time across threads: a store that is slow or gone then costs one
  // timeout, after which the waiting reads see it switched off. Only the read is serialized;
  // loading what it read runs in parallel.
  std::mutex remote_read_mutex_;
  std::once_flag config_once_;
  std::shared_ptr<Config> config_;          // set once, under mutex_
  std::shared_ptr<Config> preload_config_;  // set at import, before config_, under mutex_
  std::once_flag identity_once_[2];  // by TierIndex
  std::string identities_[2];
  std::list<MemoryEntry> lru_;  // most recently used first
  // By TierIndex, then module text.
  std::unordered_map<std::string, std::list<MemoryEntry>::iterator> by_text_[2];
  int64_t memory_bytes_ = 0;
  std::vector<std::string> used_in_order_;
  std::unordered_set<std::string> used_;
  // Preloads under way: a demand for one of them waits for it instead of loading it twice.
  std::unordered_set<std::string> preloading_;
  std::condition_variable preloaded_;
};

}  // namespace torch_tpu::cache

namespace torch_tpu::exec {
// The launch path predates the cache's own folder and names it from here.
using cache::ExecutableCache;
}  // namespace torch_tpu::exec

#include "cache/executable_cache.h"

#include <c10/util/Exception.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "pjrt/error.h"
#include "runtime/metrics.h"
#include "runtime/runtime.h"

namespace torch_tpu::cache {
namespace {

using runtime::Metrics;

constexpr size_t kDefaultMemoryMaxEntries = 8192;
constexpr int64_t kDefaultMemoryMaxBytes = int64_t{2} << 30;
constexpr int64_t kDefaultSharedMaxBytes = int64_t{1} << 30;
constexpr double kDefaultRemoteTimeoutSeconds = 5.0;

std::string HexHash(uint64_t hash) {
  std::ostringstream out;
  out << std::hex << hash;
  return out.str();
}

// Writes `text` to `directory`/module_<hash>.mlir; returns the path or "" when it cannot.
std::string DumpModule(const std::string& directory, uint64_t hash, const std::string& text) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  const std::string path = directory + "/module_" + HexHash(hash) + ".mlir";
  std::ofstream out(path);
  if (!out) return "";
  out << text;
  return path;
}

std::string Environment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

// A non-negative number from the environment, or `fallback` when unset. A malformed value is an
// error naming the variable: silently ignoring a cache limit would surprise later.
template <typename Number>
Number NumberFromEnvironment(const char* name, Number fallback) {
  const std::string text = Environment(name);
  if (text.empty()) return fallback;
  try {
    size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == text.size() && value >= 0) return static_cast<Number>(value);
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(std::string(name) + "=" + text + ": expected a non-negative number");
}

// Warnings and problem reports go through PyTorch's warning channel (Python warnings when Python
// is calling), at most once per kind of problem per process.
void WarnOnce(const std::string& kind, const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!warned.insert(kind).second) return;
  }
  TORCH_WARN("torch_tpu compilation cache: ", message);
}

std::string RuntimeIdentity(const runtime::Runtime& device_runtime) {
  const pjrt::PjrtPlugin& plugin = device_runtime.plugin();
  std::ostringstream identity;
  identity << "platform=" << device_runtime.client().platform_name() << "\n";
  identity << "platform_version=" << device_runtime.client().platform_version() << "\n";
  identity << "pjrt_api=" << plugin.api_major_version() << "." << plugin.api_minor_version()
           << "\n";
  identity << "plugin=" << plugin.path() << "\n";
  std::error_code error;
  identity << "plugin_bytes=" << std::filesystem::file_size(plugin.path(), error) << "\n";
  for (const auto& [name, value] : plugin.Attributes()) {
    identity << "plugin_attribute." << name << "=" << value << "\n";
  }
  identity << "devices=" << device_runtime.device_count() << "\n";
  for (size_t i = 0; i < device_runtime.device_count(); ++i) {
    identity << "device_kind=" << device_runtime.device(i).kind << "\n";
  }
  // Plugins read compiler flags from the environment when they compile: programs built under
  // other flags are other executables (fast-math, ISA limits, ...).
  for (const char* variable : {"XLA_FLAGS", "LIBTPU_INIT_ARGS"}) {
    const char* value = std::getenv(variable);
    identity << "env." << variable << "=" << (value ? value : "") << "\n";
  }
  identity << "compile_options=";
  for (unsigned char byte : device_runtime.compile_options()) {
    static constexpr char kDigits[] = "0123456789abcdef";
    identity << kDigits[byte >> 4] << kDigits[byte & 15];
  }
  identity << "\n";
  return identity.str();
}

std::string DefaultSharedDirectory() {
  const std::string name = "torch_tpu-" + std::to_string(::getuid());
  std::error_code error;
  if (std::filesystem::is_directory("/dev/shm", error)) return "/dev/shm/" + name;
  return std::filesystem::temp_directory_path(error).string() + "/" + name;
}

const char* EntryStatusName(EntryStatus status) {
  switch (status) {
    case EntryStatus::kTruncated:
      return "truncated";
    case EntryStatus::kForeign:
      return "foreign";
    case EntryStatus::kKeyMismatch:
      return "key-mismatch";
    case EntryStatus::kCorrupt:
    case EntryStatus::kValid:
      break;
  }
  return "corrupt";
}

}  // namespace

ExecutableCache& ExecutableCache::Get() {
  static ExecutableCache cache;
  return cache;
}

ExecutableCache::Config& ExecutableCache::config() {
  std::call_once(config_once_, [this] {
    auto config = std::make_unique<Config>();
    config->memory_max_entries = NumberFromEnvironment<size_t>("TORCH_TPU_CACHE_MEMORY_MAX_ENTRIES",
                                                               kDefaultMemoryMaxEntries);
    config->memory_max_bytes =
        NumberFromEnvironment<int64_t>("TORCH_TPU_CACHE_MEMORY_MAX_BYTES", kDefaultMemoryMaxBytes);
    config->identity = RuntimeIdentity(runtime::Runtime::Get());

    const int64_t shared_max_bytes =
        NumberFromEnvironment<int64_t>("TORCH_TPU_SHARED_CACHE_MAX_BYTES", kDefaultSharedMaxBytes);
    std::string shared_directory = Environment("TORCH_TPU_SHARED_CACHE_DIR");
    if (shared_directory.empty()) shared_directory = DefaultSharedDirectory();
    if (shared_max_bytes > 0) {
      config->shared = std::make_unique<DirectoryStore>(shared_directory, shared_max_bytes,
                                                        /*private_to_user=*/true);
      if (const std::string error = config->shared->Prepare(); error.empty()) {
        config->shared_on = true;
      } else {
        WarnOnce("shared-unavailable", "host shared tier off: " + error);
      }
    }

    const std::string remote = Environment("TORCH_TPU_CACHE_DIR");
    const double timeout =
        NumberFromEnvironment<double>("TORCH_TPU_CACHE_TIMEOUT", kDefaultRemoteTimeoutSeconds);
    if (remote.rfind("http://", 0) == 0 || remote.rfind("https://", 0) == 0) {
      try {
        config->remote = std::make_unique<HttpStore>(remote, timeout);
        config->remote_on = true;
      } catch (const std::invalid_argument& error) {
        config->remote_error = error.what();
      }
    } else if (!remote.empty()) {
      auto directory = std::make_unique<DirectoryStore>(remote, 0, /*private_to_user=*/false);
      if (const std::string error = directory->Prepare(); error.empty()) {
        config->remote_on = true;
      } else {
        WarnOnce("remote-unavailable", "persistent tier off: " + error);
      }
      config->remote = std::move(directory);
    }
    config_ = std::move(config);
  });
  if (!config_->remote_error.empty()) throw std::runtime_error(config_->remote_error);
  return *config_;
}

std::shared_ptr<pjrt::PjrtLoadedExecutable> ExecutableCache::FindInMemory(const std::string& text) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = by_text_.find(text);
  if (it == by_text_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->executable;
}

void ExecutableCache::InsertInMemory(const std::string& text,
                                     const std::shared_ptr<pjrt::PjrtLoadedExecutable>& executable,
                                     int64_t bytes) {
  const Config& settings = *config_;
  std::lock_guard<std::mutex> lock(mutex_);
  if (by_text_.count(text) != 0) return;  // another thread got here first
  lru_.push_front({text, executable, bytes});
  by_text_.emplace(text, lru_.begin());
  memory_bytes_ += bytes;
  // The newest entry always stays, even alone over the byte limit: it is about to run.
  while (lru_.size() > 1 &&
         (lru_.size() > settings.memory_max_entries || memory_bytes_ > settings.memory_max_bytes)) {
    memory_bytes_ -= lru_.back().bytes;
    by_text_.erase(lru_.back().text);
    lru_.pop_back();  // programs still holding the executable keep it alive
  }
  if (settings.memory_max_entries == 0) {
    lru_.clear();
    by_text_.clear();
    memory_bytes_ = 0;
  }
}

std::shared_ptr<pjrt::PjrtLoadedExecutable> ExecutableCache::LoadFrom(
    EntryStore& store, std::atomic<bool>& on, const CacheKey& key, int64_t& bytes,
    std::string& entry_bytes, bool& bad_entry_counted, std::mutex* read_mutex) {
  std::unique_lock<std::mutex> reading;
  if (read_mutex) reading = std::unique_lock<std::mutex>(*read_mutex);
  if (!on) return nullptr;
  StoreResult read = store.Read(key.digest);
  // Switched off before the next waiting reader looks.
  if (read.status == StoreResult::kUnavailable) on = false;
  if (reading) reading.unlock();
  if (read.status == StoreResult::kMissing) return nullptr;
  if (read.status == StoreResult::kUnavailable) {
    WarnOnce("unavailable:" + store.location(),
             store.location() + " is unavailable (" + read.bytes +
                 "); continuing without it for the rest of this process");
    return nullptr;
  }
  DecodedEntry entry = DecodeEntry(read.bytes, key);
  std::string problem = entry.problem;
  std::shared_ptr<pjrt::PjrtLoadedExecutable> executable;
  if (entry.status == EntryStatus::kValid) {
    try {
      executable = runtime::Runtime::Get().client().DeserializeAndLoad(entry.payload);
      bytes = static_cast<int64_t>(entry.payload.size());
      entry_bytes = std::move(read.bytes);
      return executable;
    } catch (const std::exception& error) {
      problem = std::string("the plugin cannot load it: ") + error.what();
    }
  }
  // Read again under the compile lock, the same bad entry counts once.
  if (bad_entry_counted) return nullptr;
  bad_entry_counted = true;
  ++runtime::Metrics::Get().cache_corrupt_entries;
  WarnOnce("bad-entry", "ignoring unusable entry " + key.digest + " in " + store.location() + " (" +
                            EntryStatusName(entry.status) + ": " + problem +
                            "); compiling the program again (further bad entries are counted in "
                            "cache_corrupt_entries without a message)");
  return nullptr;
}

void ExecutableCache::StoreIn(EntryStore& store, std::atomic<bool>& on, const std::string& digest,
                              const std::string& entry) {
  if (!on) return;
  if (const std::string error = store.Write(digest, entry); !error.empty()) {
    on = false;
    WarnOnce("unavailable:" + store.location(),
             store.location() + " cannot store entries (" + error +
                 "); continuing without it for the rest of this process");
  }
}

std::shared_ptr<pjrt::PjrtLoadedExecutable> ExecutableCache::Compile(
    const stablehlo::Module& module, const std::string& text) {
  Metrics& metrics = runtime::Metrics::Get();
  const uint64_t hash = module.StructuralHash();
  if (const char* dump_dir = std::getenv("TORCH_TPU_DUMP_DIR"); dump_dir && *dump_dir) {
    DumpModule(dump_dir, hash, text);
  }
  const runtime::Runtime& device_runtime = runtime::Runtime::Get();
  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<pjrt::PjrtLoadedExecutable> executable;
  try {
    executable = device_runtime.client().Compile(text, device_runtime.compile_options());
  } catch (const pjrt::PjrtError& error) {
    const std::string path = DumpModule(std::filesystem::temp_directory_path().string() +
                                            "/torch_tpu_failed_" + std::to_string(::getpid()),
                                        hash, text);
    throw std::runtime_error(std::string(error.what()) + "\n(module dumped to " +
                             (path.empty() ? std::string("<unwritable>") : path) + ")");
  }
  metrics.compile_nanoseconds +=
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  ++metrics.compile_count;
  return executable;
}

std::shared_ptr<pjrt::PjrtLoadedExecutable> ExecutableCache::GetOrCompile(
    const stablehlo::Module& module) {
  return GetOrCompile(module, module.ToText());
}

std::shared_ptr<pjrt::PjrtLoadedExecutable> ExecutableCache::FindLoaded(const std::string& text) {
  config();  // a malformed setting is refused here, on the launching thread, at the first op
  std::shared_ptr<pjrt::PjrtLoadedExecutable> executable = FindInMemory(text);
  if (executable) ++runtime::Metrics::Get().cache_hits_memory;
  return executable;
}

std::shared_ptr<pjrt::PjrtLoadedExecutable> ExecutableCache::GetOrCompile(
    const stablehlo::Module& module, const std::string& text) {
  Metrics& metrics = runtime::Metrics::Get();
  std::shared_ptr<pjrt::PjrtLoadedExecutable> executable = FindLoaded(text);
  if (executable) return executable;
  Config& settings = config();
  const CacheKey key = MakeCacheKey(settings.identity, text, module.StructuralHash());
  int64_t bytes = 0;
  std::string entry_bytes;
  bool bad_shared_entry = false;
  bool bad_remote_entry = false;
  if (settings.shared && (executable = LoadFrom(*settings.shared, settings.shared_on, key, bytes,
                                                entry_bytes, bad_shared_entry))) {
    ++metrics.cache_hits_shared;
    InsertInMemory(text, executable, bytes);
    return executable;
  }
  // One process of the host compiles (or fetches) while the others wait, then they all load.
  std::optional<DirectoryStore::Lock> lock;
  if (settings.shared_on) {
    lock.emplace(settings.shared->LockEntry(key.digest));
    if ((executable = LoadFrom(*settings.shared, settings.shared_on, key, bytes, entry_bytes,
                               bad_shared_entry))) {
      ++metrics.cache_hits_shared;
      InsertInMemory(text, executable, bytes);
      return executable;
    }
  }
  if (settings.remote) {
    // One remote read at a time across the compile threads: a store that is slow or gone then
    // costs one timeout, after which the waiting reads see it switched off. Only the read is
    // serialized; loading what it read runs in parallel.
    static std::mutex remote_read_mutex;
    executable = LoadFrom(*settings.remote, settings.remote_on, key, bytes, entry_bytes,
                          bad_remote_entry, &remote_read_mutex);
    if (executable) {
      ++metrics.cache_hits_remote;
      // The other processes of this host then find it without asking the remote store.
      if (settings.shared) StoreIn(*settings.shared, settings.shared_on, key.digest, entry_bytes);
      InsertInMemory(text, executable, bytes);
      return executable;
    }
  }
  ++metrics.cache_misses;
  executable = Compile(module, text);
  bytes = static_cast<int64_t>(text.size());
  if (settings.shared_on || settings.remote_on) {
    std::string payload;
    try {
      payload = executable->Serialize();
    } catch (const std::exception& error) {
      WarnOnce("serialize", std::string("the plugin cannot serialize executables (") +
                                error.what() + "); only the in-memory tier is used");
    }
    if (!payload.empty()) {
      bytes = static_cast<int64_t>(payload.size());
      const std::string entry = EncodeEntry(key, payload);
      if (settings.shared) StoreIn(*settings.shared, settings.shared_on, key.digest, entry);
      if (settings.remote) StoreIn(*settings.remote, settings.remote_on, key.digest, entry);
    }
  }
  InsertInMemory(text, executable, bytes);
  return executable;
}

void ExecutableCache::Clear(Tier tier) {
  if (tier == Tier::kMemory) {
    std::lock_guard<std::mutex> lock(mutex_);
    lru_.clear();
    by_text_.clear();
    memory_bytes_ = 0;
    return;
  }
  Config& settings = config();
  EntryStore* store = tier == Tier::kShared ? static_cast<EntryStore*>(settings.shared.get())
                                            : settings.remote.get();
  if (store == nullptr) return;
  if (const std::string error = store->Clear(); !error.empty()) {
    throw std::runtime_error("clear_cache: " + error);
  }
}

TierInfo ExecutableCache::Info(Tier tier) {
  TierInfo info;
  if (tier == Tier::kMemory) {
    std::lock_guard<std::mutex> lock(mutex_);
    info.entries = static_cast<int64_t>(lru_.size());
    info.bytes = memory_bytes_;
    info.enabled = true;
    return info;
  }
  Config& settings = config();
  EntryStore* store = tier == Tier::kShared ? static_cast<EntryStore*>(settings.shared.get())
                                            : settings.remote.get();
  if (store == nullptr) return info;
  info.enabled = tier == Tier::kShared ? settings.shared_on.load() : settings.remote_on.load();
  info.location = store->location();
  const StoreStats stats = store->Stats();
  info.entries = stats.entries;
  info.bytes = stats.bytes;
  return info;
}

size_t ExecutableCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lru_.size();
}

}  // namespace torch_tpu::cache

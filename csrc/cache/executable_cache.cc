#include "cache/executable_cache.h"

#include <c10/util/Exception.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "pjrt/error.h"
#include "profiler/device_trace.h"
#include "runtime/fault_injection.h"
#include "runtime/loaded_executable_cap.h"
#include "runtime/metrics.h"
#include "runtime/runtime.h"

namespace torch_tpu::cache {
namespace {

using runtime::Metrics;

constexpr size_t kDefaultMemoryMaxEntries = 8192;
constexpr int64_t kDefaultMemoryMaxBytes = int64_t{2} << 30;
constexpr int64_t kDefaultSharedMaxBytes = int64_t{1} << 30;
constexpr double kDefaultRemoteTimeoutSeconds = 5.0;

// Compiles other than tier-ups: under way, and when the last one ended (steady-clock ns).
std::atomic<int> compiles_under_way{0};
std::atomic<int64_t> last_compile_end_ns{0};

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

// Once per store: it is dropped for the rest of the process.
void WarnUnavailable(const EntryStore& store, const std::string& error) {
  WarnOnce("unavailable:" + store.location(),
           store.location() + " is unavailable (" + error +
               "); continuing without it for the rest of this process");
}

std::string RuntimeIdentity(const runtime::Runtime& device_runtime, CompileTier tier) {
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
  // Entries are shared between users and machines: the key holds a digest of each value, never
  // the value (flags may carry paths or tokens).
  for (const char* variable : {"XLA_FLAGS", "LIBTPU_INIT_ARGS"}) {
    const char* value = std::getenv(variable);
    identity << "env." << variable << ".sha256=" << (value ? Sha256Hex(value) : "") << "\n";
  }
  identity << "compile_options=";
  for (unsigned char byte : device_runtime.compile_options(tier)) {
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
    case EntryStatus::kUnsigned:
      return "unsigned";
    case EntryStatus::kBadSignature:
      return "bad_signature";
    case EntryStatus::kCorrupt:
    case EntryStatus::kValid:
      break;
  }
  return "corrupt";
}

}  // namespace

ExecutableCache& ExecutableCache::Get() {
  // Holds executables: never destroyed (runtime.cc says why).
  static ExecutableCache* cache = new ExecutableCache();
  return *cache;
}

// Settings whose values are secrets: kept in memory as digests only.
bool IsSecretSetting(const std::string& name) {
  return name == "TORCH_TPU_CACHE_KEY" || name == "TORCH_TPU_CACHE_AUTHORIZATION" ||
         name == "TORCH_TPU_CACHE_DIR";  // a URL may carry credentials
}

std::string CacheSettings() {
  std::string settings;
  for (const char* name :
       {"TORCH_TPU_CACHE_MEMORY_MAX_ENTRIES", "TORCH_TPU_CACHE_MEMORY_MAX_BYTES",
        "TORCH_TPU_SHARED_CACHE_MAX_BYTES", "TORCH_TPU_SHARED_CACHE_DIR", "TORCH_TPU_CACHE_DIR",
        "TORCH_TPU_CACHE_TIMEOUT", "TORCH_TPU_CACHE_MAX_ENTRY_BYTES", "TORCH_TPU_CACHE_KEY",
        "TORCH_TPU_CACHE_KEY_FILE", "TORCH_TPU_CACHE_AUTHORIZATION",
        "TORCH_TPU_CACHE_AUTHORIZATION_FILE"}) {
    const std::string value = Environment(name);
    settings += std::string(name) + "=" + (IsSecretSetting(name) ? Sha256Hex(value) : value) + "\n";
  }
  return settings;
}

// A secret given in `variable` or, read from a file, in `file_variable` ("" when neither is set).
// A file that cannot be used is an error naming the setting: the user asked for the secret, and
// going on without it would silently drop the protection. Values are never part of a message.
std::string SecretFromEnvironment(const char* variable, const char* file_variable) {
  constexpr size_t kMaxSecretBytes = 64 * 1024;
  const std::string value = Environment(variable);
  const std::string path = Environment(file_variable);
  if (!value.empty() && !path.empty()) {
    throw std::invalid_argument(std::string("set ") + variable + " or " + file_variable +
                                ", not both");
  }
  if (path.empty()) return value;
  // Links are followed: secrets mounted by Kubernetes are links into a versioned directory.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  std::string secret;
  struct stat info{};
  bool usable = fd >= 0 && ::fstat(fd, &info) == 0 && S_ISREG(info.st_mode) &&
                static_cast<size_t>(info.st_size) <= kMaxSecretBytes;
  if (usable) {
    secret.resize(static_cast<size_t>(info.st_size));
    usable = ::read(fd, secret.data(), secret.size()) == static_cast<ssize_t>(secret.size());
  }
  if (fd >= 0) ::close(fd);
  while (!secret.empty() && std::isspace(static_cast<unsigned char>(secret.back()))) {
    secret.pop_back();
  }
  if (!usable || secret.empty()) {
    throw std::invalid_argument(std::string(file_variable) + "=" + path +
                                ": expected a readable regular file of at most 64 KiB holding "
                                "the secret");
  }
  return secret;
}

void CountRejected(const std::string& reason) {
  runtime::Metrics::Get().RecordReason("cache_rejected_entries", reason);
}

// Store reads and writes go through here, where tests can make them fail as an unreachable store
// would (torch_tpu.testing.inject_failure).
StoreResult ReadStore(EntryStore& store, const std::string& digest, StoredKind kind) {
  if (runtime::ShouldInjectFailure(runtime::FaultSite::kStoreRead)) {
    return {StoreResult::kUnavailable, runtime::InjectedFailureMessage(
                                           runtime::FaultSite::kStoreRead)};
  }
  return store.Read(digest, kind);
}

std::string WriteStore(EntryStore& store, const std::string& digest, const std::string& bytes,
                       StoredKind kind) {
  if (runtime::ShouldInjectFailure(runtime::FaultSite::kStoreWrite)) {
    return runtime::InjectedFailureMessage(runtime::FaultSite::kStoreWrite);
  }
  return store.Write(digest, bytes, kind);
}

std::shared_ptr<ExecutableCache::Config> ExecutableCache::OpenConfig() {
  auto config = std::make_shared<Config>();
  config->settings = CacheSettings();
  config->memory_max_entries = NumberFromEnvironment<size_t>("TORCH_TPU_CACHE_MEMORY_MAX_ENTRIES",
                                                             kDefaultMemoryMaxEntries);
  config->memory_max_bytes =
      NumberFromEnvironment<int64_t>("TORCH_TPU_CACHE_MEMORY_MAX_BYTES", kDefaultMemoryMaxBytes);
  const int64_t shared_max_bytes =
      NumberFromEnvironment<int64_t>("TORCH_TPU_SHARED_CACHE_MAX_BYTES", kDefaultSharedMaxBytes);
  const int64_t max_entry_bytes =
      NumberFromEnvironment<int64_t>("TORCH_TPU_CACHE_MAX_ENTRY_BYTES", kDefaultMaxEntryBytes);
  config->signer = EntrySigner(SecretFromEnvironment("TORCH_TPU_CACHE_KEY",
                                                     "TORCH_TPU_CACHE_KEY_FILE"));
  const std::string authorization = SecretFromEnvironment("TORCH_TPU_CACHE_AUTHORIZATION",
                                                          "TORCH_TPU_CACHE_AUTHORIZATION_FILE");
  std::string shared_directory = Environment("TORCH_TPU_SHARED_CACHE_DIR");
  if (shared_directory.empty()) shared_directory = DefaultSharedDirectory();
  if (shared_max_bytes > 0) {
    config->shared = std::make_unique<DirectoryStore>(shared_directory, shared_max_bytes,
                                                      /*private_to_user=*/true, max_entry_bytes);
  }
  const std::string remote = Environment("TORCH_TPU_CACHE_DIR");
  const double timeout =
      NumberFromEnvironment<double>("TORCH_TPU_CACHE_TIMEOUT", kDefaultRemoteTimeoutSeconds);
  if (remote.rfind("http://", 0) == 0 || remote.rfind("https://", 0) == 0) {
    try {
      config->remote = std::make_unique<HttpStore>(remote, timeout, max_entry_bytes,
                                                   authorization);
    } catch (const std::invalid_argument& error) {
      config->remote_error = error.what();
    }
  } else if (!remote.empty()) {
    config->remote = std::make_unique<DirectoryStore>(remote, 0, /*private_to_user=*/false,
                                                      max_entry_bytes);
  }
  return config;
}

void ExecutableCache::Prepare(Config& config) {
  std::call_once(config.prepared, [this, &config] {
    if (config.shared) {
      if (const std::string error = config.shared->Prepare(); error.empty()) {
        config.shared_on = true;
      } else {
        WarnOnce("shared-unavailable", "host shared tier off: " + error);
      }
    }
    if (auto* directory = dynamic_cast<DirectoryStore*>(config.remote.get())) {
      if (const std::string error = directory->Prepare(); error.empty()) {
        config.remote_on = true;
      } else {
        WarnOnce("remote-unavailable", "persistent tier off: " + error);
      }
    } else if (config.remote) {
      // Under the read lock: a manifest read under way may find the store unreachable.
      std::lock_guard<std::mutex> reading(remote_read_mutex_);
      config.remote_on = !config.remote_unavailable;
    }
    auto* http = dynamic_cast<HttpStore*>(config.remote.get());
    if (http != nullptr && http->is_plain_http() && !config.signer.enabled()) {
      WarnOnce("plain-http-unsigned",
               "plain http:// store " + http->location() +
                   " used without TORCH_TPU_CACHE_KEY: whoever can write the store or sits on "
                   "the network path can plant executables this process loads and runs. Set "
                   "TORCH_TPU_CACHE_KEY (or TORCH_TPU_CACHE_KEY_FILE) to sign and check entries "
                   "(docs/cache.md, Security model)");
    }
  });
}

ExecutableCache::Config& ExecutableCache::config() {
  std::call_once(config_once_, [this] {
    // The store a preloading import opened is the one to use, unless the script changed the
    // settings since: one store object means one timeout for an unreachable server.
    std::shared_ptr<Config> config;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      config = preload_config_;
    }
    if (!config || config->settings != CacheSettings()) config = OpenConfig();
    Prepare(*config);
    std::lock_guard<std::mutex> lock(mutex_);
    config_ = std::move(config);
  });
  if (!config_->remote_error.empty()) throw std::runtime_error(config_->remote_error);
  return *config_;
}

const std::string& ExecutableCache::identity(CompileTier tier) {
  const size_t index = TierIndex(tier);
  std::call_once(identity_once_[index], [this, tier, index] {
    identities_[index] = RuntimeIdentity(runtime::Runtime::Get(), tier);
  });
  return identities_[index];
}

void ExecutableCache::RecordUse(const std::string& digest) {
  if (used_in_order_.size() < kMaxRecordedPrograms && used_.insert(digest).second) {
    used_in_order_.push_back(digest);
  }
}

namespace {

// How a profiler names the tier that served a request (a preloaded entry: the tier it came from).
std::string_view TierName(Tier tier) {
  switch (tier) {
    case Tier::kMemory:
      return "memory";
    case Tier::kShared:
      return "shared";
    case Tier::kRemote:
      return "persistent";
  }
  return "memory";
}

}  // namespace

std::shared_ptr<pjrt::PjrtLoadedExecutable> ExecutableCache::FindInMemory(const std::string& text,
                                                                         CompileTier compile_tier,
                                                                         Tier* served_from) {
  Metrics& metrics = runtime::Metrics::Get();
  std::lock_guard<std::mutex> lock(mutex_);
  auto& by_text = by_text_[TierIndex(compile_tier)];
  auto it = by_text.find(text);
  if (it == by_text.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  MemoryEntry& entry = *it->second;
  if (served_from != nullptr) *served_from = entry.preloaded_from.value_or(Tier::kMemory);
  if (!entry.preloaded_from) {
    ++metrics.cache_hits_memory;
  } else {
    ++(*entry.preloaded_from == Tier::kShared ? metrics.cache_hits_shared
                                              : metrics.cache_hits_remote);
    RecordUse(entry.digest);
    entry.preloaded_from.reset();
  }
  return entry.executable;
}

void ExecutableCache::InsertInMemory(const std::string& text, CompileTier compile_tier,
                                     const std::shared_ptr<pjrt::PjrtLoadedExecutable>& executable,
                                     int64_t bytes, const std::string& digest,
                                     std::optional<Tier> preloaded_from) {
  // Outside the lock: it may read the process's memory mappings.
  const size_t mapping_cap = runtime::LoadedExecutableCap();
  std::lock_guard<std::mutex> lock(mutex_);
  const Config& settings = config_ ? *config_ : *preload_config_;
  const size_t max_entries = std::min(settings.memory_max_entries, mapping_cap);
  auto& by_text = by_text_[TierIndex(compile_tier)];
  if (by_text.count(text) != 0) return;  // another thread got here first
  lru_.push_front({text, compile_tier, executable, bytes, digest, preloaded_from});
  by_text.emplace(text, lru_.begin());
  memory_bytes_ += bytes;
  // The newest entry always stays, even alone over the byte limit: it is about to run.
  while (lru_.size() > 1 &&
         (lru_.size() > max_entries || memory_bytes_ > settings.memory_max_bytes)) {
    memory_bytes_ -= lru_.back().bytes;
    by_text_[TierIndex(lru_.back().tier)].erase(lru_.back().text);
    lru_.pop_back();  // programs still holding the executable keep it alive
  }
  if (settings.memory_max_entries == 0) {
    lru_.clear();
    for (auto& by_text : by_text_) by_text.clear();
    memory_bytes_ = 0;
  }
}

StoreResult ExecutableCache::ReadFrom(EntryStore& store, std::atomic<bool>& on,
                                      const std::string& digest, StoredKind kind,
                                      std::mutex* read_mutex) {
  std::unique_lock<std::mutex> reading;
  if (read_mutex) reading = std::unique_lock<std::mutex>(*read_mutex);
  if (!on) return {StoreResult::kMissing, ""};
  StoreResult read = ReadStore(store, digest, kind);
  // Switched off before the next waiting reader looks.
  if (read.status == StoreResult::kUnavailable) on = false;
  if (reading) reading.unlock();
  if (read.status == StoreResult::kUnavailable) WarnUnavailable(store, read.bytes);
  return read;
}

void ExecutableCache::ReportRejected(const EntryStore& store, const std::string& digest,
                                     const std::string& reason, const std::string& problem) {
  CountRejected(reason);
  WarnOnce("rejected:" + reason, "refusing what " + store.location() + " holds for " + digest +
                                     " (" + problem +
                                     "); compiling the program instead (further refusals are "
                                     "counted in cache_rejected_entries without a message)");
}

std::shared_ptr<pjrt::PjrtLoadedExecutable> ExecutableCache::LoadFrom(
    EntryStore& store, std::atomic<bool>& on, const CacheKey& key, int64_t& bytes,
    std::string& entry_bytes, bool& bad_entry_counted, std::mutex* read_mutex) {
  StoreResult read = ReadFrom(store, on, key.digest, StoredKind::kExecutable, read_mutex);
  // Read again under the compile lock, the same bad entry counts once.
  if (read.status == StoreResult::kRejected && !bad_entry_counted) {
    bad_entry_counted = true;
    ReportRejected(store, key.digest, read.reason, read.bytes);
  }
  if (read.status != StoreResult::kFound) return nullptr;
  DecodedEntry entry = DecodeEntry(read.bytes, key, config_->signer);
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
  if (entry.status == EntryStatus::kUnsigned || entry.status == EntryStatus::kBadSignature) {
    ReportRejected(store, key.digest, EntryStatusName(entry.status), problem);
    return nullptr;
  }
  ++runtime::Metrics::Get().cache_corrupt_entries;
  WarnOnce("bad-entry", "ignoring unusable entry " + key.digest + " in " + store.location() + " (" +
                            EntryStatusName(entry.status) + ": " + problem +
                            "); compiling the program again (further bad entries are counted in "
                            "cache_corrupt_entries without a message)");
  return nullptr;
}

bool ExecutableCache::StoreIn(EntryStore& store, std::atomic<bool>& on, const std::string& digest,
                              const std::string& entry) {
  if (!on) return false;
  if (const std::string error = WriteStore(store, digest, entry, StoredKind::kExecutable);
      !error.empty()) {
    on = false;
    WarnOnce("unavailable:" + store.location(),
             store.location() + " cannot store entries (" + error +
                 "); continuing without it for the rest of this process");
    return false;
  }
  return true;
}

std::string ExecutableCache::RemoteTag(const Config& settings) {
  return Sha256Hex(settings.remote->location()).substr(0, 16);
}

void ExecutableCache::PersistSharedHit(Config& settings, const std::string& digest,
                                       const std::string& entry) {
  if (!settings.remote || !settings.remote_on || !settings.shared) return;
  const std::string tag = RemoteTag(settings);
  if (settings.shared->HasCopyIn(digest, tag)) return;
  if (StoreIn(*settings.remote, settings.remote_on, digest, entry)) {
    settings.shared->RecordCopyIn(digest, tag);
  }
}

std::shared_ptr<pjrt::PjrtLoadedExecutable> ExecutableCache::Compile(const std::string& text,
                                                                    uint64_t structural_hash,
                                                                    CompileTier tier,
                                                                    bool tier_up) {
  Metrics& metrics = runtime::Metrics::Get();
  if (const char* dump_dir = std::getenv("TORCH_TPU_DUMP_DIR"); dump_dir && *dump_dir) {
    DumpModule(dump_dir, structural_hash, text);
  }
  const runtime::Runtime& device_runtime = runtime::Runtime::Get();
  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<pjrt::PjrtLoadedExecutable> executable;
  struct CompileActivity {
    bool counted;
    explicit CompileActivity(bool counted) : counted(counted) {
      if (counted) ++compiles_under_way;
    }
    ~CompileActivity() {
      if (!counted) return;
      last_compile_end_ns = std::chrono::steady_clock::now().time_since_epoch().count();
      --compiles_under_way;
    }
  } activity(!tier_up);
  try {
    // A tier-up is not the program's compile: the program runs already, so an injected compile
    // failure is meant for another.
    if (!tier_up && runtime::ShouldInjectFailure(runtime::FaultSite::kCompile)) {
      throw pjrt::PjrtError(PJRT_Error_Code_INTERNAL,
                            runtime::InjectedFailureMessage(runtime::FaultSite::kCompile));
    }
    executable = device_runtime.client().Compile(text, device_runtime.compile_options(tier));
  } catch (const pjrt::PjrtError& error) {
    const std::string path = DumpModule(std::filesystem::temp_directory_path().string() +
                                            "/torch_tpu_failed_" + std::to_string(::getpid()),
                                        structural_hash, text);
    throw std::runtime_error(std::string(error.what()) + "\n(module dumped to " +
                             (path.empty() ? std::string("<unwritable>") : path) + ")");
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  if (tier_up) {
    metrics.RecordTierUp(elapsed);
  } else {
    metrics.RecordCompile(elapsed);
    if (tier == CompileTier::kQuick) ++metrics.quick_compiles;
  }
  return executable;
}

std::chrono::nanoseconds ExecutableCache::SinceLastCompile() {
  if (compiles_under_way.load() > 0) return std::chrono::nanoseconds(0);
  const int64_t last = last_compile_end_ns.load();
  return std::chrono::nanoseconds(std::chrono::steady_clock::now().time_since_epoch().count() -
                                  last);
}

std::shared_ptr<pjrt::PjrtLoadedExecutable> ExecutableCache::GetOrCompile(
    const stablehlo::Module& module) {
  return GetOrCompile(module, module.ToText());
}

std::shared_ptr<pjrt::PjrtLoadedExecutable> ExecutableCache::FindLoaded(const std::string& text,
                                                                       CompileTier tier,
                                                                       CompileTier* served) {
  config();  // a malformed setting is refused here, on the launching thread, at the first op
  const int64_t profiled_since = profiler::Active() ? profiler::NowNs() : 0;
  Tier tier_served = Tier::kMemory;
  std::shared_ptr<pjrt::PjrtLoadedExecutable> executable;
  // A quick request takes the optimized program when there is one: it costs nothing more.
  for (const CompileTier candidate : {CompileTier::kOptimized, CompileTier::kQuick}) {
    if (candidate == CompileTier::kQuick && tier != CompileTier::kQuick) break;
    if ((executable = FindInMemory(text, candidate, &tier_served))) {
      if (served != nullptr) *served = candidate;
      break;
    }
  }
  if (executable && profiled_since != 0) {
    profiler::RecordCompile(TierName(tier_served), profiled_since);
  }
  return executable;
}

std::shared_ptr<pjrt::PjrtLoadedExecutable> ExecutableCache::GetOrCompile(
    const stablehlo::Module& module, const std::string& text, CompileTier tier,
    CompileTier* served) {
  CompileTier found = CompileTier::kOptimized;
  std::shared_ptr<pjrt::PjrtLoadedExecutable> executable = FindLoaded(text, tier, &found);
  if (!executable && tier == CompileTier::kQuick) {
    // A warm store's optimized program, before compiling a quick one.
    executable = LoadStored(text, module.StructuralHash(), CompileTier::kOptimized);
  }
  if (executable) {
    if (served != nullptr) *served = found;
    return executable;
  }
  if (served != nullptr) *served = tier;
  return Obtain(text, module.StructuralHash(), tier, /*tier_up=*/false);
}

std::shared_ptr<pjrt::PjrtLoadedExecutable> ExecutableCache::TierUp(const std::string& text,
                                                                    uint64_t structural_hash) {
  std::shared_ptr<pjrt::PjrtLoadedExecutable> executable =
      FindLoaded(text, CompileTier::kOptimized);
  if (executable) return executable;
  executable = Obtain(text, structural_hash, CompileTier::kOptimized, /*tier_up=*/true);
  // The quick program's entry is not asked for again; the programs running it keep it.
  std::lock_guard<std::mutex> lock(mutex_);
  auto& quick = by_text_[TierIndex(CompileTier::kQuick)];
  if (auto it = quick.find(text); it != quick.end()) {
    memory_bytes_ -= it->second->bytes;
    lru_.erase(it->second);
    quick.erase(it);
  }
  return executable;
}

std::shared_ptr<pjrt::PjrtLoadedExecutable> ExecutableCache::LoadStored(const std::string& text,
                                                                        uint64_t structural_hash,
                                                                        CompileTier tier) {
  Config& settings = config();
  const CacheKey key = MakeCacheKey(identity(tier), text, structural_hash);
  int64_t bytes = 0;
  std::string entry_bytes;
  bool bad_entry = false;
  std::shared_ptr<pjrt::PjrtLoadedExecutable> executable;
  if (settings.shared &&
      (executable = LoadFrom(*settings.shared, settings.shared_on, key, bytes, entry_bytes,
                             bad_entry))) {
    ++runtime::Metrics::Get().cache_hits_shared;
    PersistSharedHit(settings, key.digest, entry_bytes);
  } else if (settings.remote &&
             (executable = LoadFrom(*settings.remote, settings.remote_on, key, bytes,
                                    entry_bytes, bad_entry, &remote_read_mutex_))) {
    ++runtime::Metrics::Get().cache_hits_remote;
    if (settings.shared && StoreIn(*settings.shared, settings.shared_on, key.digest, entry_bytes)) {
      settings.shared->RecordCopyIn(key.digest, RemoteTag(settings));
    }
  }
  if (!executable) return nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    RecordUse(key.digest);
  }
  InsertInMemory(text, tier, executable, bytes, key.digest);
  return executable;
}

std::shared_ptr<pjrt::PjrtLoadedExecutable> ExecutableCache::Obtain(const std::string& text,
                                                                   uint64_t structural_hash,
                                                                   CompileTier compile_tier,
                                                                   bool tier_up) {
  Metrics& metrics = runtime::Metrics::Get();
  std::shared_ptr<pjrt::PjrtLoadedExecutable> executable;
  // What a profiler shows (profiler/device_trace.h): the tier that served the request, and when.
  const int64_t profiled_since = profiler::Active() ? profiler::NowNs() : 0;
  auto served_by = [profiled_since](std::string_view tier) {
    if (profiled_since != 0) profiler::RecordCompile(tier, profiled_since);
  };
  Config& settings = config();
  const CacheKey key = MakeCacheKey(identity(compile_tier), text, structural_hash);
  {
    std::unique_lock<std::mutex> lock(mutex_);
    preloaded_.wait(lock, [&] { return preloading_.count(key.digest) == 0; });
    RecordUse(key.digest);
  }
  Tier tier = Tier::kMemory;
  if ((executable = FindInMemory(text, compile_tier, &tier))) {
    served_by(TierName(tier));
    return executable;
  }
  int64_t bytes = 0;
  std::string entry_bytes;
  bool bad_shared_entry = false;
  bool bad_remote_entry = false;
  if (settings.shared && (executable = LoadFrom(*settings.shared, settings.shared_on, key, bytes,
                                                entry_bytes, bad_shared_entry))) {
    ++metrics.cache_hits_shared;
    served_by("shared");
    PersistSharedHit(settings, key.digest, entry_bytes);
    InsertInMemory(text, compile_tier, executable, bytes, key.digest);
    return executable;
  }
  // One process of the host compiles (or fetches) while the others wait, then they all load.
  std::optional<DirectoryStore::Lock> lock;
  if (settings.shared_on) {
    lock.emplace(settings.shared->LockEntry(key.digest));
    if ((executable = LoadFrom(*settings.shared, settings.shared_on, key, bytes, entry_bytes,
                               bad_shared_entry))) {
      ++metrics.cache_hits_shared;
      served_by("shared");
      PersistSharedHit(settings, key.digest, entry_bytes);
      InsertInMemory(text, compile_tier, executable, bytes, key.digest);
      return executable;
    }
  }
  if (settings.remote) {
    executable = LoadFrom(*settings.remote, settings.remote_on, key, bytes, entry_bytes,
                          bad_remote_entry, &remote_read_mutex_);
    if (executable) {
      ++metrics.cache_hits_remote;
      served_by("persistent");
      // The other processes of this host then find it without asking the remote store.
      if (settings.shared &&
          StoreIn(*settings.shared, settings.shared_on, key.digest, entry_bytes)) {
        settings.shared->RecordCopyIn(key.digest, RemoteTag(settings));
      }
      InsertInMemory(text, compile_tier, executable, bytes, key.digest);
      return executable;
    }
  }
  // A tier-up is the second compile of a program that missed already.
  if (!tier_up) ++metrics.cache_misses;
  executable = Compile(text, structural_hash, compile_tier, tier_up);
  served_by("compiled");
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
      const std::string entry = EncodeEntry(key, payload, settings.signer);
      const bool shared_stored =
          settings.shared && StoreIn(*settings.shared, settings.shared_on, key.digest, entry);
      if (settings.remote && StoreIn(*settings.remote, settings.remote_on, key.digest, entry) &&
          shared_stored) {
        settings.shared->RecordCopyIn(key.digest, RemoteTag(settings));
      }
    }
  }
  InsertInMemory(text, compile_tier, executable, bytes, key.digest);
  return executable;
}

bool ExecutableCache::Preload(const std::string& digest) {
  if (!preload_config_) return false;
  Config& settings = *preload_config_;
  Prepare(settings);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (used_.count(digest) != 0 || !preloading_.insert(digest).second) return false;
  }
  bool loaded = false;
  try {
    for (const Tier tier : {Tier::kShared, Tier::kRemote}) {
      const bool shared = tier == Tier::kShared;
      EntryStore* store = shared ? static_cast<EntryStore*>(settings.shared.get())
                                 : settings.remote.get();
      if (store == nullptr) continue;
      StoreResult read = ReadFrom(*store, shared ? settings.shared_on : settings.remote_on, digest,
                                  StoredKind::kExecutable, shared ? nullptr : &remote_read_mutex_);
      if (read.status != StoreResult::kFound) continue;
      std::string text;
      // Either tier's program (runtime/runtime.h's CompileTier) may have been asked for.
      CompileTier compile_tier = CompileTier::kOptimized;
      std::optional<CacheKey> key = KeyStoredIn(read.bytes, identity(compile_tier), text);
      if (!key) {
        compile_tier = CompileTier::kQuick;
        key = KeyStoredIn(read.bytes, identity(compile_tier), text);
      }
      if (!key || key->digest != digest) continue;
      DecodedEntry entry = DecodeEntry(read.bytes, *key, settings.signer);
      if (entry.status != EntryStatus::kValid) continue;
      auto executable = runtime::Runtime::Get().client().DeserializeAndLoad(entry.payload);
      if (tier == Tier::kRemote && settings.shared) {
        if (StoreIn(*settings.shared, settings.shared_on, digest, read.bytes)) {
          settings.shared->RecordCopyIn(digest, RemoteTag(settings));
        }
      } else if (tier == Tier::kShared) {
        PersistSharedHit(settings, digest, read.bytes);
      }
      InsertInMemory(text, compile_tier, executable, static_cast<int64_t>(entry.payload.size()),
                     digest, tier);
      ++runtime::Metrics::Get().cache_preloaded;
      loaded = true;
      break;
    }
  } catch (const std::exception&) {
    // Left to the demand path, which reports what is wrong.
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    preloading_.erase(digest);
  }
  preloaded_.notify_all();
  return loaded;
}

std::vector<std::string> ExecutableCache::ProgramsUsed() {
  std::lock_guard<std::mutex> lock(mutex_);
  return used_in_order_;
}

bool ExecutableCache::OpenForPreloading() {
  try {
    std::shared_ptr<Config> config = OpenConfig();
    if (!config->remote_error.empty()) config->remote.reset();
    std::lock_guard<std::mutex> lock(mutex_);
    if (config_ || preload_config_) return false;
    preload_config_ = std::move(config);
    return true;
  } catch (const std::exception&) {
    return false;  // malformed settings: the first op reports them
  }
}

std::vector<std::string> ExecutableCache::ReadManifest(const std::string& name) {
  if (!preload_config_) return {};
  Config& settings = *preload_config_;
  const CacheKey key = MakeManifestKey(name);
  std::vector<std::string> digests;
  // Read before the stores are prepared: a process without a manifest creates no directory.
  for (EntryStore* store : {static_cast<EntryStore*>(settings.shared.get()),
                            settings.remote.get()}) {
    if (store == nullptr) continue;
    StoreResult read;
    if (store == settings.remote.get()) {
      std::lock_guard<std::mutex> reading(remote_read_mutex_);
      read = ReadStore(*store, key.digest, StoredKind::kManifest);
      // Counted as the store's one timeout: it is not asked again.
      if (read.status == StoreResult::kUnavailable) {
        settings.remote_unavailable = true;
        settings.remote_on = false;
        WarnUnavailable(*store, read.bytes);
      }
    } else {
      read = ReadStore(*store, key.digest, StoredKind::kManifest);
    }
    if (read.status != StoreResult::kFound) continue;
    const DecodedEntry entry = DecodeEntry(read.bytes, key, settings.signer);
    if (entry.status != EntryStatus::kValid) continue;
    std::istringstream lines(entry.payload);
    std::string digest;
    while (std::getline(lines, digest) && digests.size() < kMaxRecordedPrograms) {
      if (!digest.empty()) digests.push_back(digest);
    }
    break;
  }
  return digests;
}

void ExecutableCache::WriteManifest(const std::string& name,
                                    const std::vector<std::string>& digests) {
  Config& settings = config();
  const CacheKey key = MakeManifestKey(name);
  std::string payload;
  for (const std::string& digest : digests) payload += digest + "\n";
  const std::string entry = EncodeEntry(key, payload, settings.signer);
  // A manifest only saves time: a store that cannot take it is not worth a warning here (the
  // executables' own writes report an unusable store).
  if (settings.shared && settings.shared_on) {
    WriteStore(*settings.shared, key.digest, entry, StoredKind::kManifest);
  }
  if (settings.remote && settings.remote_on) {
    WriteStore(*settings.remote, key.digest, entry, StoredKind::kManifest);
  }
}

void ExecutableCache::Clear(Tier tier) {
  if (tier == Tier::kMemory) {
    std::lock_guard<std::mutex> lock(mutex_);
    lru_.clear();
    for (auto& by_text : by_text_) by_text.clear();
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

#include "exec/executable_cache.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "exec/metrics.h"
#include "pjrt/error.h"
#include "runtime/runtime.h"

namespace torch_tpu::exec {
namespace {

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

}  // namespace

ExecutableCache& ExecutableCache::Get() {
  static ExecutableCache cache;
  return cache;
}

std::shared_ptr<pjrt::PjrtLoadedExecutable> ExecutableCache::GetOrCompile(
    const stablehlo::Module& module) {
  const std::string text = module.ToText();
  Metrics& metrics = Metrics::Get();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = executables_.find(text);
    if (it != executables_.end()) {
      ++metrics.cache_hits_memory;
      return it->second;
    }
  }
  ++metrics.cache_misses;
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
  std::lock_guard<std::mutex> lock(mutex_);
  executables_.emplace(text, executable);
  return executable;
}

void ExecutableCache::Clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  executables_.clear();
}

size_t ExecutableCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return executables_.size();
}

}  // namespace torch_tpu::exec

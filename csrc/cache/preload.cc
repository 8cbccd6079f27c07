#include "cache/preload.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "cache/executable_cache.h"
#include "runtime/runtime.h"

namespace torch_tpu::cache {
namespace {

struct Preloader {
  std::mutex mutex;  // guards starting and finishing
  std::string name;
  pid_t pid = 0;
  std::thread thread;
  std::vector<std::string> manifest;  // what the thread found (read after joining it)
  std::atomic<bool> stop{false};
  // From the start until the thread finds no manifest: it may start the runtime at any moment,
  // so a child forked meanwhile cannot know whether the runtime's threads existed.
  std::atomic<bool> may_start_runtime{false};
};

Preloader& State() {
  static Preloader* preloader = new Preloader();  // outlives exit-time static destruction
  return *preloader;
}

void MarkForkedChild() {
  if (State().may_start_runtime.load()) runtime::Runtime::MarkForkedChild();
}

void Preload(Preloader& state) {
  ExecutableCache& cache = ExecutableCache::Get();
  std::vector<std::string> manifest;
  try {
    manifest = cache.ReadManifest(state.name);
    if (!manifest.empty()) runtime::Runtime::Get();
  } catch (const std::exception&) {
    manifest.clear();  // the first op reports what is wrong with the settings or the runtime
  }
  if (manifest.empty()) {
    state.may_start_runtime = false;
    return;
  }
  for (const std::string& digest : manifest) {
    if (state.stop) break;
    cache.Preload(digest);
  }
  state.manifest = std::move(manifest);
}

}  // namespace

void StartPreloading(const std::string& name) {
  Preloader& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.pid != 0) return;
  state.name = name;
  state.pid = ::getpid();
  // False when the first op ran before import finished: there is nothing to gain then.
  state.may_start_runtime =
      !runtime::Runtime::IsInitialized() && ExecutableCache::Get().OpenForPreloading();
  if (!state.may_start_runtime) return;
  pthread_atfork(nullptr, nullptr, &MarkForkedChild);
  state.thread = std::thread([&state] {
    runtime::Runtime::MarkPreloaderThread();
    Preload(state);
  });
}

void FinishPreloading(bool store) {
  Preloader& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.pid != ::getpid()) return;  // never started, or a forked child
  state.stop = true;
  if (state.thread.joinable()) state.thread.join();
  if (!store || runtime::Runtime::InBadFork() || !runtime::Runtime::IsInitialized()) return;
  try {
    ExecutableCache& cache = ExecutableCache::Get();
    const std::vector<std::string> used = cache.ProgramsUsed();
    if (!used.empty() && used != state.manifest) cache.WriteManifest(state.name, used);
  } catch (const std::exception&) {
    // A manifest only saves time; the process is exiting.
  }
}

}  // namespace torch_tpu::cache

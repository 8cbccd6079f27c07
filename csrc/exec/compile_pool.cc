#include "exec/compile_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <exception>
#include <thread>
#include <unordered_map>

#include "cache/executable_cache.h"
#include "profiler/device_trace.h"

namespace torch_tpu::exec {

namespace {

size_t CompileThreads() {
  static const size_t threads = [] {
    const char* setting = std::getenv("TORCH_TPU_COMPILE_THREADS");
    if (setting != nullptr && *setting != '\0') {
      const long parsed = std::strtol(setting, nullptr, 10);
      if (parsed >= 0) return static_cast<size_t>(parsed);
    }
    const size_t cores = std::max(1u, std::thread::hardware_concurrency());
    return std::min<size_t>(cores, 8);
  }();
  return threads;
}

std::mutex injected_mutex;
std::string injected_failure;  // the next compile's failure, when not empty

}  // namespace

class CompilePool {
 public:
  static CompilePool& Get() {
    // Never destroyed: threads may still be compiling while the process exits.
    static CompilePool* pool = new CompilePool();
    return *pool;
  }

  std::shared_ptr<CompileJob> Submit(stablehlo::Module module,
                                     std::shared_ptr<const std::string> text) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto running = in_flight_.find(*text);
    if (running != in_flight_.end()) {
      // A job that has ended stays listed until its thread looks again; a failed one must not
      // be handed out, or the call that retries a failed compile would get the failure again.
      std::shared_ptr<CompileJob> job = running->second.lock();
      if (job && !job->done()) return job;
    }
    auto job = std::make_shared<CompileJob>();
    job->module_ = std::move(module);
    job->text_ = std::move(text);
    if (profiler::Active()) job->profiler_correlation_ = profiler::CurrentCorrelation();
    in_flight_[*job->text_] = job;
    waiting_.push_back(job);
    // A thread per waiting job, up to the limit; idle ones are reused.
    if (threads_started_ < thread_limit_ && threads_started_ - busy_ < waiting_.size()) {
      ++threads_started_;
      std::thread([this] { Work(); }).detach();
    }
    work_.notify_one();
    return job;
  }

  void Hold(bool hold) {
    std::lock_guard<std::mutex> lock(mutex_);
    held_ = hold;
    work_.notify_all();
  }

 private:
  CompilePool() : thread_limit_(std::max<size_t>(CompileThreads(), 1)) {}

  void Work() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      work_.wait(lock, [&] { return !waiting_.empty(); });
      if (held_) {
        work_.wait_for(lock, std::chrono::minutes(1), [&] { return !held_; });
        if (waiting_.empty()) continue;
      }
      std::shared_ptr<CompileJob> job = std::move(waiting_.front());
      waiting_.pop_front();
      ++busy_;
      lock.unlock();
      job->Run();
      lock.lock();
      --busy_;
      auto entry = in_flight_.find(*job->text_);
      if (entry != in_flight_.end() && entry->second.lock() == job) in_flight_.erase(entry);
    }
  }

  std::mutex mutex_;
  std::condition_variable work_;
  std::deque<std::shared_ptr<CompileJob>> waiting_;
  std::unordered_map<std::string, std::weak_ptr<CompileJob>> in_flight_;  // by module text
  const size_t thread_limit_;
  size_t threads_started_ = 0;
  size_t busy_ = 0;
  bool held_ = false;
};

void CompileJob::Run() {
  Executable executable;
  std::string error;
  {
    std::lock_guard<std::mutex> lock(injected_mutex);
    error.swap(injected_failure);
  }
  try {
    const profiler::CorrelationScope issued_in(profiler_correlation_);
    if (error.empty()) executable = cache::ExecutableCache::Get().GetOrCompile(module_, *text_);
  } catch (const std::exception& failure) {
    error = failure.what();
  }
  module_ = stablehlo::Module();  // the module is large; only its text stays (with the program)
  std::vector<std::function<void(const Executable&)>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    executable_ = std::move(executable);
    error_ = std::move(error);
    callbacks.swap(callbacks_);
    // Callbacks run under the lock, so one registered meanwhile cannot run before them.
    for (auto& callback : callbacks) callback(executable_);
    done_.store(true, std::memory_order_release);
  }
  compiled_.notify_all();
}

Executable CompileJob::Wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  compiled_.wait(lock, [&] { return done_.load(std::memory_order_acquire); });
  return executable_;
}

void CompileJob::OnCompiled(std::function<void(const Executable&)> callback) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (done_.load(std::memory_order_acquire)) {
    callback(executable_);
  } else {
    callbacks_.push_back(std::move(callback));
  }
}

std::shared_ptr<CompileJob> CompileInBackground(stablehlo::Module module,
                                                std::shared_ptr<const std::string> text) {
  return CompilePool::Get().Submit(std::move(module), std::move(text));
}

bool CompilesInBackground() { return CompileThreads() > 0; }

void HoldCompiles(bool hold) { CompilePool::Get().Hold(hold); }

void InjectCompileFailure(std::string message) {
  std::lock_guard<std::mutex> lock(injected_mutex);
  injected_failure = std::move(message);
}

}  // namespace torch_tpu::exec

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

// How long no other compile must have run before a tier-up starts (TORCH_TPU_TIER_UP_QUIET_MS).
std::chrono::nanoseconds TierUpQuietTime() {
  static const std::chrono::nanoseconds quiet = [] {
    const char* setting = std::getenv("TORCH_TPU_TIER_UP_QUIET_MS");
    const long milliseconds =
        setting != nullptr && *setting != '\0' ? std::strtol(setting, nullptr, 10) : 500;
    return std::chrono::milliseconds(std::max(0L, milliseconds));
  }();
  return quiet;
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

  // `compile` is the job's work; `text` names it: one job per text and kind at a time.
  std::shared_ptr<CompileJob> Submit(std::function<Executable()> compile,
                                     std::shared_ptr<const std::string> text, bool tier_up) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& in_flight = in_flight_[tier_up];
    auto running = in_flight.find(*text);
    if (running != in_flight.end()) {
      // A job that has ended stays listed until its thread looks again; a failed one must not
      // be handed out, or the call that retries a failed compile would get the failure again.
      std::shared_ptr<CompileJob> job = running->second.lock();
      if (job && !job->done()) return job;
    }
    auto job = std::make_shared<CompileJob>();
    job->compile_ = std::move(compile);
    job->text_ = std::move(text);
    job->tier_up_ = tier_up;
    if (profiler::Active()) job->profiler_correlation_ = profiler::CurrentCorrelation();
    in_flight[*job->text_] = job;
    if (tier_up) {
      tier_ups_waiting_.push_back(job);
      if (!tier_up_thread_started_) {
        tier_up_thread_started_ = true;
        std::thread([this] { WorkOnTierUps(); }).detach();
        // Registered after the executable cache and the runtime exist, so it runs before they
        // are destroyed: no compile may be under way then.
        std::atexit([] { CompilePool::Get().StopTierUps(); });
      }
      tier_up_work_.notify_one();
      return job;
    }
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
      Ended(*job);
    }
  }

  // Tier-ups (exec/tiered_compilation.h) run one at a time on a thread of their own, and only
  // once no other compile has run for a while: the program runs quickly compiled meanwhile, so
  // its optimized build must not slow a process that is still starting.
  void WorkOnTierUps() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      tier_up_work_.wait(lock, [&] { return !tier_ups_waiting_.empty() || exiting_; });
      // A process still compiling new programs is still starting (the first steps of a loop,
      // a generation's first lengths): tier-ups wait for a quiet moment rather than slow it.
      const auto quiet = TierUpQuietTime();
      for (auto since = cache::ExecutableCache::SinceLastCompile(); since < quiet && !exiting_;
           since = cache::ExecutableCache::SinceLastCompile()) {
        tier_up_work_.wait_for(lock, quiet - since);
      }
      if (exiting_) return;
      std::shared_ptr<CompileJob> job = std::move(tier_ups_waiting_.front());
      tier_ups_waiting_.pop_front();
      tier_up_running_ = true;
      lock.unlock();
      job->Run();
      lock.lock();
      tier_up_running_ = false;
      tier_up_ended_.notify_all();
      Ended(*job);
    }
  }

  // At exit: no tier-up starts any more, and the one under way ends first.
  void StopTierUps() {
    std::unique_lock<std::mutex> lock(mutex_);
    exiting_ = true;
    tier_up_work_.notify_all();
    tier_up_ended_.wait(lock, [&] { return !tier_up_running_; });
  }

  // Under mutex_: `job` is no longer handed out to new requests.
  void Ended(const CompileJob& job) {
    auto& in_flight = in_flight_[job.tier_up_];
    auto entry = in_flight.find(*job.text_);
    if (entry != in_flight.end() && entry->second.lock().get() == &job) in_flight.erase(entry);
  }

  std::mutex mutex_;
  std::condition_variable work_;
  std::deque<std::shared_ptr<CompileJob>> waiting_;
  std::condition_variable tier_up_work_;
  std::deque<std::shared_ptr<CompileJob>> tier_ups_waiting_;
  bool tier_up_thread_started_ = false;
  bool tier_up_running_ = false;
  std::condition_variable tier_up_ended_;
  bool exiting_ = false;
  // By tier-up, then module text.
  std::unordered_map<std::string, std::weak_ptr<CompileJob>> in_flight_[2];
  const size_t thread_limit_;
  size_t threads_started_ = 0;
  size_t busy_ = 0;
  bool held_ = false;
};

void CompileJob::Run() {
  Executable executable;
  std::string error;
  if (!tier_up_) {
    std::lock_guard<std::mutex> lock(injected_mutex);
    error.swap(injected_failure);
  }
  try {
    const profiler::CorrelationScope issued_in(profiler_correlation_);
    if (error.empty()) executable = compile_();
  } catch (const std::exception& failure) {
    error = failure.what();
  }
  compile_ = nullptr;  // a module is large; only its text stays (with the program)
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
  // Shared, since std::function must be copyable; the job drops it once compiled.
  auto held = std::make_shared<stablehlo::Module>(std::move(module));
  return CompilePool::Get().Submit(
      [held, text] { return cache::ExecutableCache::Get().GetOrCompile(*held, *text); }, text,
      /*tier_up=*/false);
}

std::shared_ptr<CompileJob> TierUpInBackground(std::weak_ptr<const void> wanted_by,
                                               std::shared_ptr<const std::string> text,
                                               uint64_t structural_hash) {
  return CompilePool::Get().Submit(
      [wanted_by, text, structural_hash]() -> Executable {
        // A program dropped meanwhile (its graph freed, its plan evicted) needs none.
        if (wanted_by.expired()) return nullptr;
        return cache::ExecutableCache::Get().TierUp(*text, structural_hash);
      },
      text, /*tier_up=*/true);
}

bool CompilesInBackground() { return CompileThreads() > 0; }

void HoldCompiles(bool hold) { CompilePool::Get().Hold(hold); }

void InjectCompileFailure(std::string message) {
  std::lock_guard<std::mutex> lock(injected_mutex);
  injected_failure = std::move(message);
}

}  // namespace torch_tpu::exec

#include "profiler/device_trace.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

namespace torch_tpu::profiler {

namespace detail {
std::atomic<bool> recording{false};
}

namespace {

thread_local std::vector<uint64_t> correlations;
thread_local std::vector<uint64_t> user_correlations;  // record_function annotations

// The events of one session. Completion callbacks hold it, so a callback that fires after the
// session ended (or after another one began) writes into its own session's events.
struct Collector {
  std::mutex mutex;
  std::condition_variable completed;
  std::deque<DeviceEvent> events;  // stable addresses are not needed: callbacks keep indices
  int outstanding = 0;
};

std::mutex current_mutex;
std::shared_ptr<Collector> current;

std::shared_ptr<Collector> CurrentCollector() {
  std::lock_guard<std::mutex> lock(current_mutex);
  return current;
}

// Appends `event`; returns its index, or -1 when no session is open any more.
int64_t Append(const std::shared_ptr<Collector>& collector, DeviceEvent event, bool outstanding) {
  std::lock_guard<std::mutex> lock(collector->mutex);
  collector->events.push_back(std::move(event));
  if (outstanding) ++collector->outstanding;
  return static_cast<int64_t>(collector->events.size()) - 1;
}

void EndWhenDone(std::shared_ptr<Collector> collector, DeviceEvent event,
                 const pjrt::PjrtEvent& done) {
  const int64_t index = Append(collector, std::move(event), true);
  try {
    done.OnReady([collector, index](const std::string& error) {
      const int64_t now = NowNs();
      std::lock_guard<std::mutex> lock(collector->mutex);
      DeviceEvent& ended = collector->events[static_cast<size_t>(index)];
      ended.end_ns = now;
      ended.error = error;
      --collector->outstanding;
      collector->completed.notify_all();
    });
  } catch (const std::exception& failure) {
    // The plugin refused the callback: the event stays open rather than failing the launch.
    std::lock_guard<std::mutex> lock(collector->mutex);
    collector->events[static_cast<size_t>(index)].error = failure.what();
    --collector->outstanding;
  }
}

// A device runs its programs one after another: an execution issued while the previous one ran
// starts when that one ended.
void SetStarts(std::vector<DeviceEvent>& events) {
  std::map<int, int64_t> previous_end;
  std::vector<DeviceEvent*> executions;
  for (DeviceEvent& event : events) {
    event.start_ns = event.issued_ns;
    if (event.kind == EventKind::kExecution) executions.push_back(&event);
  }
  std::stable_sort(executions.begin(), executions.end(),
                   [](const DeviceEvent* a, const DeviceEvent* b) {
                     return a->issued_ns < b->issued_ns;
                   });
  for (DeviceEvent* event : executions) {
    auto [it, inserted] = previous_end.try_emplace(event->device, event->issued_ns);
    if (event->end_ns >= 0 && it->second > event->issued_ns && it->second <= event->end_ns) {
      event->start_ns = it->second;
    }
    if (event->end_ns >= 0) it->second = std::max(it->second, event->end_ns);
  }
}

}  // namespace

void PushCorrelation(uint64_t id) { correlations.push_back(id); }

void PopCorrelation() {
  if (!correlations.empty()) correlations.pop_back();
}

void PushUserCorrelation(uint64_t id) { user_correlations.push_back(id); }

void PopUserCorrelation() {
  if (!user_correlations.empty()) user_correlations.pop_back();
}

uint64_t CurrentCorrelation() {
  if (!correlations.empty()) return correlations.back();
  // Work issued outside any op (a fused graph run when an optimizer step ends, say) belongs to
  // the user annotation around it (Optimizer.step#AdamW.step).
  return user_correlations.empty() ? 0 : user_correlations.back();
}

CorrelationScope::CorrelationScope(uint64_t id) : pushed_(id != 0) {
  if (pushed_) PushCorrelation(id);
}

CorrelationScope::~CorrelationScope() {
  if (pushed_) PopCorrelation();
}

std::string_view ProgramName(std::string_view description) {
  std::string_view name = description.substr(0, description.find('('));
  while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
  return name.empty() ? description : name;
}

void RecordExecution(std::string_view description, int device, int64_t issued_ns,
                     const pjrt::PjrtEvent& done) {
  std::shared_ptr<Collector> collector = CurrentCollector();
  if (!collector) return;
  DeviceEvent event;
  event.kind = EventKind::kExecution;
  event.name = std::string(ProgramName(description));
  event.detail = std::string(description);
  event.device = device;
  event.correlation = CurrentCorrelation();
  event.issued_ns = issued_ns;
  EndWhenDone(std::move(collector), std::move(event), done);
}

void RecordAsync(EventKind kind, std::string name, int device, int64_t bytes, int64_t issued_ns,
                 const pjrt::PjrtEvent& done) {
  std::shared_ptr<Collector> collector = CurrentCollector();
  if (!collector) return;
  DeviceEvent event;
  event.kind = kind;
  event.name = std::move(name);
  event.device = device;
  event.bytes = bytes;
  event.correlation = CurrentCorrelation();
  event.issued_ns = issued_ns;
  EndWhenDone(std::move(collector), std::move(event), done);
}

void RecordSpan(EventKind kind, std::string name, std::string detail, int device, int64_t bytes,
                int64_t start_ns) {
  std::shared_ptr<Collector> collector = CurrentCollector();
  if (!collector) return;
  DeviceEvent event;
  event.kind = kind;
  event.name = std::move(name);
  event.detail = std::move(detail);
  event.device = device;
  event.bytes = bytes;
  event.correlation = CurrentCorrelation();
  event.issued_ns = start_ns;
  event.end_ns = NowNs();
  Append(collector, std::move(event), false);
}

void RecordCompile(std::string_view tier, int64_t start_ns) {
  RecordSpan(EventKind::kCompile, tier == "compiled" ? "XLA compile" : "load executable",
             std::string(tier), 0, 0, start_ns);
}

void StartRecording() {
  {
    std::lock_guard<std::mutex> lock(current_mutex);
    current = std::make_shared<Collector>();
  }
  detail::recording.store(true, std::memory_order_relaxed);
}

void EndRecording() { detail::recording.store(false, std::memory_order_relaxed); }

std::vector<DeviceEvent> TakeEvents(std::chrono::milliseconds wait) {
  std::shared_ptr<Collector> collector;
  {
    std::lock_guard<std::mutex> lock(current_mutex);
    collector = std::move(current);
  }
  std::vector<DeviceEvent> events;
  if (!collector) return events;
  {
    std::unique_lock<std::mutex> lock(collector->mutex);
    collector->completed.wait_for(lock, wait, [&] { return collector->outstanding == 0; });
    events.assign(collector->events.begin(), collector->events.end());
  }
  SetStarts(events);
  return events;
}

}  // namespace torch_tpu::profiler

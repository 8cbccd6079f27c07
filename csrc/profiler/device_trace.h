// Device work as a profiler sees it: program executions, compiles (with the cache tier that
// served them), host<->device transfers and collectives, timed on the host clock Kineto uses
// (nanoseconds since the Unix epoch) and ended by their PJRT completion events.
//
// Recording is on only while a trace session is open (profiler/kineto_session.h opens one when
// torch.profiler asks for ProfilerActivity.PrivateUse1). Every hook on the launch path checks
// Active() first, one relaxed atomic load, and does nothing else while no session is open.
//
// Correlation: Kineto pushes the correlation id of each CPU op (aten::addmm, ...) onto the thread
// that runs it; work issued inside the op records the innermost id, so the trace links each device
// event to the op that launched it. Work that runs later on another thread (the launch queue, the
// compile pool) carries the id it was issued under (CorrelationScope).
//
// No torch includes: every layer above pjrt may record.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pjrt/event.h"

namespace torch_tpu::profiler {

enum class EventKind { kExecution, kCompile, kTransfer, kCollective };

struct DeviceEvent {
  EventKind kind = EventKind::kExecution;
  std::string name;    // "aten::addmm", "compiled graph 3", "host to device", ...
  std::string detail;  // the full description (operands), or the cache tier of a compile
  int device = 0;
  uint64_t correlation = 0;  // the launching CPU op's Kineto correlation id; 0: none
  int64_t issued_ns = 0;     // when the host handed the work over
  // When the device could start it: issued, or (executions) when the previous program on its
  // device ended, whichever is later. Set when the session ends.
  int64_t start_ns = 0;
  int64_t end_ns = -1;  // when its completion event fired; -1: not by the end of the session
  int64_t bytes = 0;
  std::string error;  // the completion event's error, if the work failed
};

namespace detail {
extern std::atomic<bool> recording;
}

// Whether a session records device work now (the hot-path check).
inline bool Active() { return detail::recording.load(std::memory_order_relaxed); }

// The clock of every timestamp here and in Kineto: nanoseconds since the Unix epoch.
inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The correlation ids of the CPU ops running on this thread, innermost last (Kineto's pushes).
void PushCorrelation(uint64_t id);
void PopCorrelation();
// The same for user annotations (record_function); they correlate work issued outside any op.
void PushUserCorrelation(uint64_t id);
void PopUserCorrelation();
uint64_t CurrentCorrelation();

// Runs work issued under `id` on this thread as if inside that op (0: nothing to do).
class CorrelationScope {
 public:
  explicit CorrelationScope(uint64_t id);
  ~CorrelationScope();
  CorrelationScope(const CorrelationScope&) = delete;
  CorrelationScope& operator=(const CorrelationScope&) = delete;

 private:
  bool pushed_;
};

// The name of a program from its description: the text before its operand list
// ("aten::addmm(f32[4, 8], ...)" -> "aten::addmm").
std::string_view ProgramName(std::string_view description);

// Recorders; call them only when Active(). Each takes the correlation of the calling thread.
// An execution of the program described by `description`, handed to PJRT at `issued_ns`, that
// ends when `done` fires.
void RecordExecution(std::string_view description, int device, int64_t issued_ns,
                     const pjrt::PjrtEvent& done);
// A transfer or collective that ends when `done` fires.
void RecordAsync(EventKind kind, std::string name, int device, int64_t bytes, int64_t issued_ns,
                 const pjrt::PjrtEvent& done);
// Work that ran from `start_ns` until now (blocking transfers, compiles, host-staged collectives).
void RecordSpan(EventKind kind, std::string name, std::string detail, int device, int64_t bytes,
                int64_t start_ns);
// A request for an executable (`tier`: memory, shared, persistent or compiled) that began at
// `start_ns`; the trace names it after the CPU op it was made for.
void RecordCompile(std::string_view tier, int64_t start_ns);

// The session: recording on (dropping what an earlier session left); recording off; the events
// recorded since StartRecording, after waiting up to `wait` for completion events still
// outstanding (those keep end_ns = -1), with executions' start_ns set.
void StartRecording();
void EndRecording();
std::vector<DeviceEvent> TakeEvents(std::chrono::milliseconds wait);

}  // namespace torch_tpu::profiler

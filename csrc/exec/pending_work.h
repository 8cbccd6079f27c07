// Work launched but not yet waited for, and the errors it may report later.
//
// Strict mode never blocks on the device, so failures surface where the host synchronizes anyway
// (synchronize(), a host read): asynchronous execution failures through the executions' events,
// and failed device-side checks (out-of-range indices, integer division by zero) through a small
// per-device error word that checking programs update. Each error is raised once, naming the op.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pjrt/buffer.h"
#include "pjrt/event.h"

namespace torch_tpu::exec {

// What a failed device-side check reports: the op (with its input types) and the condition.
struct DeviceCheckReport {
  std::string op_description;
  std::string what;
  bool index_error = true;  // IndexError; else RuntimeError
};

class PendingWork {
 public:
  static PendingWork& Get();

  // `description` names the op that launched the work (kept alive with the event).
  void Add(pjrt::PjrtEvent event, std::shared_ptr<const std::string> description);
  // Work that failed before it could run (a launch whose program failed to compile): raised by
  // the next WaitAllAndCheck, naming the op in `failure`.
  void AddFailure(std::string failure);
  bool AllReady();
  // Waits for everything launched so far and raises the first failure, then checks the error
  // words of all devices.
  void WaitAllAndCheck();

  // Registers a program's device-side checks under consecutive process-wide ids and returns
  // the id before the first: the program writes `base + local index` (1-based) into the word.
  int32_t RegisterChecks(std::vector<DeviceCheckReport> reports);
  // The error word of `device` (an s32 scalar buffer, 0 = no error), created on first use.
  std::shared_ptr<pjrt::PjrtBuffer> ErrorWord(int device);
  void SetErrorWord(int device, std::shared_ptr<pjrt::PjrtBuffer> word);
  // Reads the error words (a few bytes each) and raises the first recorded check failure.
  void CheckErrorWords();
  // A checking program that failed (a failed operand, an injected fault) leaves its device's
  // error word failed, and every later checking program would fail with it: where such a
  // failure is raised, the words that finished failed are dropped (fresh ones start at zero).
  void DropFailedErrorWords();

 private:
  PendingWork() = default;
  struct Impl;
  Impl& impl();
};

}  // namespace torch_tpu::exec

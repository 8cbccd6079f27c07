#include "exec/pending_work.h"

#include <c10/util/Exception.h>

#include <deque>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "exec/launch_lock.h"
#include "pjrt/error.h"
#include "runtime/element_types.h"
#include "runtime/metrics.h"
#include "runtime/runtime.h"

namespace torch_tpu::exec {

struct PendingWork::Impl {
  struct Entry {
    pjrt::PjrtEvent event;
    std::shared_ptr<const std::string> description;
  };
  std::mutex mutex;
  std::deque<Entry> events;
  std::string first_error;  // of work already retired from `events`
  std::vector<DeviceCheckReport> checks;
  std::map<int, std::shared_ptr<pjrt::PjrtBuffer>> error_words;
  // Per device, the error word last read as zero: reading it again cannot find a failure.
  std::map<int, std::shared_ptr<pjrt::PjrtBuffer>> words_read_zero;

  // Waits for one entry; returns its failure text (empty when it succeeded).
  static std::string Await(Entry& entry) {
    try {
      entry.event.Await();
      return {};
    } catch (const pjrt::PjrtError& error) {
      return (entry.description ? *entry.description : std::string("a tpu operation")) + ": " +
             error.what();
    }
  }
};

PendingWork& PendingWork::Get() {
  static PendingWork pending;
  return pending;
}

PendingWork::Impl& PendingWork::impl() {
  static Impl* instance = new Impl();  // holds PJRT events: never destroyed (runtime.cc)
  return *instance;
}

void PendingWork::Add(pjrt::PjrtEvent event, std::shared_ptr<const std::string> description) {
  Impl& state = impl();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.events.push_back({std::move(event), std::move(description)});
  // Retire finished work from the front so the list stays short in long eager loops.
  while (state.events.size() > 64 && state.events.front().event.IsReady()) {
    std::string failure = Impl::Await(state.events.front());
    if (state.first_error.empty()) state.first_error = std::move(failure);
    state.events.pop_front();
  }
}

void PendingWork::AddFailure(std::string failure) {
  Impl& state = impl();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.first_error.empty()) state.first_error = std::move(failure);
}

bool PendingWork::AllReady() {
  Impl& state = impl();
  std::lock_guard<std::mutex> lock(state.mutex);
  for (const auto& entry : state.events) {
    if (!entry.event.IsReady()) return false;
  }
  return true;
}

void PendingWork::WaitAllAndCheck() {
  Impl& state = impl();
  std::deque<Impl::Entry> events;
  std::string first_error;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    events.swap(state.events);
    first_error.swap(state.first_error);
  }
  for (auto& entry : events) {
    std::string failure = Impl::Await(entry);
    if (first_error.empty()) first_error = std::move(failure);
  }
  if (!first_error.empty()) {
    DropFailedErrorWords();
    TORCH_CHECK(false, "tpu: an earlier asynchronous device operation failed in ", first_error);
  }
  CheckErrorWords();
}

void PendingWork::DropFailedErrorWords() {
  Impl& state = impl();
  std::map<int, std::shared_ptr<pjrt::PjrtBuffer>> words;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    words = state.error_words;
  }
  for (const auto& [device, word] : words) {
    pjrt::PjrtEvent ready = word->ReadyEvent();
    if (!ready.IsReady()) continue;  // still computing: not known to have failed
    try {
      ready.Await();
    } catch (const pjrt::PjrtError&) {
      std::lock_guard<std::mutex> lock(state.mutex);
      auto current = state.error_words.find(device);
      if (current != state.error_words.end() && current->second == word) {
        state.error_words.erase(current);
      }
    }
  }
}

int32_t PendingWork::RegisterChecks(std::vector<DeviceCheckReport> reports) {
  Impl& state = impl();
  std::lock_guard<std::mutex> lock(state.mutex);
  const auto base = static_cast<int32_t>(state.checks.size());
  for (auto& report : reports) state.checks.push_back(std::move(report));
  return base;
}

std::shared_ptr<pjrt::PjrtBuffer> PendingWork::ErrorWord(int device) {
  Impl& state = impl();
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    auto it = state.error_words.find(device);
    if (it != state.error_words.end()) return it->second;
  }
  const runtime::Runtime& device_runtime = runtime::Runtime::Get();
  const int32_t zero = 0;
  auto transfer = device_runtime.client().BufferFromHost(
      &zero, sizeof(zero), runtime::ToPjrtType(stablehlo::ElementType::kS32), {},
      device_runtime.device(device));
  auto word = std::make_shared<pjrt::PjrtBuffer>(std::move(transfer.buffer));
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.error_words.emplace(device, std::move(word)).first->second;
}

void PendingWork::SetErrorWord(int device, std::shared_ptr<pjrt::PjrtBuffer> word) {
  Impl& state = impl();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.error_words[device] = std::move(word);
}

void PendingWork::CheckErrorWords() {
  Impl& state = impl();
  std::lock_guard<std::mutex> launch(LaunchMutex());
  std::map<int, std::shared_ptr<pjrt::PjrtBuffer>> words;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    // Words no program has replaced since they read as zero are not read again (several host
    // reads after one graph, say).
    for (const auto& [device, word] : state.error_words) {
      auto read = state.words_read_zero.find(device);
      if (read == state.words_read_zero.end() || read->second != word) words[device] = word;
    }
  }
  for (const auto& [device, word] : words) {
    int32_t value = 0;
    try {
      word->CopyToHostNow(&value, sizeof(value));
    } catch (const pjrt::PjrtError&) {
      // The program that computed the word failed; that failure is reported by its event.
      DropFailedErrorWords();
      continue;
    }
    runtime::Metrics::Get().transfer_to_host_bytes += static_cast<int64_t>(sizeof(value));
    if (value == 0) {
      std::lock_guard<std::mutex> lock(state.mutex);
      state.words_read_zero[device] = word;
      continue;
    }
    DeviceCheckReport report;
    {
      std::lock_guard<std::mutex> lock(state.mutex);
      state.error_words.erase(device);  // a fresh zero word is created on next use
      report = state.checks.at(static_cast<size_t>(value) - 1);
    }
    if (report.index_error) {
      TORCH_CHECK_INDEX(false, report.op_description, ": ", report.what,
                        " (detected on the device; the op's result is undefined)");
    }
    TORCH_CHECK(false, report.op_description, ": ", report.what,
                " (detected on the device; the op's result is undefined)");
  }
}

}  // namespace torch_tpu::exec

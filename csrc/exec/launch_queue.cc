#include "exec/launch_queue.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "exec/failed_work.h"
#include "exec/pending_work.h"
#include "exec/program_execution.h"
#include "lowering/dtype.h"
#include "profiler/device_trace.h"

namespace torch_tpu::exec {

using runtime::StorageBuffer;
using runtime::StorageContents;

namespace {

thread_local bool on_worker = false;

// Per slot: whether the program writes it.
std::vector<bool> WrittenSlots(const QueuedLaunch& launch) {
  std::vector<bool> written(launch.slots.size(), false);
  for (const auto& storage : launch.program->written_storages) written[storage.slot] = true;
  return written;
}

// Calls `visit(storage, writes, element type written)` for every storage the launch uses.
template <typename Visit>
void ForEachUse(const QueuedLaunch& launch, Visit visit) {
  const BuiltProgram& program = *launch.program;
  const std::vector<bool> written = WrittenSlots(launch);
  std::vector<stablehlo::ElementType> written_type(launch.slots.size());
  for (const auto& storage : program.written_storages) {
    written_type[storage.slot] = storage.element_type;
  }
  for (size_t s = 0; s < launch.slots.size(); ++s) {
    if (launch.slots[s] != nullptr) visit(launch.slots[s], written[s], written_type[s]);
  }
  for (size_t n = 0; n < launch.new_outputs.size(); ++n) {
    if (StorageBuffer* storage = launch.new_outputs[n]) {
      visit(storage, true,
            lowering::ToElementTypeOrThrow(program.new_outputs[n].dtype, "a queued launch"));
    }
  }
}

// The launch cannot run: what it would have written becomes a failed buffer carrying `failure`,
// so that reading it raises and programs reading it fail, as after a device error.
void FailLaunch(const QueuedLaunch& launch, int device, const std::string& failure) {
  ForEachUse(launch, [&](StorageBuffer* storage, bool writes, stablehlo::ElementType type) {
    if (writes) storage->publish_contents(FailedContents(storage->nbytes(), type, device, failure));
  });
  PendingWork::Get().AddFailure(failure);
}

void Execute(QueuedLaunch& launch, int device) {
  std::string failure;
  if (launch.compile && !launch.compile->Wait()) {
    failure = *launch.description + ": " + launch.compile->error();
  }
  if (failure.empty()) {
    std::vector<StorageSlot> slots;
    slots.reserve(launch.slots.size());
    for (StorageBuffer* storage : launch.slots) {
      slots.push_back({storage, storage ? storage->deferred_contents() : StorageContents{}});
    }
    ReleaseSlotsOnExit release_on_exit{slots};
    try {
      const profiler::CorrelationScope issued_in(launch.profiler_correlation);
      const ProgramInputs inputs{slots, launch.host_scalars, launch.rng_states};
      ProgramRun run = RunProgram(*launch.program, inputs, device, launch.description,
                                  launch.owner, &launch.new_outputs);
      slots.clear();
      PendingWork::Get().Add(std::move(run.done), launch.description);
    } catch (const c10::Error& error) {
      failure = error.what_without_backtrace();
    } catch (const std::exception& error) {
      failure = *launch.description + ": " + error.what();
    }
  }
  if (!failure.empty()) {
    try {
      FailLaunch(launch, device, failure);
    } catch (const std::exception&) {
      // Without even a failed buffer, readers see the old contents; synchronize still raises.
      PendingWork::Get().AddFailure(failure);
    }
  }
  ForEachUse(launch, [](StorageBuffer* storage, bool writes, stablehlo::ElementType) {
    storage->EndQueuedUse(writes);
  });
}

void DrainForStorage() { LaunchQueue::Get().Drain(); }

}  // namespace

struct LaunchQueue::Impl {
  std::mutex mutex;
  std::condition_variable changed;  // a launch was queued or one finished
  std::map<int, std::deque<QueuedLaunch>> queues;
  // Changed under `mutex`; read without it by the checks every launch makes.
  std::atomic<size_t> waiting{0};

  void Work(int device) {
    on_worker = true;
    std::unique_lock<std::mutex> lock(mutex);
    std::deque<QueuedLaunch>& queue = queues[device];
    for (;;) {
      changed.wait(lock, [&] { return !queue.empty(); });
      // A deque's elements stay in place while others are appended.
      QueuedLaunch& launch = queue.front();
      lock.unlock();
      Execute(launch, device);
      // Holds no tensors (whose Python objects would need the GIL to go): freed here.
      launch = QueuedLaunch{};
      lock.lock();
      queue.pop_front();
      --waiting;
      changed.notify_all();
    }
  }
};

LaunchQueue& LaunchQueue::Get() {
  static LaunchQueue* queue = [] {
    runtime::AddMaterializeFunction(&DrainForStorage);
    // Launches still queued at exit run before the runtime goes away.
    std::atexit([] { LaunchQueue::Get().Drain(); });
    return new LaunchQueue();  // never destroyed: workers outlive static destruction
  }();
  return *queue;
}

LaunchQueue::Impl& LaunchQueue::impl() {
  static Impl* instance = new Impl();
  return *instance;
}

bool LaunchQueue::Busy(int device) {
  Impl& state = impl();
  if (state.waiting.load() == 0) return false;
  std::lock_guard<std::mutex> lock(state.mutex);
  auto it = state.queues.find(device);
  return it != state.queues.end() && !it->second.empty();
}

void LaunchQueue::Push(int device, QueuedLaunch launch) {
  if (profiler::Active()) launch.profiler_correlation = profiler::CurrentCorrelation();
  ForEachUse(launch, [](StorageBuffer* storage, bool writes, stablehlo::ElementType type) {
    storage->BeginQueuedUse(writes, type);
  });
  Impl& state = impl();
  std::lock_guard<std::mutex> lock(state.mutex);
  auto [it, inserted] = state.queues.try_emplace(device);
  if (inserted) std::thread([&state, device] { state.Work(device); }).detach();
  it->second.push_back(std::move(launch));
  ++state.waiting;
  state.changed.notify_all();
}

void LaunchQueue::Drain(int device) {
  Impl& state = impl();
  // An empty queue seen here was emptied after its launches published their buffers.
  if (on_worker || state.waiting.load() == 0) return;
  std::unique_lock<std::mutex> lock(state.mutex);
  // Waits for the queues to empty: later launches (other threads') may be waited for too.
  state.changed.wait(lock, [&] {
    if (device >= 0) {
      auto it = state.queues.find(device);
      return it == state.queues.end() || it->second.empty();
    }
    return state.waiting == 0;
  });
}

bool LaunchQueue::Idle() { return impl().waiting.load() == 0; }

size_t LaunchQueue::size() { return impl().waiting.load(); }

}  // namespace torch_tpu::exec

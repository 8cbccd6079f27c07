#include "exec/program_execution.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "exec/eager.h"
#include "exec/failed_work.h"
#include "exec/launch_queue.h"
#include "exec/pending_work.h"
#include "exec/scalar_buffers.h"
#include "exec/tiered_compilation.h"
#include "lowering/dtype.h"
#include "pjrt/error.h"
#include "profiler/device_trace.h"
#include "runtime/device.h"
#include "runtime/fault_injection.h"
#include "runtime/memory_report.h"
#include "runtime/metrics.h"
#include "runtime/program_memory.h"
#include "runtime/runtime.h"
#include "runtime/storage.h"

namespace torch_tpu::exec {
namespace {

using runtime::StorageBuffer;
using runtime::StorageContents;

// The XLA CPU plugin blocks the host when a donated buffer's producer is still running.
bool DonationWaitsForProducer() {
  static const bool waits = runtime::Runtime::Get().client().platform_name() == "cpu";
  return waits;
}

struct LaunchRecord {
  std::shared_ptr<const void> owner;  // keeps the executable's plan alive
  std::shared_ptr<pjrt::PjrtLoadedExecutable> executable;
  std::vector<std::shared_ptr<pjrt::PjrtBuffer>> arguments;
  std::vector<int64_t> aliased_arguments;
  int device = 0;
};
std::atomic<bool> recording_launches{false};
std::mutex recorded_launches_mutex;
// In launch order; bounded, since each record holds its argument buffers.
std::vector<LaunchRecord> recorded_launches;
constexpr size_t kMaxRecordedLaunches = 4096;

std::atomic<bool> capturing_modules{false};
std::mutex capture_mutex;
// (description of the first run, module text); the texts stay alive while their views are keys.
std::vector<std::pair<std::string, std::shared_ptr<const std::string>>> captured_modules;
std::unordered_set<std::string_view> captured_texts;

void CaptureModule(const std::string& description, const std::shared_ptr<const std::string>& text) {
  std::lock_guard<std::mutex> lock(capture_mutex);
  if (!capturing_modules.load(std::memory_order_relaxed) || !text) return;
  if (captured_texts.insert(*text).second) captured_modules.emplace_back(description, text);
}

// Publishes `contents` as `storage`'s next buffer: straight for the launch queue, whose launches
// hold the storage's queued use; after the held-back work using it otherwise.
void Publish(StorageBuffer* storage, StorageContents contents, bool queued) {
  if (queued) {
    storage->publish_contents(std::move(contents));
  } else {
    storage->set_contents(std::move(contents));
  }
}

// A run the device failed with `failure` before it started (an injected execution failure): every
// storage the program writes gets a failed buffer, the device error word stays as it was, and
// the run's event fails, so the failure reaches PendingWork or debug mode's wait as a device
// fault does.
ProgramRun FailedRun(const BuiltProgram& program, const ProgramInputs& inputs, int device,
                     const std::vector<StorageBuffer*>* queued_outputs,
                     const std::string& failure) {
  ProgramRun run;
  if (queued_outputs == nullptr) run.new_tensors = AllocateNewOutputs(program, device);
  for (size_t n = 0; n < program.new_outputs.size(); ++n) {
    StorageBuffer* storage =
        queued_outputs != nullptr ? (*queued_outputs)[n] : StorageOf(run.new_tensors[n]);
    if (storage == nullptr) continue;
    const auto type =
        lowering::ToElementTypeOrThrow(program.new_outputs[n].dtype, "a failed execution");
    Publish(storage, FailedContents(storage->nbytes(), type, device, failure),
            queued_outputs != nullptr);
  }
  for (const auto& written : program.written_storages) {
    if (StorageBuffer* storage = inputs.slots[written.slot].storage) {
      Publish(storage, FailedContents(storage->nbytes(), written.element_type, device, failure),
              queued_outputs != nullptr);
    }
  }
  run.done = FailedEvent(device, failure);
  return run;
}

}  // namespace

StorageBuffer* StorageOf(const at::Tensor& tensor) {
  return static_cast<StorageBuffer*>(tensor.storage().data_ptr().get_context());
}

StridedView ViewOf(const at::Tensor& tensor) {
  return StridedView{tensor.sizes().vec(), tensor.strides().vec(), tensor.storage_offset()};
}

void BeginModuleCapture() {
  LaunchQueue::Get().Drain();  // launches issued before the capture run before it
  std::lock_guard<std::mutex> lock(capture_mutex);
  TORCH_CHECK(!capturing_modules.load(), "a module capture is already open in this process");
  captured_modules.clear();
  captured_texts.clear();
  capturing_modules = true;
}

std::vector<CapturedModule> EndModuleCapture() {
  LaunchQueue::Get().Drain();  // queued launches run (and are captured) first
  std::lock_guard<std::mutex> lock(capture_mutex);
  capturing_modules = false;
  std::vector<CapturedModule> result;
  result.reserve(captured_modules.size());
  for (const auto& [description, text] : captured_modules) result.push_back({description, *text});
  captured_texts.clear();
  captured_modules.clear();
  return result;
}

int64_t NewOutputBytes(const BuiltProgram& program) {
  int64_t bytes = 0;
  for (const auto& output : program.new_outputs) {
    int64_t elements = 1;
    for (const int64_t size : output.sizes) elements *= size;
    bytes += elements * static_cast<int64_t>(c10::elementSize(output.dtype));
  }
  return bytes;
}

std::vector<at::Tensor> AllocateNewOutputs(const BuiltProgram& program, int device) {
  std::vector<at::Tensor> tensors;
  tensors.reserve(program.new_outputs.size());
  runtime::DeviceScope allocation_device(device);
  c10::Allocator* allocator = c10::GetAllocator(c10::DeviceType::PrivateUse1);
  for (const auto& output : program.new_outputs) {
    tensors.push_back(at::detail::empty_strided_generic(
        output.sizes, output.strides, allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
        output.dtype));
  }
  return tensors;
}

ProgramRun RunProgram(const BuiltProgram& program, const ProgramInputs& inputs, int device,
                      const std::shared_ptr<const std::string>& described,
                      std::shared_ptr<const void> owner,
                      const std::vector<StorageBuffer*>* queued_outputs) {
  if (queued_outputs == nullptr) LaunchQueue::Get().Drain(device);
  const std::string& description = *described;
  // Buffers published below are described as this program's; allocation failures name it.
  const runtime::ProducerScope producer(described);
  const Executable& executable =
      program.tiers ? program.tiers->ForRun(program.executable) : program.executable;
  if (executable->MarkFirstRun()) runtime::RecordProgramMemory(executable, description);
  const pjrt::PjrtDevice& pjrt_device = runtime::Runtime::Get().device(device);
  if (capturing_modules.load(std::memory_order_relaxed))
    CaptureModule(description, program.module_text);
  // Every argument as a buffer we hold, so a recorded launch can replay it.
  c10::SmallVector<std::shared_ptr<pjrt::PjrtBuffer>, 8> buffers;
  for (const ProgramArgument& argument : program.arguments) {
    switch (argument.kind) {
      case ProgramArgument::Kind::kStorage:
        buffers.push_back(inputs.slots[argument.index].contents.buffer);
        break;
      case ProgramArgument::Kind::kRuntimeScalar:
        buffers.push_back(ScalarBuffers::Get().Buffer(device, inputs.host_scalars[argument.index]));
        break;
      case ProgramArgument::Kind::kRngState: {
        const auto [seed, offset] = inputs.rng_states[argument.index];
        buffers.push_back(ScalarBuffers::Get().RngState(device, seed, offset));
        break;
      }
      case ProgramArgument::Kind::kErrorWord:
        buffers.push_back(PendingWork::Get().ErrorWord(device));
        break;
      case ProgramArgument::Kind::kCheckBase: {
        HostScalar base{stablehlo::ElementType::kS32, {}, sizeof(int32_t)};
        std::memcpy(base.bytes, &program.check_base, sizeof(int32_t));
        buffers.push_back(ScalarBuffers::Get().Buffer(device, base));
        break;
      }
    }
  }
  c10::SmallVector<PJRT_Buffer*, 8> arguments;
  for (const auto& buffer : buffers) arguments.push_back(buffer->get());
  if (recording_launches.load(std::memory_order_relaxed)) {
    LaunchRecord record{
        std::move(owner), executable, {buffers.begin(), buffers.end()}, {}, device};
    for (const auto& written : program.written_storages) {
      if (written.aliased_argument >= 0) {
        record.aliased_arguments.push_back(written.aliased_argument);
      }
    }
    std::lock_guard<std::mutex> record_lock(recorded_launches_mutex);
    if (recorded_launches.size() < kMaxRecordedLaunches) {
      recorded_launches.push_back(std::move(record));
    }
  }

  // Donate a written storage's old buffer when only the storage (and this run) hold it. On the
  // CPU plugin only once the buffer is ready: a queued chain of in-place updates of one tensor
  // stays asynchronous, and updates of finished values (optimizer steps) still donate.
  c10::SmallVector<int64_t, 4> non_donatable;
  c10::SmallVector<std::pair<const pjrt::PjrtBuffer*, size_t>, 4> donated;
  for (const auto& written : program.written_storages) {
    if (written.aliased_argument < 0) continue;
    const StorageSlot& slot = inputs.slots[written.slot];
    // Held by the storage, the slot and `buffers`.
    if (slot.contents.buffer.use_count() == 3 &&
        (!DonationWaitsForProducer() || slot.contents.buffer->ReadyEvent().IsReady())) {
      donated.emplace_back(slot.contents.buffer.get(), slot.storage->nbytes());
    } else {
      non_donatable.push_back(written.aliased_argument);
    }
  }

  if (runtime::MemoryLimit(device) > 0) {
    // Under a memory limit, a run that would pass it fails here, before anything is donated or
    // written: the new outputs (unless allocated when the launch was queued), the written
    // storages' new buffers that cannot reuse the old ones, and the compiler's temporaries.
    int64_t needed = executable->temporary_bytes();
    if (queued_outputs == nullptr) needed += NewOutputBytes(program);
    for (const auto& written : program.written_storages) {
      const StorageSlot& slot = inputs.slots[written.slot];
      const bool reused = std::any_of(donated.begin(), donated.end(), [&](const auto& entry) {
        return entry.first == slot.contents.buffer.get();
      });
      // A storage without a buffer yet counts as allocated already; one whose old buffer is not
      // donated holds both while the run lasts.
      if (!reused && slot.storage != nullptr && slot.contents.buffer != nullptr) {
        needed += static_cast<int64_t>(slot.storage->nbytes());
      }
    }
    runtime::CheckProgramFits(device, needed, description);
  }
  if (runtime::ShouldInjectFailure(runtime::FaultSite::kExecute)) {
    return FailedRun(program, inputs, device, queued_outputs,
                     runtime::InjectedFailureMessage(runtime::FaultSite::kExecute));
  }
  // Allocated before the run, so that an allocation that fails leaves every tensor as it was.
  ProgramRun run;
  if (queued_outputs == nullptr) run.new_tensors = AllocateNewOutputs(program, device);
  pjrt::ExecutionResult execution;
  const int64_t profiled_since = profiler::Active() ? profiler::NowNs() : 0;
  try {
    execution = executable->Execute(
        std::span<PJRT_Buffer* const>(arguments.data(), arguments.size()), &pjrt_device,
        std::span<const int64_t>(non_donatable.data(), non_donatable.size()));
  } catch (const pjrt::PjrtError& error) {
    if (error.code() == PJRT_Error_Code_RESOURCE_EXHAUSTED) {
      const runtime::MemoryCapacity capacity = runtime::QueryMemoryCapacity(device);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "tpu out of memory in ", description, " (",
                       runtime::FormatBytes(NewOutputBytes(program)), " of outputs and ",
                       runtime::FormatBytes(executable->temporary_bytes()),
                       " of temporaries; tpu:", device, " has ",
                       runtime::FormatBytes(capacity.free_bytes), " free of ",
                       runtime::FormatBytes(capacity.total_bytes), "): ", error.what(),
                       runtime::OutOfMemoryDetails(device));
    }
    TORCH_CHECK(false, description, ": ", error.what());
  }
  ++runtime::Metrics::Get().execute_count;
  if (profiled_since != 0) {
    profiler::RecordExecution(description, device, profiled_since, execution.done);
  }
  for (const auto& [buffer, nbytes] : donated) {
    if (buffer->IsDeleted()) {
      runtime::UncountDonatedBuffer(buffer);
      ++runtime::Metrics::Get().donated_buffers;
      runtime::Metrics::Get().donated_bytes += static_cast<int64_t>(nbytes);
    }
  }

  auto publish = [&](StorageBuffer* storage, StorageContents contents) {
    Publish(storage, std::move(contents), queued_outputs != nullptr);
  };
  for (size_t n = 0; n < program.new_outputs.size(); ++n) {
    if (StorageBuffer* storage = queued_outputs != nullptr ? (*queued_outputs)[n]
                                                           : StorageOf(run.new_tensors[n])) {
      publish(storage, StorageContents{
                           std::make_shared<pjrt::PjrtBuffer>(std::move(execution.outputs[n])),
                           lowering::ToElementTypeOrThrow(program.new_outputs[n].dtype,
                                                          description.c_str())});
    }
  }
  size_t output_index = program.new_outputs.size();
  for (const auto& written : program.written_storages) {
    auto& output = execution.outputs[output_index++];
    if (StorageBuffer* storage = inputs.slots[written.slot].storage) {
      publish(storage, StorageContents{std::make_shared<pjrt::PjrtBuffer>(std::move(output)),
                                       written.element_type});
    }
  }
  if (program.error_word_argument >= 0) {
    PendingWork::Get().SetErrorWord(
        device, std::make_shared<pjrt::PjrtBuffer>(std::move(execution.outputs[output_index])));
  }
  // Outputs and written buffers count from here; the temporaries join them while the run lasts.
  runtime::CountProgramTemporaries(device, executable->temporary_bytes());
  run.done = std::move(execution.done);
  return run;
}

void SignStorageSlots(std::span<const StorageSlot> slots, ProgramSignature& signature) {
  for (const auto& slot : slots) {
    signature.AddTag(SignatureTag::kStorage);
    signature.Add(static_cast<int64_t>(slot.storage ? slot.storage->nbytes() : 0));
    signature.Add(slot.contents.initialized() ? static_cast<int64_t>(slot.contents.element_type)
                                              : -1);
  }
  signature.AddTag(SignatureTag::kChecks);
  signature.Add(DeviceChecksEnabled());
}

void CompleteRun(pjrt::PjrtEvent done, const BuiltProgram& program,
                 std::shared_ptr<const std::string> description) {
  if (CurrentExecutionMode() == ExecutionMode::kDebug) {
    try {
      done.Await();
    } catch (const pjrt::PjrtError& error) {
      PendingWork::Get().DropFailedErrorWords();
      TORCH_CHECK(false, *description, ": device execution failed: ", error.what());
    }
    if (program.error_word_argument >= 0) PendingWork::Get().CheckErrorWords();
  } else {
    PendingWork::Get().Add(std::move(done), std::move(description));
  }
}

void SetLaunchRecording(bool enabled) {
  LaunchQueue::Get().Drain();  // launches issued before the switch are not recorded after it
  recording_launches = enabled;
  std::lock_guard<std::mutex> lock(recorded_launches_mutex);
  recorded_launches.clear();
}

size_t RecordedLaunchCount() {
  LaunchQueue::Get().Drain();
  std::lock_guard<std::mutex> lock(recorded_launches_mutex);
  return recorded_launches.size();
}

double ReplayRecordedLaunches(int number) {
  LaunchQueue::Get().Drain();  // the last launches may still be queued
  std::vector<LaunchRecord> records;
  {
    std::lock_guard<std::mutex> lock(recorded_launches_mutex);
    records = recorded_launches;
  }
  TORCH_CHECK(!records.empty(), "ReplayRecordedLaunches: no launch recorded");
  std::vector<std::vector<PJRT_Buffer*>> arguments(records.size());
  for (size_t r = 0; r < records.size(); ++r) {
    for (const auto& buffer : records[r].arguments) arguments[r].push_back(buffer->get());
  }
  std::vector<pjrt::PjrtEvent> done;
  done.reserve(records.size());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < number; ++i) {
    for (size_t r = 0; r < records.size(); ++r) {
      const pjrt::PjrtDevice& device = runtime::Runtime::Get().device(records[r].device);
      // The replayed inputs must survive, so nothing is donated.
      auto execution = records[r].executable->Execute(std::span<PJRT_Buffer* const>(arguments[r]),
                                                      &device, records[r].aliased_arguments);
      done.push_back(std::move(execution.done));
    }
    // One sequence is one step, and the steps measured synchronize at their end: a sequence
    // does not overlap the next (on a CPU device, independent executions would run side by
    // side and the floor would be a throughput, below any synchronized step's time).
    for (auto& event : done) event.Await();
    done.clear();
  }
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / std::max(number, 1);
}

}  // namespace torch_tpu::exec

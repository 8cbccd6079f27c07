// Running a built program over storages — the one place that binds arguments, donates the buffers
// it overwrites, executes on a device, publishes written storages and the device error word, and
// wraps new outputs as tensors. Eager launches and compiled graphs both run their programs here.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "exec/program_builder.h"
#include "exec/program_signature.h"
#include "exec/scalar_buffers.h"
#include "pjrt/event.h"
#include "runtime/storage_buffer.h"

namespace torch_tpu::exec {

// A storage as the program sees it: the contents read when the run was prepared.
// The StorageBuffer behind a tpu tensor's storage (its DataPtr context; null for zero bytes).
runtime::StorageBuffer* StorageOf(const at::Tensor& tensor);
// How a tensor views its storage: sizes, strides and offset.
StridedView ViewOf(const at::Tensor& tensor);

struct StorageSlot {
  runtime::StorageBuffer* storage;
  runtime::StorageContents contents;
};

// Adds what a program depends on besides its operands' views: each storage's size and what
// its buffer holds (a program reads an uninitialized storage as zeros), and whether device-side
// checks are compiled in.
void SignStorageSlots(std::span<const StorageSlot> slots, ProgramSignature& signature);

// However a launch ends, it must not keep storages' old buffers alive (memory accounting,
// donation of the next write).
struct ReleaseSlotsOnExit {
  std::vector<StorageSlot>& slots;
  ~ReleaseSlotsOnExit() { slots.clear(); }
};

struct ProgramInputs {
  std::span<const StorageSlot> slots;
  std::span<const HostScalar> host_scalars;
  std::span<const std::pair<uint64_t, uint64_t>> rng_states;  // (seed, offset) per draw
};

struct ProgramRun {
  std::vector<at::Tensor> new_tensors;  // in BuiltProgram::new_outputs order
  pjrt::PjrtEvent done;
};

// Executes `program` on `device`. The caller holds LaunchMutex() since it read the slots'
// contents, and keeps holding it until this returns: written storages get their new buffers here;
// launches queued on the device (exec/launch_queue.h) run first.
// `description` names the program (the op or graph) in errors, in memory reports and on the
// buffers it produces. `owner` keeps the program alive when launch recording is on (see
// SetLaunchRecording).
// The launch queue itself passes `queued_outputs`: the storages of the new tensors it handed out
// when the launch was issued (null: zero bytes), which take the new outputs (the run's
// new_tensors stay empty); storages then get their buffers without waiting.
ProgramRun RunProgram(const BuiltProgram& program, const ProgramInputs& inputs, int device,
                      const std::shared_ptr<const std::string>& description,
                      std::shared_ptr<const void> owner,
                      const std::vector<runtime::StorageBuffer*>* queued_outputs = nullptr);

// Bytes of the program's new outputs.
int64_t NewOutputBytes(const BuiltProgram& program);

// New tensors (no buffers yet) for the program's new outputs, on `device`.
std::vector<at::Tensor> AllocateNewOutputs(const BuiltProgram& program, int device);

// After the launch lock is released: debug mode waits for the run and checks the device error
// word; strict mode queues the completion for the next synchronization.
void CompleteRun(pjrt::PjrtEvent done, const BuiltProgram& program,
                 std::shared_ptr<const std::string> description);

// Measures the floor under eager and compiled execution: with recording on, each run keeps its
// program and argument buffers, in launch order (switching recording on or off forgets them);
// ReplayRecordedLaunches executes that sequence `number` times straight through PJRT (no
// PyTorch, no signature, no binding, nothing donated), each time waiting for it to finish
// before the next, and returns seconds per sequence: the device time of a synchronized step
// whose launches were recorded.
void SetLaunchRecording(bool enabled);
size_t RecordedLaunchCount();
double ReplayRecordedLaunches(int number);

// Module capture: between BeginModuleCapture and EndModuleCapture every program that runs (eager
// ops, fused graphs, torch.compile graphs; from any thread) is recorded with the description of
// its first run ("aten::add.Tensor(...)", "compiled graph 3(...)"), once per distinct module, in
// first-run order. Recording at run time rather than at build time sees programs that were built
// (and cached) before the capture began. One capture at a time.
struct CapturedModule {
  std::string description;
  std::string text;
};
void BeginModuleCapture();
std::vector<CapturedModule> EndModuleCapture();

}  // namespace torch_tpu::exec

// One program builder for every execution path: "a program from a sequence of lowered ops over
// storage views". Eager mode calls it with one op; fused and compiled paths with many.
//
// Storages enter as slots. Operands are read through their views of a slot's flat buffer; results
// are written into views (the slot's next buffer) or become new outputs. A slot's old buffer is a
// program argument only when something reads it, so a write that replaces a whole storage never
// waits for (or fails with) the buffer it overwrites, and a written storage's argument is aliased
// with its output so the executor can donate it.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "exec/pending_work.h"
#include "exec/view_io.h"
#include "lowering/context.h"
#include "pjrt/executable.h"
#include "runtime/runtime.h"
#include "stablehlo/module.h"

namespace torch_tpu::exec {

class ProgramTiers;

// What the program knows about a storage: its size and what its current buffer holds.
struct StorageSlotInfo {
  size_t nbytes = 0;
  bool initialized = false;  // false: never written, reads as zeros
  stablehlo::ElementType element_type = stablehlo::ElementType::kU8;
};

// One argument of a built program, in order.
struct ProgramArgument {
  enum class Kind { kStorage, kRuntimeScalar, kRngState, kErrorWord, kCheckBase };
  Kind kind;
  int index;  // slot, runtime scalar or rng state number
};

struct BuiltProgram {
  std::shared_ptr<pjrt::PjrtLoadedExecutable> executable;
  // A program compiled at the quick tier: which executable each run takes
  // (exec/tiered_compilation.h); null when `executable` is optimized.
  std::shared_ptr<ProgramTiers> tiers;
  // The StableHLO it was compiled from, kept so a module capture (program_execution.h) can hand
  // the exact program to another compiler (ahead-of-time compilation for TPU targets).
  std::shared_ptr<const std::string> module_text;
  std::vector<ProgramArgument> arguments;
  // Outputs in order: new tensors, then written storages, then the error word when present.
  struct NewOutput {
    c10::ScalarType dtype;
    std::vector<int64_t> sizes;
    std::vector<int64_t> strides;
  };
  std::vector<NewOutput> new_outputs;
  struct WrittenStorage {
    int slot;
    stablehlo::ElementType element_type;
    int aliased_argument;  // argument whose buffer the output may reuse (donation), or -1
  };
  std::vector<WrittenStorage> written_storages;
  int error_word_argument = -1;  // >= 0 when the program updates the device error word
  // The program's device-side checks; a failing one writes `check_base + its 1-based index` into
  // the error word. The base is an argument, not a constant, so that the module (and its cache
  // key) is the same whichever checks this process registered before.
  std::vector<DeviceCheckReport> device_checks;
  int32_t check_base = 0;
};

class ProgramBuilder {
 public:
  explicit ProgramBuilder(std::vector<StorageSlotInfo> slots);

  stablehlo::FunctionBuilder& builder() { return module_.main(); }

  // The whole flat buffer of slot `slot` as `type` elements.
  stablehlo::Value Flat(int slot, stablehlo::ElementType type) { return SlotValue(slot, type); }
  // The view of slot `slot` read as `type` elements.
  stablehlo::Value Read(int slot, stablehlo::ElementType type, const StridedView& view);
  // Writes `values` (the view's sizes, `type` elements) into the view.
  void Write(int slot, stablehlo::ElementType type, const StridedView& view,
             stablehlo::Value values);
  // The next runtime scalar (0-d) and random state (u64[2]) arguments.
  stablehlo::Value RuntimeScalar(stablehlo::ElementType type);
  stablehlo::Value RngState();
  // A result that becomes a new tensor with `strides` (a dense layout: a permutation of the
  // contiguous strides of `value`'s shape).
  void AddNewOutput(stablehlo::Value value, c10::ScalarType dtype, std::vector<int64_t> strides);
  // A new tensor's flat buffer as it is (its storage holds `flat`'s elements), for a tensor
  // allocated with `sizes` and `strides`.
  void AddNewFlatOutput(stablehlo::Value flat, c10::ScalarType dtype, std::vector<int64_t> sizes,
                        std::vector<int64_t> strides);
  // Replaces the whole contents of `slot` with `value` laid out with `strides` (a dense layout,
  // as for AddNewOutput): a fused graph's new result kept in the storage it was recorded with.
  void WriteDense(int slot, stablehlo::Value value, const std::vector<int64_t>& strides);
  // Replaces the whole contents of `slot` with `flat`, a 1-d value of the storage's size.
  void WriteFlat(int slot, stablehlo::Value flat);
  // The slot's writes are not returned (nothing can read the storage any more).
  void Discard(int slot) { slots_[slot].written = false; }
  // Folds the op's device-side checks into the device error word; `op_description` names the op
  // and its inputs in the error raised when one fails.
  void AddDeviceChecks(const std::vector<lowering::LoweringContext::DeviceCheck>& checks,
                       const std::string& op_description);

  // Finishes the module (no ops can follow) and returns the slots whose incoming buffer the
  // program takes as an argument but never uses (an in-place fill reads only its target's
  // shape). Rebuilding with those slots marked unread keeps a failed or pending old buffer from
  // holding up the program.
  std::vector<int> Finish();
  // Compiles the finished module (through the executable cache) at `tier`.
  BuiltProgram Compile(runtime::CompileTier tier = runtime::CompileTier::kOptimized);
  // Compile without the compiling: the program (no executable yet) and the module to compile,
  // for a caller that compiles elsewhere (exec/compile_pool.h).
  struct Uncompiled {
    BuiltProgram program;
    stablehlo::Module module;
  };
  Uncompiled TakeUncompiled();

 private:
  stablehlo::Value SlotValue(int slot, stablehlo::ElementType type);
  // `value` as the flat buffer of a tensor with `strides`.
  stablehlo::Value PhysicalFlat(stablehlo::Value value, const std::vector<int64_t>& strides);

  struct Slot {
    StorageSlotInfo info;
    stablehlo::Value value;  // current flat value inside the program; invalid until used
    int argument = -1;       // program argument index of the incoming buffer
    bool written = false;
  };
  stablehlo::Module module_;
  std::vector<Slot> slots_;
  BuiltProgram program_;
  std::vector<stablehlo::Value> new_output_values_;
  int next_runtime_scalar_ = 0;
  int next_rng_state_ = 0;
  int argument_count_ = 0;
  stablehlo::Value error_word_;
  stablehlo::Value check_base_;
};

// Builds a program with `emit` (which adds everything but Finish) over `slots` and compiles it;
// when some storage's buffer turns out unused, builds once more with that slot unread, so that a
// pending or failed old buffer never holds up (or fails) a program that does not need it.
BuiltProgram BuildProgram(std::vector<StorageSlotInfo> slots,
                          const std::function<void(ProgramBuilder&)>& emit,
                          runtime::CompileTier tier = runtime::CompileTier::kOptimized);
// The same, not compiled: the caller compiles the module (exec/program_issue.h).
ProgramBuilder::Uncompiled BuildUncompiledProgram(
    std::vector<StorageSlotInfo> slots, const std::function<void(ProgramBuilder&)>& emit);

// Dimensions ordered from outermost to innermost by stride (ties keep the original order, so a
// contiguous layout maps to the identity).
std::vector<int64_t> OuterToInnerOrder(const std::vector<int64_t>& strides);

// Contiguous strides of `sizes` after ordering dimensions like `strides` does (the layout
// PyTorch gives a result that follows its inputs); `strides` of another rank gives contiguous.
std::vector<int64_t> DenseStridesLike(const std::vector<int64_t>& sizes,
                                      const std::vector<int64_t>& strides);

}  // namespace torch_tpu::exec

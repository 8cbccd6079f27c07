// Internals shared by the files of an eager launch (eager.cc, launch_*.cc, growing_launch.cc,
// deferred_recording.cc): the plan, snapshot and growing-candidate records, and small helpers.
// Not for use outside exec/.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "exec/compile_pool.h"
#include "exec/eager.h"
#include "exec/growing_shapes.h"
#include "exec/program_builder.h"
#include "exec/program_execution.h"
#include "exec/program_signature.h"
#include "exec/scalar_buffers.h"
#include "exec/view_io.h"
#include "runtime/storage_buffer.h"

namespace torch_tpu::exec {

namespace launch_internals {

// "aten::add.Tensor(f32[3, 4], f32[4], 1.0)": the op and its inputs, for error messages.
std::string Describe(std::string_view op, const std::vector<c10::IValue>& operands);
// Whether any tensor operand is complex.
bool HasComplexTensor(const std::vector<c10::IValue>& operands);
// A lowering failed to build. The builder rejects complex operands exactly where a lowering has
// no complex path: that is CPU's NotImplementedError for a dtype its kernel lacks.
[[noreturn]] void RaiseLoweringFailure(std::string_view op,
                                       const std::vector<c10::IValue>& operands,
                                       const std::exception& error);

}  // namespace launch_internals

// A compiled program plus how to bind its arguments and use its results.
struct EagerLaunch::Plan {
  BuiltProgram program;  // its executable is set once `compile` is done
  std::shared_ptr<CompileJob> compile;  // null when compiled on the launching thread
  std::vector<int> result_new_index;  // per lowering result: index in new_outputs, or -1
  std::shared_ptr<const std::string> description;
  // A bucketed program (exec/growing_shapes.h): new outputs are allocated at the bucket's sizes
  // and then take their real sizes, which follow the model; null for exact programs.
  std::shared_ptr<const GrowingModel> growing;
};

// The family of a launch that missed the plan cache, and what it takes to share a program.
struct EagerLaunch::GrowingCandidate {
  ProgramSignature family;
  std::vector<int64_t> numbers;
  std::vector<bool> is_size;
  std::optional<GrowingFit> fit;
  ProgramSignature key;  // of the bucketed program, when `fit`
  std::optional<GrowingPadding> padding;  // for growing sizes; none: sizes must stay fixed
  uint64_t recorded_launch = 0;  // once recorded as an exact launch (EagerLaunch::RecordExact)
};

// One result of a bucketed lowering: its flat buffer at the bucket's element count (the real
// elements laid out densely with `strides` for the real sizes, then padding), its dtype, and its
// sizes and dense strides at the bucket's sizes.
struct EagerLaunch::GrowingResult {
  stablehlo::Value flat;
  c10::ScalarType dtype;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
};

// Storages (each once even when several operands view it) and runtime scalars of one launch.
struct EagerLaunch::Snapshot {
  std::vector<StorageSlot> slots;
  std::vector<int> tensor_slots;  // slot of every tensor operand/list element, in order
  std::vector<int> destination_slots;
  std::vector<HostScalar> host_scalars;
  ProgramSignature signature;
  // Defer-and-fuse records storages without their buffers (the graph takes those) and needs
  // each slot's StorageImpl to follow its lifetime.
  bool read_contents = true;
  std::vector<c10::StorageImpl*> storage_impls;

  int SlotOf(const at::Tensor& tensor) {
    runtime::StorageBuffer* storage = StorageOf(tensor);
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i].storage == storage) return static_cast<int>(i);
    }
    if (read_contents) {
      slots.push_back(
          StorageSlot{storage, storage ? storage->launch_contents() : runtime::StorageContents{}});
    } else {
      slots.push_back(StorageSlot{storage, runtime::StorageContents{}});
      storage_impls.push_back(tensor.storage().unsafeGetStorageImpl());
    }
    return static_cast<int>(slots.size()) - 1;
  }
  void Clear() {
    slots.clear();
    tensor_slots.clear();
    destination_slots.clear();
    host_scalars.clear();
    storage_impls.clear();
  }
};

}  // namespace torch_tpu::exec

// Defer-and-fuse eager mode: lowered ops are recorded into a pending graph instead of being
// launched, and the graph runs as ONE program at a materialization point (a host read, a buffer
// that some code needs, synchronize(), a CPU fallback, a mode switch, a size limit).
//
// The graph works over storage slots exactly like a one-op eager program (exec/program_builder.h):
// a storage enters the graph once, with the buffer it held then; ops read and write it through
// their views, so views, in-place ops and ops on storages written earlier in the graph compose as
// in strict mode. New results get fresh storages that the graph fills. A storage the graph
// references is marked (runtime::StorageBuffer::Deferred): reading a pending buffer or replacing
// a buffer the graph read runs the graph first. At the cut only storages still alive become
// program outputs, so dead intermediates never reach memory; written storages donate their old
// buffers as in strict mode.
//
// The graph's signature is accumulated while recording (each op's eager signature, its slots'
// numbers in the graph, each storage's state when it entered), so a training loop's repeated
// graphs find their compiled program (in the shared plan cache, exec/plan_cache.h) without
// rebuilding it. Python scalars and random states stay runtime arguments.
//
// The recorded ops have returned their results already, so a graph that fails to build, compile
// or run cannot raise at them: every storage it would have written gets a failed buffer carrying
// the error (exec/failed_work.h), and the error is raised at the next synchronization.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "exec/eager.h"
#include "exec/growing_shapes.h"
#include "exec/program_builder.h"
#include "exec/program_execution.h"
#include "exec/program_signature.h"
#include "exec/scalar_buffers.h"

namespace torch_tpu::exec {

// The new (not written back) results of a deferred op, known from its signature alone.
struct DeferredResults {
  std::vector<int> result_new_index;  // per lowering result: index among the new ones, or -1
  std::vector<BuiltProgram::NewOutput> new_results;  // a bucketed op's: at the bucket's sizes
  // A bucketed op (exec/growing_shapes.h): its results' real sizes follow this line; null for
  // an exact op.
  std::shared_ptr<const GrowingModel> growing;
};

class DeferredGraph {
 public:
  static DeferredGraph& Get();

  // What one recorded op brings, in the op's own slot numbering (as its eager snapshot has it).
  struct OpRecord {
    const ProgramSignature& signature;
    std::span<const StorageSlot> slots;
    std::span<c10::StorageImpl* const> storage_impls;
    std::span<const int> tensor_slots;
    std::span<const int> destination_slots;
    std::span<const HostScalar> host_scalars;
    std::shared_ptr<const DeferredResults> results;
    std::span<const at::Tensor> new_tensors;  // per new result
    // A bucketed op: its line, bucket and symbol (the first of `host_scalars`), and how its
    // operands are padded; null for an exact op.
    const GrowingFit* growing = nullptr;
    GrowingPadding padding = GrowingPadding::kEdge;
  };
  // Appends `launch` (taken over, kept as geometry only) to the pending graph of `device`.
  void Record(EagerLaunch&& launch, const lowering::LoweringFunction& function, int device,
              const OpRecord& record);

  // Runs the pending graph, if any, as one program; `reason` is counted in
  // metrics()["fuse_cuts"]. A call from inside the graph's own run (publishing its buffers)
  // does nothing.
  void Flush(const char* reason);
  bool empty() const { return op_count_.load(std::memory_order_acquire) == 0; }
  // The pending graph's first op with growing sizes, which later ops align their buckets with
  // (exec/growing_shapes.h); none before one is recorded.
  std::optional<GrowingReference> growing_reference() const;

  std::map<std::string, int64_t> cut_reasons() const;
  void ResetCutReasons();

 private:
  DeferredGraph() = default;
  struct Op;
  struct Slot;
  struct Plan;
  struct Pending;
  void FlushLocked(const char* reason);
  std::shared_ptr<const Plan> BuildPlan(const Pending& pending,
                                        const std::vector<bool>& alive) const;
  // "a fused graph of 3 ops (aten::mul.Tensor, aten::add.Tensor, aten::sum)", for errors.
  static std::string Describe(const Pending& graph);
  // The graph failed with `failure`: every live storage it writes gets a failed buffer, and the
  // failure waits for the next synchronization.
  static void FailWrites(const Pending& graph, const std::vector<bool>& alive,
                         const std::string& failure);
  int SlotFor(c10::StorageImpl* impl, runtime::StorageBuffer* storage);

  mutable std::mutex mutex_;
  std::unique_ptr<Pending> pending_;
  std::atomic<size_t> op_count_{0};
  mutable std::mutex reasons_mutex_;
  std::map<std::string, int64_t> cut_reasons_;
};

}  // namespace torch_tpu::exec

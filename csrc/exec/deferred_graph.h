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
// A graph that ran is remembered as a step (exec/deferred_replay.cc). When the next graph's first
// op is that step's first op, the graph follows the step: each arriving op is checked against the
// step's next op (its signature, and the graph's numbering of its storages) and keeps only its
// runtime scalars and random states, and the cut runs the step's program with no lookup. An op
// that differs ends the replay: the ops followed so far become ordinary recorded ops (the step's,
// with this graph's scalars) and recording goes on exactly.
//
// The recorded ops have returned their results already, so a graph that fails to build, compile
// or run cannot raise at them: every storage it would have written gets a failed buffer carrying
// the error (exec/failed_work.h), and the error is raised at the next synchronization.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/FunctionRef.h>
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

// Whether graphs may follow steps seen before (TORCH_TPU_FUSE_REPLAY=0 turns it off at start;
// switching it at run time serves comparisons, benchmarks/defer_fuse.py).
bool FuseReplayEnabled();
void SetFuseReplay(bool enabled);

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
    // From Expect(): the op is the next op of the step the graph follows.
    uint64_t replay_ticket = 0;
    // A bucketed op's exact signature (`signature` is its bucket's), which a later graph's op
    // at the same sizes is matched against; null for an exact op.
    const ProgramSignature* exact_signature = nullptr;
  };
  // When the pending graph follows a step seen before (or would start following one) and
  // `op_signature` is that step's next op: the op's results as the step recorded them, and a
  // ticket for its OpRecord. Else empty. The results follow from the signature alone, so they
  // stay right even when another thread's op makes the ticket stale.
  struct Expectation {
    std::shared_ptr<const DeferredResults> results;
    uint64_t ticket = 0;
    // The step's op was bucketed (exec/growing_shapes.h): its bucket's signature, fit and
    // padding, which the op takes as it did then.
    std::optional<ProgramSignature> bucket_signature;
    std::optional<GrowingFit> growing;
    GrowingPadding padding = GrowingPadding::kEdge;
  };
  Expectation Expect(const ProgramSignature& op_signature, int device);
  // The same for an op taking its bucketed form (exec/growing_shapes.h) under
  // `bucket_signature`, which Expect's exact signature missed: another length of a growing
  // sequence follows a step whose op took the same bucket, so generation steps replay from token
  // to token. The op's results are the step's; its own fit (its length) goes in its OpRecord.
  Expectation ExpectBucketed(const ProgramSignature& bucket_signature, int device);
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
  struct Step;
  void FlushLocked(const char* reason);
  // Expect's lookup: `matches(step, index)` says whether the arriving op is op `index` of
  // `step`; steps a new graph may start following are found by `first_hash`. `step_fit`: a
  // bucketed op takes the step's bucket signature and fit (it has the step op's exact sizes).
  Expectation ExpectMatching(uint64_t first_hash, int device, bool step_fit,
                             c10::function_ref<bool(const Step&, size_t)> matches);
  // Runs `graph` with `plan` (its storages' liveness in `alive`); a failure fails its writes
  // and returns false.
  bool RunLocked(Pending& graph, const std::vector<bool>& alive,
                 const std::shared_ptr<const Plan>& plan);
  // Replay (exec/deferred_replay.cc). Sizes `graph`'s lists for following `step` to its end.
  static void ReserveForReplay(Pending& graph, const Step& step);
  // The recorded op is the followed step's next op. `known_slots`: each of the record's
  // storages' slot in the graph, -1 for one the graph has not taken in.
  void RecordReplayed(const OpRecord& record, const EagerLaunch& launch,
                      std::span<const int> known_slots);
  // Whether `record` numbers its storages and results as the step's next op does.
  bool FollowsStep(const OpRecord& record, std::span<const int> known_slots) const;
  // `graph` stops following its step: the ops followed so far become recorded ops. `kind` is
  // counted in metrics()["fused_replay_divergences"].
  void Diverge(Pending& graph, const char* kind);
  // A graph that ran (its signature's first `recorded_words` are its ops'): the step later
  // graphs may follow, found by its first op's signature hash (a bucketed op's: its bucket's).
  void RememberStep(Pending& graph, size_t recorded_words, const std::vector<bool>& alive,
                    bool checks, const std::shared_ptr<const Plan>& plan);
  // Why a graph that followed a step to its cut cannot run the step's plan: "cut" (cut before
  // the step's end), "outputs" (other live results, or device checks switched), "program" (the
  // plan cache let the step's program go).
  static const char* ReplayEndedAt(const Pending& graph, const std::vector<bool>& alive,
                                   bool checks);
  // The followed step's plan, when `graph` followed all of it and ends as it did.
  static std::shared_ptr<const Plan> ReplayedPlan(const Pending& graph,
                                                  const std::vector<bool>& alive, bool checks);
  int SlotFor(c10::StorageImpl* impl, runtime::StorageBuffer* storage, bool sign = true);
  std::shared_ptr<const Plan> BuildPlan(const Pending& pending,
                                        const std::vector<bool>& alive) const;
  // "a fused graph of 3 ops (aten::mul.Tensor, aten::add.Tensor, aten::sum)", for errors.
  static std::string Describe(const Pending& graph);
  // The graph failed with `failure`: every live storage it writes gets a failed buffer, and the
  // failure waits for the next synchronization.
  static void FailWrites(const Pending& graph, const std::vector<bool>& alive,
                         const std::string& failure);

  mutable std::mutex mutex_;
  std::unique_ptr<Pending> pending_;
  std::atomic<size_t> op_count_{0};
  mutable std::mutex reasons_mutex_;
  std::map<std::string, int64_t> cut_reasons_;
  // Steps by their first op's signature hash, the most recent first.
  std::unordered_map<uint64_t, std::vector<std::shared_ptr<const Step>>> steps_;
  size_t step_count_ = 0;
  uint64_t next_ticket_ = 0;
  uint64_t expected_ticket_ = 0;  // the ticket Record takes as replayed; 0: none
  std::atomic<bool> replaying_{false};
};

}  // namespace torch_tpu::exec

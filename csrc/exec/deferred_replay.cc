// Defer-and-fuse replay: a graph whose ops follow a step seen before (a graph that ran) is
// recognised op by op, keeps only each op's runtime scalars and random states, and runs the
// step's program at its cut without building a signature or looking anything up
// (exec/deferred_graph.h).
//
// An arriving op follows the step when its own signature (op, views, dtypes, static arguments:
// everything its lowering reads) equals the step's next op's, and the graph numbers its storages
// and new results as the step did (the same storages shared between the same ops, entering with
// the same sizes and element types). Both together make the graph's signature the step's, so the
// step's program is this graph's. Anything else (another op, shape, dtype, static argument, view,
// aliasing, an earlier cut, other live results) ends the replay: the ops followed so far become
// ordinary recorded ops, which are the step's ops with this graph's scalars, and the graph is
// recorded and looked up exactly from there on.
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "exec/deferred_graph.h"
#include "exec/deferred_graph_parts.h"
#include "runtime/metrics.h"
#include "runtime/storage_buffer.h"

namespace torch_tpu::exec {

using runtime::StorageBuffer;
using deferred_parts::MaxOps;

namespace {

// Steps kept per first op (a loop that alternates steps starting alike, train and eval say)
// and in all; beyond that the steps are forgotten and the next graphs recorded again.
constexpr size_t kStepsPerFirstOp = 4;
constexpr size_t kMaxSteps = 256;

// TORCH_TPU_FUSE_REPLAY=0 records every graph exactly (to compare, or to rule replay out).
std::atomic<bool>& ReplaySetting() {
  static std::atomic<bool> enabled = [] {
    const char* value = std::getenv("TORCH_TPU_FUSE_REPLAY");
    return value == nullptr || std::string_view(value) != "0";
  }();
  return enabled;
}

// Whether `signature` is the `length` words of `step_signature` from `begin`, which hash to
// `hash`.
bool OpMatches(const ProgramSignature& signature, const ProgramSignature& step_signature,
               uint64_t hash, uint32_t begin, uint32_t length) {
  return hash == signature.hash() && length == signature.size() &&
         signature.EqualsRange(step_signature, begin);
}

}  // namespace

bool FuseReplayEnabled() { return ReplaySetting().load(std::memory_order_relaxed); }
void SetFuseReplay(bool enabled) { ReplaySetting().store(enabled, std::memory_order_relaxed); }

DeferredGraph::Expectation DeferredGraph::Expect(const ProgramSignature& op_signature,
                                                 int device) {
  return ExpectMatching(op_signature.hash(), device, /*step_fit=*/true,
                        [&](const Step& step, size_t index) {
    const Op& op = step.ops[index];
    if (op.exact_signature) return *op.exact_signature == op_signature;
    return OpMatches(op_signature, step.signature, op.signature_hash, op.signature_begin,
                     op.signature_length);
  });
}

DeferredGraph::Expectation DeferredGraph::ExpectBucketed(const ProgramSignature& bucket_signature,
                                                         int device) {
  return ExpectMatching(bucket_signature.hash(), device, /*step_fit=*/false,
                        [&](const Step& step, size_t index) {
    const Op& op = step.ops[index];
    return op.growing && OpMatches(bucket_signature, step.signature, op.signature_hash,
                                   op.signature_begin, op.signature_length);
  });
}

DeferredGraph::Expectation DeferredGraph::ExpectMatching(
    uint64_t first_hash, int device, bool step_fit,
    c10::function_ref<bool(const Step&, size_t)> matches) {
  // A graph recorded exactly (no step to follow) takes no lock here.
  if (!replaying_.load(std::memory_order_acquire) && !empty()) return {};
  if (!FuseReplayEnabled()) return {};
  std::lock_guard<std::mutex> lock(mutex_);
  expected_ticket_ = 0;
  auto expect = [&](const Step& step, size_t index) {
    expected_ticket_ = ++next_ticket_;
    const Op& op = step.ops[index];
    Expectation expectation{op.results, expected_ticket_};
    if (op.growing && step_fit) {
      expectation.bucket_signature.emplace();
      expectation.bucket_signature->AssignRange(step.signature, op.signature_begin,
                                                op.signature_length);
      expectation.growing = op.growing;
      expectation.padding = op.padding;
    }
    return expectation;
  };
  auto follows = [&](const Step& step, size_t index) {
    return index < step.ops.size() && matches(step, index);
  };
  if (!pending_) {
    auto it = steps_.find(first_hash);
    if (it == steps_.end()) return {};
    for (const std::shared_ptr<const Step>& step : it->second) {
      if (!follows(*step, 0)) continue;
      pending_ = std::make_unique<Pending>();
      pending_->device = device;
      pending_->replaying = step;
      ReserveForReplay(*pending_, *step);
      replaying_.store(true, std::memory_order_release);
      return expect(*step, 0);
    }
    return {};
  }
  Pending& graph = *pending_;
  if (!graph.replaying || graph.device != device) return {};
  if (follows(*graph.replaying, graph.replayed)) return expect(*graph.replaying, graph.replayed);
  // Another step that begins as this one did up to here, and goes on with this op.
  const Step& current = *graph.replaying;
  const size_t done = graph.replayed;
  const size_t prefix_words = done ? current.ops[done - 1].signature_end : 0;
  auto it = steps_.find(current.ops[0].signature_hash);
  if (it == steps_.end()) return {};
  for (const std::shared_ptr<const Step>& step : it->second) {
    if (step.get() == &current || !follows(*step, done)) continue;
    if (done && (step->ops[done - 1].signature_end != prefix_words ||
                 !step->signature.SamePrefix(current.signature, prefix_words))) {
      continue;
    }
    graph.replaying = step;
    return expect(*step, done);
  }
  return {};
}

void DeferredGraph::ReserveForReplay(Pending& graph, const Step& step) {
  // A graph that follows the step to its end takes the step's slots and one scalar and random
  // state end per op: sized once here instead of grown op by op (a reallocation and the moves
  // of every slot so far, each time the vectors double).
  graph.slots.reserve(step.slots.size());
  graph.slot_of.reserve(step.slots.size());
  graph.replay_scalar_ends.reserve(step.ops.size());
  graph.replay_rng_ends.reserve(step.ops.size());
}

bool DeferredGraph::FollowsStep(const OpRecord& record, std::span<const int> known_slots) const {
  const Pending& graph = *pending_;
  const Step& step = *graph.replaying;
  const Op& next = step.ops[graph.replayed];
  // The numbers SlotFor would give, without taking the storages in. `known`: the storage's slot
  // when the caller looked it up (-1: not in the graph), else -2 to look it up here.
  int next_new = static_cast<int>(graph.slots.size());
  int empty_slot = graph.empty_slot;
  auto number = [&](c10::StorageImpl* impl, StorageBuffer* storage, int known) -> int {
    if (storage == nullptr) {
      if (empty_slot < 0) {
        empty_slot = next_new++;
        if (static_cast<size_t>(empty_slot) >= step.slots.size() ||
            step.slots[empty_slot].nbytes != 0) {
          return -2;
        }
      }
      return empty_slot;
    }
    if (known >= 0) return known;
    if (known == -2) {
      auto it = graph.slot_of.find(impl);
      if (it != graph.slot_of.end()) return it->second;
    }
    const int slot = next_new++;
    if (static_cast<size_t>(slot) >= step.slots.size()) return -2;
    const Slot& expected = step.slots[slot];
    if (expected.nbytes != storage->nbytes() ||
        expected.entry_type != deferred_parts::EntryType(storage->deferred_contents())) {
      return -2;
    }
    return slot;
  };
  c10::SmallVector<int, 8> graph_slots;
  for (size_t s = 0; s < record.slots.size(); ++s) {
    graph_slots.push_back(number(record.storage_impls[s], record.slots[s].storage, known_slots[s]));
  }
  if (record.tensor_slots.size() != next.tensor_slots.size() ||
      record.destination_slots.size() != next.destination_slots.size() ||
      record.new_tensors.size() != next.result_slots.size()) {
    return false;
  }
  for (size_t i = 0; i < record.tensor_slots.size(); ++i) {
    if (graph_slots[record.tensor_slots[i]] != next.tensor_slots[i]) return false;
  }
  for (size_t i = 0; i < record.destination_slots.size(); ++i) {
    if (graph_slots[record.destination_slots[i]] != next.destination_slots[i]) return false;
  }
  for (size_t n = 0; n < record.new_tensors.size(); ++n) {
    const at::Tensor& tensor = record.new_tensors[n];
    auto* storage = static_cast<StorageBuffer*>(tensor.storage().data_ptr().get_context());
    const int slot =
        storage != nullptr ? number(tensor.storage().unsafeGetStorageImpl(), storage, -2) : -1;
    if (slot != next.result_slots[n]) return false;
  }
  return true;
}

void DeferredGraph::RecordReplayed(const OpRecord& record, const EagerLaunch& launch,
                                   std::span<const int> known_slots) {
  Pending& graph = *pending_;
  expected_ticket_ = 0;
  c10::SmallVector<int, 8> graph_slots;
  for (size_t s = 0; s < record.slots.size(); ++s) {
    graph_slots.push_back(known_slots[s] >= 0 ? known_slots[s]
                                              : SlotFor(record.storage_impls[s],
                                                        record.slots[s].storage,
                                                        /*sign=*/false));
  }
  for (size_t d = 0; d < record.destination_slots.size(); ++d) {
    graph.slots[graph_slots[record.destination_slots[d]]].MarkWritten(
        launch.destinations_[d].second.scalar_type());
  }
  for (size_t n = 0; n < record.new_tensors.size(); ++n) {
    const at::Tensor& tensor = record.new_tensors[n];
    auto* storage = static_cast<StorageBuffer*>(tensor.storage().data_ptr().get_context());
    if (storage == nullptr) continue;
    graph.slots[SlotFor(tensor.storage().unsafeGetStorageImpl(), storage, false)].MarkWritten(
        record.results->new_results[n].dtype);
  }
  graph.replay_scalars.insert(graph.replay_scalars.end(), record.host_scalars.begin(),
                              record.host_scalars.end());
  graph.replay_scalar_ends.push_back(static_cast<uint32_t>(graph.replay_scalars.size()));
  graph.replay_rng_states.insert(graph.replay_rng_states.end(), launch.rng_states_.begin(),
                                 launch.rng_states_.end());
  graph.replay_rng_ends.push_back(static_cast<uint32_t>(graph.replay_rng_states.size()));
  if (record.growing) {
    ++runtime::Metrics::Get().fused_bucketed_ops;
    if (!graph.growing_reference && record.growing->bucket > 0) {
      graph.growing_reference = GrowingReference{record.growing->t, record.growing->bucket};
    }
  }
  ++graph.replayed;
  op_count_.store(graph.replayed, std::memory_order_release);
  if (graph.replayed >= MaxOps()) FlushLocked("max_ops");
}

void DeferredGraph::Diverge(Pending& graph, const char* kind) {
  const Step& step = *graph.replaying;
  runtime::Metrics::Get().RecordReason("fused_replay_divergences", kind);
  const size_t done = graph.replayed;
  graph.signature.AssignPrefix(step.signature, done ? step.ops[done - 1].signature_end : 0);
  graph.ops.reserve(done);
  uint32_t scalars_begin = 0;
  uint32_t rng_begin = 0;
  for (size_t i = 0; i < done; ++i) {
    Op op = step.ops[i];
    op.host_scalars.assign(graph.replay_scalars.begin() + scalars_begin,
                           graph.replay_scalars.begin() + graph.replay_scalar_ends[i]);
    op.launch.rng_states_.assign(graph.replay_rng_states.begin() + rng_begin,
                                 graph.replay_rng_states.begin() + graph.replay_rng_ends[i]);
    scalars_begin = graph.replay_scalar_ends[i];
    rng_begin = graph.replay_rng_ends[i];
    graph.ops.push_back(std::move(op));
  }
  graph.replaying.reset();
  graph.replayed = 0;
  graph.replay_scalars.clear();
  graph.replay_scalar_ends.clear();
  graph.replay_rng_states.clear();
  graph.replay_rng_ends.clear();
  replaying_.store(false, std::memory_order_release);
}

std::shared_ptr<const DeferredGraph::Plan> DeferredGraph::ReplayedPlan(
    const Pending& graph, const std::vector<bool>& alive, bool checks) {
  const Step& step = *graph.replaying;
  if (graph.replayed != step.ops.size() || step.checks != checks || step.alive != alive) {
    return nullptr;
  }
  return step.plan.lock();
}

const char* DeferredGraph::ReplayEndedAt(const Pending& graph, const std::vector<bool>& alive,
                                         bool checks) {
  const Step& step = *graph.replaying;
  if (graph.replayed != step.ops.size()) return "cut";
  if (step.checks != checks || step.alive != alive) return "outputs";
  return "program";  // the plan cache let the step's program go
}

void DeferredGraph::RememberStep(Pending& graph, size_t recorded_words,
                                 const std::vector<bool>& alive, bool checks,
                                 const std::shared_ptr<const Plan>& plan) {
  if (graph.ops.empty()) return;
  auto step = std::make_shared<Step>();
  step->signature.AssignPrefix(graph.signature, recorded_words);
  for (const Slot& slot : graph.slots) {
    Slot& kept = step->slots.emplace_back();
    kept.nbytes = slot.nbytes;
    kept.entry_type = slot.entry_type;
    kept.written = slot.written;
    kept.written_type = slot.written_type;
  }
  step->ops = std::move(graph.ops);
  step->alive = alive;
  step->checks = checks;
  step->plan = plan;
  std::vector<std::shared_ptr<const Step>>& steps = steps_[step->ops[0].signature_hash];
  // The same step kept before (followed by another thread's graph, or ended differently) is
  // replaced; the newest goes first.
  std::erase_if(steps, [&](const std::shared_ptr<const Step>& kept) {
    const bool same = kept->signature == step->signature;
    step_count_ -= same;
    return same;
  });
  if (steps.size() >= kStepsPerFirstOp) {
    steps.pop_back();
    --step_count_;
  }
  steps.insert(steps.begin(), std::move(step));
  if (++step_count_ > kMaxSteps) {
    steps_.clear();
    step_count_ = 0;
  }
}

}  // namespace torch_tpu::exec

#include "exec/deferred_graph.h"

#include "exec/deferred_graph_parts.h"

#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <sstream>

#include "exec/failed_work.h"
#include "exec/launch_internals.h"
#include "exec/launch_lock.h"
#include "exec/pending_work.h"
#include "exec/plan_cache.h"
#include "exec/tiered_compilation.h"
#include "lowering/context.h"
#include "lowering/matmul_precision.h"
#include "runtime/metrics.h"
#include "runtime/storage_buffer.h"

namespace torch_tpu::exec {

using runtime::StorageBuffer;
using runtime::StorageContents;
using stablehlo::Value;
using Deferred = StorageBuffer::Deferred;
using deferred_parts::MaxOps;

namespace {

bool FuseDebug() {
  static const bool debug = [] {
    const char* value = std::getenv("TORCH_TPU_FUSE_DEBUG");
    return value && std::strcmp(value, "1") == 0;
  }();
  return debug;
}

// Set while this thread runs a graph: the storages it publishes are still marked, and their
// set_contents must not start another run.
thread_local bool running_graph = false;

void MaterializeForStorage() { DeferredGraph::Get().Flush("buffer_access"); }

std::string ErrorText(const std::exception& error) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
  return c10_error != nullptr ? c10_error->what_without_backtrace() : error.what();
}

}  // namespace

DeferredGraph& DeferredGraph::Get() {
  static DeferredGraph* graph = [] {
    runtime::AddMaterializeFunction(&MaterializeForStorage);
    return new DeferredGraph();  // never destroyed: storages may be freed during exit
  }();
  return *graph;
}

int DeferredGraph::SlotFor(c10::StorageImpl* impl, StorageBuffer* storage, bool sign) {
  Pending& graph = *pending_;
  if (storage == nullptr) {
    if (graph.empty_slot < 0) {
      graph.empty_slot = static_cast<int>(graph.slots.size());
      graph.slots.push_back(Slot{});
      if (sign) {
        graph.signature.AddTag(SignatureTag::kStorage);
        graph.signature.Add(0);
      }
    }
    return graph.empty_slot;
  }
  auto [it, inserted] = graph.slot_of.emplace(impl, static_cast<int>(graph.slots.size()));
  if (!inserted) return it->second;
  Slot slot;
  slot.impl = c10::weak_intrusive_ptr<c10::StorageImpl>(
      c10::intrusive_ptr<c10::StorageImpl>::unsafe_reclaim_from_nonowning(impl));
  slot.storage = storage;
  slot.nbytes = storage->nbytes();
  slot.contents = storage->deferred_contents();
  slot.entry_type = deferred_parts::EntryType(slot.contents);
  if (storage->deferred() == Deferred::kNone) storage->set_deferred(Deferred::kRead);
  if (sign) {
    graph.signature.AddTag(SignatureTag::kStorage);
    graph.signature.Add(static_cast<int64_t>(storage->nbytes()));
    graph.signature.Add(slot.entry_type);
  }
  graph.slots.push_back(std::move(slot));
  return it->second;
}

void DeferredGraph::Record(EagerLaunch&& launch, const lowering::LoweringFunction& function,
                           int device, const OpRecord& record) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (pending_ && pending_->device != device) FlushLocked("device");
  // Each storage's slot in the pending graph, -1 for one it has not taken in: looked up once,
  // for the check below and for replay's.
  c10::SmallVector<int, 8> known_slots;
  if (pending_) {
    for (size_t s = 0; s < record.slots.size(); ++s) {
      auto it = pending_->slot_of.find(record.storage_impls[s]);
      if (it == pending_->slot_of.end()) {
        known_slots.push_back(-1);
        continue;
      }
      // A storage whose buffer holder was replaced (resize_) is a new storage to the graph.
      if (pending_->slots[it->second].storage != record.slots[s].storage) {
        FlushLocked("storage_replaced");
        break;
      }
      known_slots.push_back(it->second);
    }
  }
  if (pending_ && pending_->replaying) {
    const bool expected = record.replay_ticket != 0 && record.replay_ticket == expected_ticket_;
    if (expected && FollowsStep(record, known_slots)) {
      RecordReplayed(record, launch, known_slots);
      return;
    }
    Diverge(*pending_, expected ? "storages" : "op");
  }
  expected_ticket_ = 0;
  if (!pending_) {
    pending_ = std::make_unique<Pending>();
    pending_->device = device;
  }
  Pending& graph = *pending_;
  ProgramSignature& signature = graph.signature;
  signature.AddTag(SignatureTag::kDeferred);
  Op op{&function, std::move(launch)};
  op.signature_hash = record.signature.hash();
  op.signature_begin = static_cast<uint32_t>(signature.size() + 1);  // after the length word
  op.signature_length = static_cast<uint32_t>(record.signature.size());
  signature.AddSignature(record.signature);
  c10::SmallVector<int, 8> graph_slots;
  graph_slots.reserve(record.slots.size());
  for (size_t s = 0; s < record.slots.size(); ++s) {
    graph_slots.push_back(SlotFor(record.storage_impls[s], record.slots[s].storage));
    signature.Add(graph_slots.back());
  }
  // Destinations are recorded in the launch's order of destinations.
  for (size_t d = 0; d < record.destination_slots.size(); ++d) {
    graph.slots[graph_slots[record.destination_slots[d]]].MarkWritten(
        op.launch.destinations_[d].second.scalar_type());
  }
  for (int slot : record.tensor_slots) op.tensor_slots.push_back(graph_slots[slot]);
  for (int slot : record.destination_slots) op.destination_slots.push_back(graph_slots[slot]);
  for (size_t n = 0; n < record.new_tensors.size(); ++n) {
    const at::Tensor& tensor = record.new_tensors[n];
    StorageBuffer* storage = static_cast<StorageBuffer*>(tensor.storage().data_ptr().get_context());
    int slot = -1;
    if (storage != nullptr) {
      slot = SlotFor(tensor.storage().unsafeGetStorageImpl(), storage);
      graph.slots[slot].MarkWritten(record.results->new_results[n].dtype);
    }
    op.result_slots.push_back(slot);
    signature.Add(slot);
  }
  op.host_scalars.assign(record.host_scalars.begin(), record.host_scalars.end());
  op.results = record.results;
  op.signature_end = static_cast<uint32_t>(signature.size());
  if (record.exact_signature != nullptr) {
    op.exact_signature = std::make_shared<const ProgramSignature>(*record.exact_signature);
  }
  if (record.growing) {
    ++runtime::Metrics::Get().fused_bucketed_ops;
    if (!graph.growing_reference && record.growing->bucket > 0) {
      graph.growing_reference = GrowingReference{record.growing->t, record.growing->bucket};
    }
    op.growing = *record.growing;
    op.padding = record.padding;
  }
  op.launch.KeepGeometryOnly();
  graph.ops.push_back(std::move(op));
  op_count_.store(graph.ops.size(), std::memory_order_release);
  if (graph.ops.size() >= MaxOps()) FlushLocked("max_ops");
}

std::optional<GrowingReference> DeferredGraph::growing_reference() const {
  if (empty()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mutex_);
  return pending_ ? pending_->growing_reference : std::nullopt;
}

void DeferredGraph::Flush(const char* reason) {
  if (running_graph || empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  FlushLocked(reason);
}

std::string DeferredGraph::Describe(const Pending& graph) {
  std::ostringstream text;
  text << "a fused graph of " << graph.ops.size() << " ops (";
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    if (i == 24) {
      text << ", ... " << graph.ops.size() - i << " more";
      break;
    }
    text << (i ? ", " : "") << graph.ops[i].launch.op_name_;
  }
  text << ')';
  return text.str();
}

std::shared_ptr<const DeferredGraph::Plan> DeferredGraph::BuildPlan(
    const Pending& graph, const std::vector<bool>& alive) const {
  auto plan = std::make_shared<Plan>();
  plan->description = std::make_shared<const std::string>(Describe(graph));
  std::vector<StorageSlotInfo> slot_infos;
  for (const Slot& slot : graph.slots) {
    slot_infos.push_back({slot.nbytes, slot.contents.initialized(), slot.contents.element_type});
  }
  plan->program = BuildProgram(std::move(slot_infos), [&](ProgramBuilder& program) {
    // Ops recorded unsigned never read the precision when recorded (lowering/matmul_precision.h).
    const lowering::UnsignedMatmulPrecisionReadsSetting recorded_ops;
    for (const Op& op : graph.ops) {
      const std::string description =
          (op.growing ? op.launch.DescribeGrowing(*op.growing) : op.launch.Description()) +
          ", in " + *plan->description;
      if (op.growing) {
        // Its results fill storages of the bucket's size, which the next ops read (and the next
        // graph, at the next length, finds again).
        std::vector<std::vector<int64_t>> layouts;
        for (const auto& result : op.results->new_results) layouts.push_back(result.strides);
        std::vector<EagerLaunch::GrowingResult> results = op.launch.LowerGrowing(
            *op.function, program, op.tensor_slots, std::span(op.host_scalars).subspan(1),
            *op.growing, op.padding, description, layouts);
        for (size_t r = 0; r < results.size(); ++r) {
          const int index = op.results->result_new_index[r];
          if (index < 0 || op.result_slots[index] < 0) continue;
          program.WriteFlat(op.result_slots[index], results[r].flat);
        }
        continue;
      }
      std::vector<bool> written;
      std::vector<Value> results =
          op.launch.Lower(*op.function, program, op.tensor_slots, op.destination_slots,
                          op.host_scalars, description, written);
      for (size_t r = 0; r < results.size(); ++r) {
        const int index = op.results->result_new_index[r];
        if (index < 0 || op.result_slots[index] < 0) continue;
        program.WriteDense(op.result_slots[index], results[r],
                           op.results->new_results[index].strides);
      }
    }
    for (size_t s = 0; s < graph.slots.size(); ++s) {
      if (!alive[s]) program.Discard(static_cast<int>(s));
    }
  }, WholeProgramTier());
  return plan;
}

void DeferredGraph::FlushLocked(const char* reason) {
  if (!pending_) return;
  expected_ticket_ = 0;
  std::unique_ptr<Pending> taken = std::move(pending_);
  op_count_.store(0, std::memory_order_release);
  replaying_.store(false, std::memory_order_release);
  Pending& graph = *taken;
  if (graph.replaying && graph.replayed == 0) return;  // started following a step, recorded none
  running_graph = true;
  // Whatever happens, the storages stop pointing at this graph.
  std::vector<c10::intrusive_ptr<c10::StorageImpl>> keep_alive(graph.slots.size());
  struct Unmark {
    Pending& graph;
    std::vector<c10::intrusive_ptr<c10::StorageImpl>>& alive;
    ~Unmark() {
      for (size_t s = 0; s < graph.slots.size(); ++s) {
        if (alive[s]) graph.slots[s].storage->set_deferred(Deferred::kNone);
      }
      running_graph = false;
    }
  } unmark{graph, keep_alive};

  std::vector<bool> alive(graph.slots.size(), false);
  size_t outputs = 0;
  for (size_t s = 0; s < graph.slots.size(); ++s) {
    Slot& slot = graph.slots[s];
    if (slot.storage == nullptr) continue;
    keep_alive[s] = slot.impl.lock();
    // A storage whose buffer holder was swapped out (resize_) no longer takes this value.
    if (keep_alive[s] && keep_alive[s]->data_ptr().get_context() != slot.storage) {
      keep_alive[s].reset();
    }
    alive[s] = static_cast<bool>(keep_alive[s]);
    if (slot.written) outputs += alive[s];
  }
  const bool checks = DeviceChecksEnabled();

  // A graph that followed a step to its end, with the same live results, runs the step's
  // program; any other ends its replay here and is looked up by its signature.
  std::shared_ptr<const Plan> plan;
  if (graph.replaying) {
    plan = ReplayedPlan(graph, alive, checks);
    if (plan) {
      ++runtime::Metrics::Get().cache_hits_memory;
      ++runtime::Metrics::Get().fused_replays;
    } else {
      Diverge(graph, ReplayEndedAt(graph, alive, checks));
    }
  }
  bool built = false;
  std::string build_failure;
  size_t recorded_words = 0;
  if (!plan) {
    ProgramSignature& signature = graph.signature;
    recorded_words = signature.size();
    signature.AddTag(SignatureTag::kChecks);
    signature.Add(checks);
    for (size_t s = 0; s < graph.slots.size(); ++s) {
      if (graph.slots[s].storage != nullptr && graph.slots[s].written) signature.Add(alive[s]);
    }
    // The ops returned their results already: a graph that fails to build, compile or run fails
    // every storage it would have written (exec/failed_work.h), and the failure is raised at the
    // next synchronization, as a failed strict-mode launch is.
    try {
      plan = PlanCache::Get().GetOrBuild<Plan>(
          signature,
          [&] {
            // Only a graph without a program is lowered: its ops need their operands back.
            for (Op& op : graph.ops) op.launch.RestoreGeometry();
            return BuildPlan(graph, alive);
          },
          PlanCache::Options{}, &built);
    } catch (const std::exception& error) {
      build_failure = Describe(graph) + ": " + ErrorText(error);
    }
    if (plan && !built) ++runtime::Metrics::Get().cache_hits_memory;
    if (built) ++runtime::Metrics::Get().fused_programs;
  }
  const size_t op_count = graph.replaying ? graph.replayed : graph.ops.size();
  if (FuseDebug()) {
    std::fprintf(stderr, "torch_tpu fuse: cut (%s): %zu ops, %zu slots, %zu outputs, %s\n", reason,
                 op_count, graph.slots.size(), outputs,
                 !plan        ? "failed to build"
                 : built      ? "new program"
                 : graph.replaying ? "replayed step"
                              : "cached program");
  }
  {
    std::lock_guard<std::mutex> reasons_lock(reasons_mutex_);
    ++cut_reasons_[reason];
  }
  if (!plan) {
    FailWrites(graph, alive, build_failure);
    return;
  }
  if (!RunLocked(graph, alive, plan)) return;
  ++runtime::Metrics::Get().fused_graphs;
  runtime::Metrics::Get().fused_ops += static_cast<int64_t>(op_count);
  if (!graph.replaying) RememberStep(graph, recorded_words, alive, checks, plan);
}

bool DeferredGraph::RunLocked(Pending& graph, const std::vector<bool>& alive,
                              const std::shared_ptr<const Plan>& plan) {
  std::vector<HostScalar> host_scalars;
  std::vector<std::pair<uint64_t, uint64_t>> rng_states;
  if (graph.replaying) {
    host_scalars = std::move(graph.replay_scalars);
    rng_states = std::move(graph.replay_rng_states);
  } else {
    for (const Op& op : graph.ops) {
      host_scalars.insert(host_scalars.end(), op.host_scalars.begin(), op.host_scalars.end());
      rng_states.insert(rng_states.end(), op.launch.rng_states_.begin(),
                        op.launch.rng_states_.end());
    }
  }
  std::vector<StorageSlot> slots;
  slots.reserve(graph.slots.size());
  for (size_t s = 0; s < graph.slots.size(); ++s) {
    // Dead storages take no result; the slot's reference is the program's only hold on their
    // old buffer, so it is dropped with the graph.
    slots.push_back(
        {alive[s] ? graph.slots[s].storage : nullptr, std::move(graph.slots[s].contents)});
  }
  ReleaseSlotsOnExit release_on_exit{slots};
  ProgramRun run;
  try {
    std::lock_guard<std::mutex> launch_lock(LaunchMutex());
    const ProgramInputs inputs{slots, host_scalars, rng_states};
    run = RunProgram(plan->program, inputs, graph.device, plan->description, plan);
    slots.clear();
  } catch (const std::exception& error) {
    FailWrites(graph, alive, ErrorText(error));  // names the graph already
    return false;
  }
  CompleteRun(std::move(run.done), plan->program, plan->description);
  return true;
}

void DeferredGraph::FailWrites(const Pending& graph, const std::vector<bool>& alive,
                               const std::string& failure) {
  try {
    for (size_t s = 0; s < graph.slots.size(); ++s) {
      const Slot& slot = graph.slots[s];
      if (!slot.written || !alive[s]) continue;
      slot.storage->publish_contents(
          FailedContents(slot.nbytes, slot.written_type, graph.device, failure));
    }
  } catch (const std::exception&) {
    // Without even a failed buffer, readers see the old contents; synchronize still raises.
  }
  PendingWork::Get().AddFailure(failure);
}

std::map<std::string, int64_t> DeferredGraph::cut_reasons() const {
  std::lock_guard<std::mutex> lock(reasons_mutex_);
  return cut_reasons_;
}

void DeferredGraph::ResetCutReasons() {
  std::lock_guard<std::mutex> lock(reasons_mutex_);
  cut_reasons_.clear();
}

}  // namespace torch_tpu::exec

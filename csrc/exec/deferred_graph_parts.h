// The pending graph's records (exec/deferred_graph.h), shared by the files that implement it:
// deferred_graph.cc (recording, cuts, runs) and deferred_replay.cc (following a step seen
// before). Not for use outside exec/.
#pragma once

#include <c10/core/StorageImpl.h>
#include <c10/util/SmallVector.h>
#include <c10/util/flat_hash_map.h>
#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "exec/deferred_graph.h"
#include "lowering/context.h"
#include "runtime/storage_buffer.h"

namespace torch_tpu::exec {

namespace deferred_parts {

// A graph is cut after this many ops (TORCH_TPU_FUSE_MAX_OPS, default 512).
inline size_t MaxOps() {
  static const size_t max_ops = [] {
    const char* value = std::getenv("TORCH_TPU_FUSE_MAX_OPS");
    const long parsed = value ? std::strtol(value, nullptr, 10) : 0;
    return parsed > 0 ? static_cast<size_t>(parsed) : size_t{512};
  }();
  return max_ops;
}

inline stablehlo::ElementType WrittenType(c10::ScalarType dtype) {
  return lowering::ToElementTypeOrThrow(dtype, "a deferred op");
}

// A storage's state on entering a graph, as the graph signs it: its element type, or -1 when it
// was never written.
inline int64_t EntryType(const runtime::StorageContents& contents) {
  return contents.initialized() ? static_cast<int64_t>(contents.element_type) : -1;
}

}  // namespace deferred_parts

struct DeferredGraph::Slot {
  // Follows the storage's lifetime (null for zero-byte storages).
  c10::weak_intrusive_ptr<c10::StorageImpl> impl{c10::intrusive_ptr<c10::StorageImpl>()};
  runtime::StorageBuffer* storage = nullptr;  // null for zero-byte storages
  size_t nbytes = 0;  // the storage may be gone by the cut: its size is kept here
  runtime::StorageContents contents;  // its buffer when it entered the graph
  int64_t entry_type = -1;            // the element type it held then, as signed; -1: none
  bool written = false;
  // The element type the graph's last write leaves: what a failed graph's buffer holds.
  stablehlo::ElementType written_type = stablehlo::ElementType::kU8;

  // An op of the graph writes the storage with a value of `dtype`: reading it now runs the graph.
  void MarkWritten(c10::ScalarType dtype) {
    written = true;
    written_type = deferred_parts::WrittenType(dtype);
    if (storage != nullptr) storage->set_deferred(runtime::StorageBuffer::Deferred::kWritten);
  }
};

// Inline capacity for the few slots and scalars of a typical op: recording allocates for every
// op, so each heap allocation avoided here is time saved per op.
struct DeferredGraph::Op {
  const lowering::LoweringFunction* function;
  EagerLaunch launch;
  c10::SmallVector<int, 4> tensor_slots;
  c10::SmallVector<int, 2> destination_slots;
  c10::SmallVector<int, 2> result_slots;  // per new result; -1 for an empty one (no storage)
  c10::SmallVector<HostScalar, 2> host_scalars;
  std::shared_ptr<const DeferredResults> results;
  // A bucketed op (exec/growing_shapes.h), whose symbol is its first host scalar.
  std::optional<GrowingFit> growing;
  GrowingPadding padding = GrowingPadding::kEdge;
  // The op's own signature is the graph signature's `signature_length` words from
  // `signature_begin` (a bucketed op's: its bucket's); the graph signature up to this op has
  // `signature_end` words (replay). `signature_hash` is that signature's hash.
  uint64_t signature_hash = 0;
  uint32_t signature_begin = 0;
  uint32_t signature_length = 0;
  uint32_t signature_end = 0;
  // A bucketed op: its exact signature. A later graph's op at the same sizes is matched against
  // it (and takes `growing` as it is); one at another length of the same bucket, by its bucket's
  // signature (DeferredGraph::ExpectBucketed).
  std::shared_ptr<const ProgramSignature> exact_signature;
};

struct DeferredGraph::Pending {
  int device = 0;
  std::vector<Op> ops;
  std::vector<Slot> slots;
  // Open addressing: a recorded op adds a slot per new result, and a node-based map would
  // allocate (and the graph's end free) one node for each.
  ska::flat_hash_map<c10::StorageImpl*, int> slot_of;
  int empty_slot = -1;
  ProgramSignature signature;
  std::optional<GrowingReference> growing_reference;
  // Replay (exec/deferred_replay.cc): the step this graph follows, how many of its ops it has
  // followed, and their runtime scalars and random states (each op's end in those lists). The
  // followed ops are not in `ops` and not in `signature` (the step has both).
  std::shared_ptr<const Step> replaying;
  size_t replayed = 0;
  std::vector<HostScalar> replay_scalars;
  std::vector<uint32_t> replay_scalar_ends;
  std::vector<std::pair<uint64_t, uint64_t>> replay_rng_states;
  std::vector<uint32_t> replay_rng_ends;
};

// A graph that ran, kept for later graphs to follow (exec/deferred_replay.cc): its ops (geometry
// only, with the first recording's scalars), its slots (sizes, entry types, writes; no
// storages), its signature before the cut, and how it ended.
struct DeferredGraph::Step {
  std::vector<Op> ops;
  std::vector<Slot> slots;
  ProgramSignature signature;
  std::vector<bool> alive;
  bool checks = true;
  std::weak_ptr<const Plan> plan;  // the plan cache owns it; an evicted one is looked up again
};

struct DeferredGraph::Plan {
  BuiltProgram program;
  std::shared_ptr<const std::string> description;
};

}  // namespace torch_tpu::exec

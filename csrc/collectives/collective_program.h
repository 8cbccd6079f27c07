// The StableHLO program of one cross-process collective: every process runs the same program,
// each as one replica, and the plugin moves the data between devices (NCCL on GPUs, ICI on TPUs).
// Torch-free, like the layers below it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "stablehlo/element_type.h"

namespace torch_tpu::collectives {

enum class CollectiveKind {
  kAllReduce,      // every replica gets the reduction of all operands
  kAllGather,      // operands concatenated along `dimension`, in replica order
  kReduceScatter,  // the reduction, split along `dimension`; replica r keeps block r
  kAllToAll,       // block j of replica i's `dimension` goes to replica j, at block i
  kBroadcast,      // every replica gets replica `root`'s operand
  kPermute,        // each (source, target) pair sends source's operand to target
};

enum class ReduceOp { kSum, kProduct, kMin, kMax, kBitwiseAnd, kBitwiseOr, kBitwiseXor, kAverage };

struct CollectiveSpec {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  stablehlo::ElementType element_type = stablehlo::ElementType::kF32;
  std::vector<int64_t> dims;  // one replica's operand
  int64_t world_size = 1;     // replicas, one per process
  ReduceOp reduce_op = ReduceOp::kSum;
  int64_t dimension = 0;  // all-gather, reduce-scatter, all-to-all
  int64_t root = 0;       // broadcast
  std::vector<std::pair<int64_t, int64_t>> pairs;  // permute
};

// Readable name of a spec for messages ("all_reduce(sum) f32[4,8] over 2 replicas").
std::string Describe(const CollectiveSpec& spec);

// MLIR text of the program (one argument, one result). Throws std::invalid_argument for a spec
// the collective cannot take (a reduction the element type has no meaning for, a dimension that
// does not split evenly), naming the spec.
std::string CollectiveModuleText(const CollectiveSpec& spec);

}  // namespace torch_tpu::collectives

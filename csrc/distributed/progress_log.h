// Which collective each rank of a group has reached, kept in the group's store, so that a failed
// or timed-out collective can name the ranks that never joined it (a dead or hung peer) or that
// joined it with different tensors (mismatched shapes), instead of a bare transport error.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstdint>
#include <string>

namespace torch_tpu::distributed {

// What one rank called as its `sequence`-th collective of the group.
struct CollectiveRecord {
  uint64_t sequence = 0;
  std::string op;         // "allreduce"
  std::string signature;  // the tensors' dtypes and shapes: "float[4, 8]"
};

class ProgressLog {
 public:
  ProgressLog(c10::intrusive_ptr<c10d::Store> store, int rank, int size);

  // Publishes that this rank has reached `record` (one store write; called off the caller's
  // thread, before the rank waits on the transport).
  void Reached(const CollectiveRecord& record);

  // Why `record` failed as far as the other ranks' progress tells: "rank 1 did not reach it",
  // "rank 1 called allgather with float[8]", or "" when every rank reached the same call.
  std::string Diagnose(const CollectiveRecord& record) const;

 private:
  std::string Key(int rank) const;

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  int size_;
};

// "float[4, 8]" for each tensor, joined with ", ".
std::string DescribeTensors(const std::vector<at::Tensor>& tensors);

}  // namespace torch_tpu::distributed

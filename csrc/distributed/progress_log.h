// Which collective each rank of a group has reached, kept in the group's store, so that a failed
// or timed-out collective can name the ranks that never joined it (a dead or hung peer) or that
// joined it with different tensors (mismatched shapes), instead of a bare transport error.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

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
  ~ProgressLog();
  ProgressLog(const ProgressLog&) = delete;
  ProgressLog& operator=(const ProgressLog&) = delete;

  // Publishes that this rank has reached `record`. The store write happens on the log's own
  // thread, off the collective's path (a store round trip per collective would cost as much as
  // a small collective); only the latest record matters, so pending ones are superseded.
  void Reached(const CollectiveRecord& record);

  // Why `record` failed as far as the other ranks' progress tells: "rank 1 did not reach it",
  // "rank 1 called allgather with Float[8] where rank 0 has Float[4]", or "" when every rank
  // reached the same call. Gives the peers' writers up to a second to catch up.
  std::string Diagnose(const CollectiveRecord& record) const;

 private:
  std::string Key(int rank) const;
  void Writer();

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  int size_;
  std::mutex mutex_;
  std::condition_variable pending_ready_;
  std::optional<CollectiveRecord> pending_;
  bool stopping_ = false;
  std::thread writer_;  // last: starts once the members it uses exist
};

// "float[4, 8]" for each tensor, joined with ", ".
std::string DescribeTensors(const std::vector<at::Tensor>& tensors);

}  // namespace torch_tpu::distributed

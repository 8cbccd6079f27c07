// One thread per tpu_dist backend that completes its works in launch order: it waits for each
// work's host transport, writes the results back to the device and completes the work, so the
// caller's thread never blocks on the network.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "distributed/peer_channel.h"
#include "distributed/tpu_dist_work.h"

namespace torch_tpu::distributed {

class CompletionQueue {
 public:
  CompletionQueue(c10d::Backend& host, PeerChannel& peers);
  // Completes what is queued, then stops the thread.
  ~CompletionQueue();
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  void Push(c10::intrusive_ptr<TpuDistWork> work);
  // For a work whose caller waits for it at once (a synchronous collective): completes it on the
  // calling thread when nothing is queued before it, saving two thread hand-offs; else queues it.
  void CompleteHereOrPush(c10::intrusive_ptr<TpuDistWork> work);
  // Nothing queued or being completed: a work pushed now by CompleteHereOrPush runs at once.
  bool Idle();

 private:
  void Loop();

  c10d::Backend& host_;
  PeerChannel& peers_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<c10::intrusive_ptr<TpuDistWork>> queue_;
  bool stopping_ = false;
  bool completing_ = false;  // a work is being completed (on the thread or a caller's)
  std::thread thread_;       // last: starts after the members it uses exist
};

}  // namespace torch_tpu::distributed

// The Work of a tpu_dist collective: completes asynchronously on the backend's completion
// thread once the host transport's work is done and the results are back on the device.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "distributed/host_staging.h"
#include "distributed/peer_channel.h"

namespace torch_tpu::distributed {

class TpuDistWork : public c10d::Work {
 public:
  struct Launch {
    CollectiveRecord record;
    // The host transport's op over the staged tensors; run once every rank has shown it is
    // making the same call (Gloo aborts the process on mismatched buffer sizes, so mismatches
    // must be caught before it sees them).
    std::function<c10::intrusive_ptr<c10d::Work>(c10d::Backend&)> run;
    c10::intrusive_ptr<c10d::Work> host_work;  // what run returned
    HostStaging staging;
    std::function<void(HostStaging&)> finish;  // host post-processing before the write-back
    std::vector<at::Tensor> outputs;           // what result() and the future hold
    bool collective = true;                    // send/recv are not, and are not checked
    bool caller_waits = false;                 // synchronous: the caller waits for it at once
    std::string peer;                          // for send/recv: "to rank 1"
    std::string transport = "host transport (gloo)";  // names it in errors
    // While a profiler records (profiler/device_trace.h): when it was issued, in which CPU op.
    int64_t profiled_since = 0;
    uint64_t profiler_correlation = 0;
  };

  TpuDistWork(int rank, c10d::OpType type, Launch launch, std::chrono::milliseconds timeout,
              const PeerChannel* peers, std::vector<c10::Device> devices);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  int sourceRank() const override;
  bool wait(std::chrono::milliseconds timeout = ::kNoTimeout) override;
  void synchronize() override {}
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  uint64_t getSequencenumber() const override { return launch_.record.sequence; }

  // On the completion thread (or a synchronous caller's): checks that every rank makes the same
  // call (the record was announced to `peers` when issued), runs it on the host transport, waits
  // for it, writes the results back and completes.
  void Complete(c10d::Backend& host, PeerChannel& peers);

 private:
  // The error for a failure of this collective, naming it, this rank and (from the peer
  // channel) the ranks that did not join it. `cause` describes what the transport reported.
  std::exception_ptr Failure(const std::string& cause,
                             std::optional<std::chrono::milliseconds> timed_out_after) const;
  void Finish(std::exception_ptr error);

  int rank_;
  Launch launch_;
  std::chrono::milliseconds timeout_;
  const PeerChannel* peers_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  mutable std::mutex mutex_;
  std::condition_variable done_;
  bool completed_ = false;
  std::exception_ptr error_;
  int profiled_device_ = 0;  // the device its trace event goes on
};

// A work that is already complete: what a transport returns that ran its op to the end.
c10::intrusive_ptr<c10d::Work> CompletedWork();

}  // namespace torch_tpu::distributed

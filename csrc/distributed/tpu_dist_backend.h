// tpu_dist: the c10d backend of the tpu device.
//
// Collectives run through a transport. On plugins without cross-process collectives in the PJRT
// C API (the XLA CPU plugin) that is a host transport: a c10d backend over CPU tensors (PyTorch's
// Gloo, created over the same store, rank and size), with device tensors staged through host
// memory (HostStaging). CPU tensors go to the host transport directly. Where the runtime's client
// spans the group's processes (TPU; GPU; and a group of one), the main collectives of tpu
// tensors run as replicated StableHLO programs on the devices instead (DeviceTransport).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "distributed/completion_queue.h"
#include "distributed/device_transport.h"
#include "distributed/peer_channel.h"
#include "distributed/tpu_dist_work.h"

namespace torch_tpu::distributed {

class TpuDistBackend : public c10d::Backend {
 public:
  TpuDistBackend(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                 std::chrono::milliseconds timeout, c10::intrusive_ptr<c10d::Backend> host);

  const std::string getBackendName() const override { return "tpu_dist"; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return sequence_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // _coalescing_manager(device=tpu): the collectives issued in between run as they are issued
  // (the host transport has no grouping to gain from); the block's work waits for all of them.
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

 private:
  // A collective in the making: its record (numbered in call order, which every rank shares;
  // its signature describes `agreeing`, the tensors whose shapes every rank must share, by
  // default all of them) and the staging of its tensors.
  TpuDistWork::Launch Begin(const std::string& op, const std::vector<at::Tensor>& tensors,
                            const std::optional<std::vector<at::Tensor>>& agreeing = std::nullopt);
  // Queues the work; the completion thread runs `run` (the host transport's op over the staged
  // tensors) once every rank has shown it makes the same call.
  c10::intrusive_ptr<c10d::Work> Submit(
      c10d::OpType type, TpuDistWork::Launch launch,
      std::function<c10::intrusive_ptr<c10d::Work>(c10d::Backend&)> run);

  // Ops whose outputs are lists of lists (allgather, gather) and ops over two vectors of
  // tensors (the *_tensor_coalesced ops, alltoall): stage, then `call` the host transport.
  using ListsCall = std::function<c10::intrusive_ptr<c10d::Work>(
      c10d::Backend&, std::vector<std::vector<at::Tensor>>&, std::vector<at::Tensor>&)>;
  using VectorsCall = std::function<c10::intrusive_ptr<c10d::Work>(
      c10d::Backend&, std::vector<at::Tensor>&, std::vector<at::Tensor>&, const c10d::ReduceOp&)>;
  c10::intrusive_ptr<c10d::Work> ListsOut(const std::string& op, c10d::OpType type,
                                          std::vector<std::vector<at::Tensor>>& outputs,
                                          std::vector<at::Tensor>& inputs, bool inputs_agree,
                                          ListsCall call);
  // `reduce_op`: for reductions, applied through PrepareReduce.
  c10::intrusive_ptr<c10d::Work> VectorsOut(const std::string& op, c10d::OpType type,
                                            std::vector<at::Tensor>& outputs,
                                            std::vector<at::Tensor>& inputs, bool shapes_agree,
                                            const std::optional<c10d::ReduceOp>& reduce_op,
                                            VectorsCall call);

  // allreduce, allreduce_coalesced, reduce: the tensors are read and written.
  template <typename OpOptions>
  c10::intrusive_ptr<c10d::Work> InPlaceReduction(
      const std::string& op, c10d::OpType type, std::vector<at::Tensor>& tensors,
      const OpOptions& opts,
      std::function<c10::intrusive_ptr<c10d::Work>(c10d::Backend&, std::vector<at::Tensor>&,
                                                   const OpOptions&)>
          call);
  // send and receive: `sending` reads the tensors, else they are written.
  c10::intrusive_ptr<c10d::Work> PointToPoint(
      const std::string& op, c10d::OpType type, const std::string& peer,
      std::vector<at::Tensor>& tensors, bool sending,
      std::function<c10::intrusive_ptr<c10d::Work>(c10d::Backend&, std::vector<at::Tensor>&)>
          call);

  // SUM on the transport plus what the op needs around it (AVG: divide the results; PREMUL_SUM:
  // scale the inputs first). Called before staging on the caller's `inputs`: PREMUL_SUM scales
  // them in place when the op writes them anyway (`in_place`), else replaces them by scaled ones.
  // The device transport when it takes `tensors` (created at the first call with tpu tensors),
  // else nullptr.
  DeviceTransport* Device(const std::vector<at::Tensor>& tensors);
  // Queues `spec` (its world size this group's) on the device transport over `operand`, into
  // `output`, agreed like any other collective; `then` runs after the result is in `output`.
  c10::intrusive_ptr<c10d::Work> SubmitOnDevice(c10d::OpType type, TpuDistWork::Launch launch,
                                                DeviceTransport* device,
                                                collectives::CollectiveSpec spec,
                                                DeviceTransport::Operand operand,
                                                at::Tensor output,
                                                std::function<void()> then = nullptr);
  // The device program's reduction for `reduce_op` (PREMUL_SUM: scales `inputs` first, in place
  // when `in_place`, and sums).
  collectives::ReduceOp DeviceReduceOp(const std::string& op, const c10d::ReduceOp& reduce_op,
                                       std::vector<at::Tensor>& inputs, bool in_place);

  c10d::ReduceOp PrepareReduce(const std::string& op, const c10d::ReduceOp& reduce_op,
                               std::vector<at::Tensor>& inputs, bool in_place,
                               TpuDistWork::Launch& launch);

  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Backend> host_;
  std::atomic<uint64_t> sequence_{0};
  // The works issued since startCoalescing; none outside a coalescing block.
  std::optional<std::vector<c10::intrusive_ptr<c10d::Work>>> coalesced_;
  PeerChannel peers_;
  std::once_flag device_once_;
  std::unique_ptr<DeviceTransport> device_;
  // Last: drained before the members they use go. Collectives complete in call order; sends and
  // receives on their own thread, so a receive is never stuck behind a send waiting for it.
  std::unique_ptr<CompletionQueue> collectives_;
  std::unique_ptr<CompletionQueue> point_to_point_;
};

}  // namespace torch_tpu::distributed

// tpu_dist's transport on plugins whose clients span processes (TPU; GPU created with
// node_id/num_nodes): a collective is one replicated StableHLO program (collectives/), each rank
// running it on its device with its tensor's buffer, and the result becomes the output's buffer.
// Nothing is staged through the host.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "collectives/device_collectives.h"
#include "pjrt/buffer.h"

namespace torch_tpu::distributed {

class DeviceTransport {
 public:
  // The transport of a group of `size` ranks when the runtime's client spans exactly those
  // processes with this one as `rank` (rank r = process r); nullptr otherwise (the CPU plugin
  // with several processes: collectives then go through the host). Starts the runtime.
  static std::unique_ptr<DeviceTransport> ForGroup(int rank, int size);

  // Whether the device path takes these tensors: non-empty tpu tensors of a dtype the device has,
  // on this process's device of the group.
  bool Accepts(const std::vector<at::Tensor>& tensors) const;

  // A tensor's values as the program's operand, captured when the collective is issued (later
  // writes to the tensor do not change them): its storage's buffer when the tensor is its whole
  // storage, else that of a dense copy.
  struct Operand {
    std::shared_ptr<pjrt::PjrtBuffer> buffer;
    int64_t numel = 0;
    stablehlo::ElementType type = stablehlo::ElementType::kF32;
  };
  Operand Capture(const at::Tensor& tensor) const;

  // Runs `spec` (dims and element type taken from `operand`) and makes its result the values of
  // `output` (whose element count must be the result's); waits for the device, up to `timeout`
  // (a rank that died inside the program leaves the others' programs waiting for it: they then
  // raise instead of hanging).
  void Run(collectives::CollectiveSpec spec, const Operand& operand, const at::Tensor& output,
           std::chrono::milliseconds timeout);

 private:
  explicit DeviceTransport(std::unique_ptr<collectives::DeviceCollectives> collectives,
                           int device_index);
  std::unique_ptr<collectives::DeviceCollectives> collectives_;
  int device_index_;  // this process's device of the group, as a tpu device index
};

}  // namespace torch_tpu::distributed

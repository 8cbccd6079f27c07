// The Work of a coalescing block (torch.distributed's _coalescing_manager): done when every
// collective issued inside the block is done, failed with the first failure among them.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <vector>

namespace torch_tpu::distributed {

class CoalescedWork : public c10d::Work {
 public:
  CoalescedWork(int rank, std::vector<c10::intrusive_ptr<c10d::Work>> works);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  bool wait(std::chrono::milliseconds timeout = ::kNoTimeout) override;
  void synchronize() override {}
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace torch_tpu::distributed

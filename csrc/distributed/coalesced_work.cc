#include "distributed/coalesced_work.h"

#include <ATen/core/ivalue.h>

#include <algorithm>
#include <atomic>
#include <memory>

namespace torch_tpu::distributed {
namespace {

// The tpu devices of the works' results: a future must name the devices its value lives on.
std::vector<c10::Device> ResultDevices(const std::vector<c10::intrusive_ptr<c10d::Work>>& works) {
  std::vector<c10::Device> devices;
  for (const auto& work : works) {
    for (const at::Tensor& tensor : work->result()) {
      const c10::Device device = tensor.device();
      if (device.is_privateuseone() &&
          std::find(devices.begin(), devices.end(), device) == devices.end()) {
        devices.push_back(device);
      }
    }
  }
  return devices;
}

}  // namespace

CoalescedWork::CoalescedWork(int rank, std::vector<c10::intrusive_ptr<c10d::Work>> works)
    : c10d::Work(rank, c10d::OpType::COALESCED),
      works_(std::move(works)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()), ResultDevices(works_))) {
  if (works_.empty()) {
    future_->markCompleted(c10::IValue(std::vector<at::Tensor>{}));
    return;
  }
  // The block's future completes once the last of its works' futures does.
  auto remaining = std::make_shared<std::atomic<size_t>>(works_.size());
  auto future = future_;
  // Each callback holds the members until it ran (a future drops its callbacks once completed).
  auto members = works_;
  for (const auto& work : works_) {
    work->getFuture()->addCallback([remaining, future, members](c10::ivalue::Future&) {
      if (remaining->fetch_sub(1) != 1) return;
      for (const auto& each : members) {
        if (each->getFuture()->hasError()) {
          future->setError(each->getFuture()->exception_ptr());
          return;
        }
      }
      std::vector<at::Tensor> outputs;
      for (const auto& each : members) {
        for (const at::Tensor& tensor : each->result()) outputs.push_back(tensor);
      }
      future->markCompleted(c10::IValue(outputs));
    });
  }
}

bool CoalescedWork::isCompleted() { return future_->completed(); }

bool CoalescedWork::isSuccess() const { return future_->completed() && !future_->hasError(); }

std::exception_ptr CoalescedWork::exception() const {
  return future_->completed() && future_->hasError() ? future_->exception_ptr() : nullptr;
}

std::vector<at::Tensor> CoalescedWork::result() {
  std::vector<at::Tensor> outputs;
  for (const auto& work : works_) {
    for (const at::Tensor& tensor : work->result()) outputs.push_back(tensor);
  }
  return outputs;
}

bool CoalescedWork::wait(std::chrono::milliseconds timeout) {
  // Each work names itself (collective, rank, missing peers) when it fails or times out.
  for (const auto& work : works_) work->wait(timeout);
  return true;
}

}  // namespace torch_tpu::distributed

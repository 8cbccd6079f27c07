#include "distributed/completion_queue.h"

namespace torch_tpu::distributed {

CompletionQueue::CompletionQueue(c10d::Backend& host, PeerChannel& peers)
    : host_(host), peers_(peers), thread_([this] { Loop(); }) {}

CompletionQueue::~CompletionQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  thread_.join();
}

void CompletionQueue::Push(c10::intrusive_ptr<TpuDistWork> work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(work));
  }
  ready_.notify_one();
}

void CompletionQueue::CompleteHereOrPush(c10::intrusive_ptr<TpuDistWork> work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completing_ || !queue_.empty()) {
      queue_.push_back(std::move(work));
      ready_.notify_one();
      return;
    }
    completing_ = true;
  }
  work->Complete(host_, peers_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    completing_ = false;
  }
  ready_.notify_one();  // works queued meanwhile
}

bool CompletionQueue::Idle() {
  std::lock_guard<std::mutex> lock(mutex_);
  return !completing_ && queue_.empty();
}

void CompletionQueue::Loop() {
  while (true) {
    c10::intrusive_ptr<TpuDistWork> work;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [&] { return (stopping_ || !queue_.empty()) && !completing_; });
      if (queue_.empty()) return;
      work = std::move(queue_.front());
      queue_.pop_front();
      completing_ = true;
    }
    work->Complete(host_, peers_);
    std::lock_guard<std::mutex> lock(mutex_);
    completing_ = false;
  }
}

}  // namespace torch_tpu::distributed

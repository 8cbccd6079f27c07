#include "distributed/progress_log.h"

#include <c10/util/StringUtil.h>

#include <sstream>
#include <vector>

namespace torch_tpu::distributed {
namespace {

std::string Encode(const CollectiveRecord& record) {
  return std::to_string(record.sequence) + "\n" + record.op + "\n" + record.signature;
}

bool Decode(const std::vector<uint8_t>& bytes, CollectiveRecord& record) {
  const std::string text(bytes.begin(), bytes.end());
  const size_t first = text.find('\n');
  const size_t second = first == std::string::npos ? first : text.find('\n', first + 1);
  if (second == std::string::npos) return false;
  record.sequence = std::stoull(text.substr(0, first));
  record.op = text.substr(first + 1, second - first - 1);
  record.signature = text.substr(second + 1);
  return true;
}

}  // namespace

ProgressLog::ProgressLog(c10::intrusive_ptr<c10d::Store> store, int rank, int size)
    : store_(std::move(store)), rank_(rank), size_(size), writer_([this] { Writer(); }) {}

ProgressLog::~ProgressLog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  pending_ready_.notify_all();
  writer_.join();
}

void ProgressLog::Writer() {
  while (true) {
    CollectiveRecord record;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      pending_ready_.wait(lock, [&] { return stopping_ || pending_.has_value(); });
      if (!pending_) return;
      record = std::move(*pending_);
      pending_.reset();
    }
    const std::string value = Encode(record);
    try {
      store_->set(Key(rank_), std::vector<uint8_t>(value.begin(), value.end()));
    } catch (const std::exception&) {
      // Progress only serves to diagnose failures; an unreachable store is reported then.
    }
  }
}

std::string ProgressLog::Key(int rank) const { return "tpu_dist_progress/" + std::to_string(rank); }

void ProgressLog::Reached(const CollectiveRecord& record) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_ = record;
  }
  pending_ready_.notify_one();
}

std::string ProgressLog::Diagnose(const CollectiveRecord& record) const {
  std::vector<std::string> behind;
  std::vector<std::string> different;
  try {
    // Peers publish asynchronously: wait (briefly) until each has reached this collective.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    for (int rank = 0; rank < size_; ++rank) {
      if (rank == rank_) continue;
      CollectiveRecord theirs;
      while (std::chrono::steady_clock::now() < deadline &&
             !(store_->check({Key(rank)}) && Decode(store_->get(Key(rank)), theirs) &&
               theirs.sequence >= record.sequence)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    for (int rank = 0; rank < size_; ++rank) {
      if (rank == rank_) continue;
      CollectiveRecord theirs;
      // check() never blocks; get() would wait for a key that a dead rank never writes.
      if (!store_->check({Key(rank)}) || !Decode(store_->get(Key(rank)), theirs) ||
          theirs.sequence < record.sequence) {
        behind.push_back(std::to_string(rank));
      } else if (theirs.sequence == record.sequence &&
                 (theirs.op != record.op || theirs.signature != record.signature)) {
        different.push_back("rank " + std::to_string(rank) + " called " + theirs.op + " with " +
                            theirs.signature + " where rank " + std::to_string(rank_) +
                            " has " + record.signature);
      }
    }
  } catch (const std::exception& error) {
    // The store lives in rank 0's process (torchrun's TCPStore); when that rank is gone there is
    // nobody left to ask.
    return "the other ranks' progress is unknown (store unreachable: " +
           std::string(error.what()).substr(0, std::string(error.what()).find('\n')) + ")";
  }
  if (!behind.empty()) {
    return (behind.size() == 1 ? "rank " : "ranks ") + c10::Join(", ", behind) +
           " did not reach it";
  }
  return c10::Join("; ", different);
}

std::string DescribeTensors(const std::vector<at::Tensor>& tensors) {
  std::ostringstream text;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (i > 0) text << ", ";
    text << c10::toString(tensors[i].scalar_type()) << tensors[i].sizes();
  }
  return text.str();
}

}  // namespace torch_tpu::distributed

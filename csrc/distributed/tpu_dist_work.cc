#include "distributed/tpu_dist_work.h"

#include <c10/util/Exception.h>

#include "profiler/device_trace.h"

namespace torch_tpu::distributed {
namespace {

std::string FirstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

std::exception_ptr BackendError(const std::string& message) {
  try {
    C10_THROW_ERROR(DistBackendError, message);
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace

TpuDistWork::TpuDistWork(int rank, c10d::OpType type, Launch launch,
                         std::chrono::milliseconds timeout, const PeerChannel* peers,
                         std::vector<c10::Device> devices)
    : c10d::Work(rank, type),
      rank_(rank),
      launch_(std::move(launch)),
      timeout_(timeout),
      peers_(peers),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()), devices)) {
  if (profiler::Active()) {
    launch_.profiled_since = profiler::NowNs();
    launch_.profiler_correlation = profiler::CurrentCorrelation();
    profiled_device_ = devices.empty() ? 0 : devices.front().index();
  }
}

bool TpuDistWork::isCompleted() {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool TpuDistWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !error_;
}

std::exception_ptr TpuDistWork::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

std::vector<at::Tensor> TpuDistWork::result() { return launch_.outputs; }

int TpuDistWork::sourceRank() const {
  // recv from any rank: the transport knows who sent.
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(launch_.host_work, "tpu_dist: sourceRank of a ", launch_.record.op,
              " that has not run");
  return launch_.host_work->sourceRank();
}

std::exception_ptr TpuDistWork::Failure(
    const std::string& cause, std::optional<std::chrono::milliseconds> timed_out_after) const {
  std::string message = "tpu_dist " + launch_.record.op;
  if (launch_.collective) {
    message += " #" + std::to_string(launch_.record.sequence);
  } else {
    message += " " + launch_.peer;
  }
  message += " on rank " + std::to_string(rank_);
  message += timed_out_after
                 ? " timed out after " + std::to_string(timed_out_after->count()) + " ms"
                 : " failed";
  const std::string diagnosis =
      launch_.collective && peers_ != nullptr ? peers_->Diagnose(launch_.record) : "";
  // The first line says what went wrong: the ranks' disagreement when there is one, else the
  // transport's own words.
  if (!diagnosis.empty()) return BackendError(message + ": " + diagnosis + "\n" + cause);
  return BackendError(message + ": " + cause);
}

void TpuDistWork::Finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) return;
    completed_ = true;
    error_ = error;
  }
  done_.notify_all();
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(launch_.outputs));
  }
}

namespace {

class FinishedWork : public c10d::Work {
 public:
  FinishedWork() { finish(); }
};

}  // namespace

c10::intrusive_ptr<c10d::Work> CompletedWork() { return c10::make_intrusive<FinishedWork>(); }

void TpuDistWork::Complete(c10d::Backend& host, PeerChannel& peers) {
  std::exception_ptr error;
  try {
    // Announced when issued; reading the device values (a memcpy where the host tensor is
    // private) overlaps the peers' records' way here.
    launch_.staging.Prepare();
    if (launch_.collective) {
      switch (peers.Await(launch_.record, timeout_)) {
        case PeerChannel::Outcome::kAgreed:
          break;
        case PeerChannel::Outcome::kDiffers:
          Finish(Failure("the ranks' calls differ", std::nullopt));
          return;
        case PeerChannel::Outcome::kPeerGone:
          Finish(Failure("a rank closed its connection", std::nullopt));
          return;
        case PeerChannel::Outcome::kTimedOut:
          Finish(Failure("not every rank made the call in time", timeout_));
          return;
      }
    }
    c10::intrusive_ptr<c10d::Work> work;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      work = launch_.host_work;
    }
    if (!work) {
      work = launch_.run(host);
      std::lock_guard<std::mutex> lock(mutex_);
      launch_.host_work = work;
    }
    work->wait(timeout_);
    if (launch_.finish) launch_.finish(launch_.staging);
    launch_.staging.WriteBack();
  } catch (const std::exception& transport_error) {
    const std::string cause = FirstLine(transport_error.what());
    // Gloo reports an expired deadline as "Timed out waiting <n>ms for ...".
    const bool timed_out = cause.find("Timed out") != std::string::npos ||
                           cause.find("timed out") != std::string::npos;
    error = Failure(launch_.transport + ": " + cause,
                    timed_out ? std::optional(timeout_) : std::nullopt);
  }
  if (launch_.profiled_since != 0) {
    // From its issue to its results written back: what the caller's stream would wait for.
    const profiler::CorrelationScope issued_in(launch_.profiler_correlation);
    profiler::RecordSpan(profiler::EventKind::kCollective, launch_.record.op,
                         launch_.record.signature, profiled_device_, 0, launch_.profiled_since);
  }
  Finish(error);
}

bool TpuDistWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  // Without a deadline of the caller's, the transport's own (the group's timeout) ends the wait.
  if (timeout == ::kNoTimeout) {
    done_.wait(lock, [&] { return completed_; });
  } else if (!done_.wait_for(lock, timeout, [&] { return completed_; })) {
    lock.unlock();
    std::rethrow_exception(Failure("the transport did not complete it in time", timeout));
  }
  if (error_) std::rethrow_exception(error_);
  return true;
}

}  // namespace torch_tpu::distributed

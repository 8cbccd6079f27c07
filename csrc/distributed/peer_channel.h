// The ranks of a group agree on each collective before the host transport sees it, over TCP
// connections of their own between every pair of ranks: each rank sends every peer what it calls
// (op, dtypes, shapes) and reads theirs from the caller's thread, with no worker thread and no
// store in between. Gloo aborts the process on mismatched buffer sizes, so a mismatch must be
// caught before the data moves; the check costs one one-way latency of a tiny message. A failed
// or timed-out collective names the ranks that never joined it (dead or hung) or that joined it
// with different tensors, from what each peer sent last.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace torch_tpu::distributed {

// What one rank called as its `sequence`-th collective of the group.
struct CollectiveRecord {
  uint64_t sequence = 0;
  std::string op;         // "allreduce"
  std::string signature;  // the tensors' dtypes and shapes: "float[4, 8]"
};

class PeerChannel {
 public:
  // Connects this rank with every other one (addresses through the group's store); waits up to
  // `timeout` for them.
  PeerChannel(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
              std::chrono::milliseconds timeout);
  ~PeerChannel();
  PeerChannel(const PeerChannel&) = delete;
  PeerChannel& operator=(const PeerChannel&) = delete;

  enum class Outcome : uint8_t {
    kAgreed,    // every rank makes this call
    kDiffers,   // some rank calls something else as this collective
    kPeerGone,  // some rank closed its connection before sending this collective
    kTimedOut,  // some rank sent nothing for it within the timeout
  };
  // Sends `record` to every peer, in sequence order (from any thread).
  void Announce(const CollectiveRecord& record);
  // Reads each peer's record of the same sequence as `record` (announced before); work done in
  // between overlaps the peers' latency. In sequence order, from one thread at a time (which
  // may be another than Announce's).
  Outcome Await(const CollectiveRecord& record, std::chrono::milliseconds timeout);

  // Why `record` failed as far as the peers' records tell: "rank 1 did not reach it", "rank 1
  // called allgather with Float[8] where rank 0 has Float[4]", or "" when every rank reached the
  // same call. Safe while another thread is in Exchange.
  std::string Diagnose(const CollectiveRecord& record) const;

 private:
  // A connected socket, closed with its owner.
  class Socket {
   public:
    explicit Socket(int fd = -1) : fd_(fd) {}
    Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
    Socket& operator=(Socket&& other) noexcept;
    Socket(const Socket&) = delete;
    Socket& operator=(const Socket&) = delete;
    ~Socket();
    int fd() const { return fd_; }

   private:
    int fd_;
  };
  struct Peer {
    int rank = -1;
    Socket socket;
    std::string received;     // bytes of a record not yet complete
    CollectiveRecord latest;  // the last complete record (sequence 0: none yet)
    bool closed = false;  // Await's: Announce still sends (a failed send changes nothing)
  };
  // Reads what `peer` has sent into its buffer; false when it closed the connection.
  static bool Receive(Peer& peer);
  // Takes the peer's buffered records up to the one numbered `sequence` (later ones stay
  // buffered for the next collectives).
  void Parse(Peer& peer, uint64_t sequence);

  int rank_;
  std::vector<Peer> peers_;
  mutable std::mutex mutex_;  // guards the peers' `latest` and `closed` against Diagnose
  std::mutex sending_;        // one record on the wire at a time
};

// "float[4, 8]" for each tensor, joined with ", ".
std::string DescribeTensors(const std::vector<at::Tensor>& tensors);

}  // namespace torch_tpu::distributed

#include "distributed/peer_channel.h"

#include <arpa/inet.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>

namespace torch_tpu::distributed {
namespace {

using Clock = std::chrono::steady_clock;

// A record on the wire: its sequence, the length of its text, then "op\nsignature".
constexpr size_t kHeaderBytes = sizeof(uint64_t) + sizeof(uint32_t);

int Checked(int result, const char* what) {
  TORCH_CHECK(result >= 0, "tpu_dist: setting up the connections between ranks: ", what,
              " failed: ", std::strerror(errno));
  return result;
}

std::string Key(int rank) { return "tpu_dist_channel/" + std::to_string(rank); }

// The IPv4 address of the first interface GLOO_SOCKET_IFNAME names ("eth0" or "eth0,eth1").
std::string InterfaceAddress(const std::string& names) {
  const std::string name = names.substr(0, names.find(','));
  ifaddrs* raw = nullptr;
  Checked(getifaddrs(&raw), "getifaddrs");
  const std::unique_ptr<ifaddrs, decltype(&freeifaddrs)> list(raw, &freeifaddrs);
  for (const ifaddrs* entry = list.get(); entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET ||
        name != entry->ifa_name) {
      continue;
    }
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(entry->ifa_addr)->sin_addr, text,
              sizeof(text));
    return text;
  }
  TORCH_CHECK(false, "tpu_dist: GLOO_SOCKET_IFNAME=", names, ": no IPv4 address on interface ",
              name);
}

// The IPv4 address peers on other hosts reach this process at. It follows Gloo's choice (the
// host transport's connections go there too, so where Gloo connects, so do these): the
// interface GLOO_SOCKET_IFNAME names, else the address the hostname resolves to.
std::string ThisHostAddress() {
  if (const char* names = std::getenv("GLOO_SOCKET_IFNAME"); names != nullptr && *names != '\0') {
    return InterfaceAddress(names);
  }
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "127.0.0.1";
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* raw = nullptr;
  if (getaddrinfo(name, nullptr, &hints, &raw) != 0 || raw == nullptr) return "127.0.0.1";
  const std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> found(raw, &freeaddrinfo);
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, text,
            sizeof(text));
  return text;
}

int Milliseconds(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left, INT32_MAX)));
}

void NoDelay(int fd) {
  const int on = 1;
  Checked(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on)), "setsockopt(TCP_NODELAY)");
}

// False when the peer is gone (or the connection broke).
bool SendAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t sent = send(fd, data, size, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return false;
    data += sent;
    size -= static_cast<size_t>(sent);
  }
  return true;
}

// Connects `fd` to `address` before `deadline` (a host that is down or unroutable would
// otherwise hold a blocking connect for minutes, past the group's timeout). `who` names the peer.
void ConnectBefore(int fd, const sockaddr_in& address, Clock::time_point deadline,
                   const std::string& who) {
  const int flags = Checked(fcntl(fd, F_GETFL), "fcntl");
  Checked(fcntl(fd, F_SETFL, flags | O_NONBLOCK), "fcntl");
  int error = 0;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    error = errno;
    if (error == EINPROGRESS || error == EINTR) {  // either way the connection goes on
      pollfd ready{fd, POLLOUT, 0};
      int polled;
      do {
        polled = poll(&ready, 1, Milliseconds(deadline));
      } while (polled < 0 && errno == EINTR);
      Checked(polled, "poll");
      socklen_t length = sizeof(error);
      error = polled == 0 ? ETIMEDOUT : 0;
      if (polled > 0) Checked(getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length), "getsockopt");
    }
  }
  TORCH_CHECK(error == 0, "tpu_dist: setting up the connections between ranks: connecting to ",
              who, " failed: ", std::strerror(error),
              ". Ranks reach each other at the address of GLOO_SOCKET_IFNAME's interface, else of "
              "their hostname; set GLOO_SOCKET_IFNAME to the interface the nodes share.");
  Checked(fcntl(fd, F_SETFL, flags), "fcntl");
}

// Setup only: reads exactly `size` bytes before `deadline`.
void ReceiveAll(int fd, char* data, size_t size, Clock::time_point deadline) {
  while (size > 0) {
    pollfd ready{fd, POLLIN, 0};
    TORCH_CHECK(Checked(poll(&ready, 1, Milliseconds(deadline)), "poll") > 0,
                "tpu_dist: setting up the connections between ranks: a peer sent nothing in time");
    const ssize_t got = recv(fd, data, size, 0);
    if (got < 0 && errno == EINTR) continue;
    TORCH_CHECK(got > 0, "tpu_dist: setting up the connections between ranks: a peer closed its "
                "connection");
    data += got;
    size -= static_cast<size_t>(got);
  }
}

}  // namespace

PeerChannel::Socket& PeerChannel::Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

PeerChannel::Socket::~Socket() {
  if (fd_ >= 0) close(fd_);
}

PeerChannel::PeerChannel(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                         std::chrono::milliseconds timeout)
    : rank_(rank) {
  if (size <= 1) return;
  const auto deadline = Clock::now() + timeout;
  Socket listener(Checked(socket(AF_INET, SOCK_STREAM, 0), "socket"));
  const int on = 1;
  Checked(setsockopt(listener.fd(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)), "setsockopt");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  Checked(bind(listener.fd(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), "bind");
  Checked(listen(listener.fd(), size), "listen");
  socklen_t length = sizeof(address);
  Checked(getsockname(listener.fd(), reinterpret_cast<sockaddr*>(&address), &length),
          "getsockname");
  const std::string published = ThisHostAddress() + ":" + std::to_string(ntohs(address.sin_port));
  store->set(Key(rank), std::vector<uint8_t>(published.begin(), published.end()));

  // Each rank connects to the lower ranks (whose listeners exist once published) and accepts
  // the higher ones; a connection starts with the connecting rank's number.
  for (int lower = 0; lower < rank; ++lower) {
    const std::vector<uint8_t> value = store->get(Key(lower));
    const std::string text(value.begin(), value.end());
    const size_t colon = text.rfind(':');
    sockaddr_in peer_address{};
    peer_address.sin_family = AF_INET;
    peer_address.sin_port = htons(static_cast<uint16_t>(std::stoi(text.substr(colon + 1))));
    TORCH_CHECK(inet_pton(AF_INET, text.substr(0, colon).c_str(), &peer_address.sin_addr) == 1,
                "tpu_dist: rank ", lower, " published an unreadable address: ", text);
    Peer peer;
    peer.rank = lower;
    peer.socket = Socket(Checked(socket(AF_INET, SOCK_STREAM, 0), "socket"));
    ConnectBefore(peer.socket.fd(), peer_address, deadline,
                  "rank " + std::to_string(lower) + " at " + text);
    NoDelay(peer.socket.fd());
    const int32_t hello = rank;
    TORCH_CHECK(SendAll(peer.socket.fd(), reinterpret_cast<const char*>(&hello), sizeof(hello)),
                "tpu_dist: setting up the connections between ranks: rank ", lower,
                " closed its connection");
    peers_.push_back(std::move(peer));
  }
  for (int higher = rank + 1; higher < size; ++higher) {
    pollfd ready{listener.fd(), POLLIN, 0};
    TORCH_CHECK(Checked(poll(&ready, 1, Milliseconds(deadline)), "poll") > 0,
                "tpu_dist: setting up the connections between ranks: rank ", rank,
                " was not reached by every higher rank within ", timeout.count(), " ms");
    Peer peer;
    peer.socket = Socket(Checked(accept(listener.fd(), nullptr, nullptr), "accept"));
    NoDelay(peer.socket.fd());
    int32_t hello = -1;
    ReceiveAll(peer.socket.fd(), reinterpret_cast<char*>(&hello), sizeof(hello), deadline);
    TORCH_CHECK(hello > rank && hello < size, "tpu_dist: a connection from an unknown rank (",
                hello, ")");
    peer.rank = hello;
    peers_.push_back(std::move(peer));
  }
  // Higher ranks connect in any order; errors name ranks in order.
  std::sort(peers_.begin(), peers_.end(),
            [](const Peer& a, const Peer& b) { return a.rank < b.rank; });
}

PeerChannel::~PeerChannel() = default;

bool PeerChannel::Receive(Peer& peer) {
  char chunk[4096];
  while (true) {
    const ssize_t got = recv(peer.socket.fd(), chunk, sizeof(chunk), MSG_DONTWAIT);
    if (got > 0) {
      peer.received.append(chunk, static_cast<size_t>(got));
      if (static_cast<size_t>(got) < sizeof(chunk)) return true;
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;  // closed, or reset by a rank that died
  }
}

void PeerChannel::Parse(Peer& peer, uint64_t sequence) {
  size_t used = 0;
  while (peer.latest.sequence < sequence && peer.received.size() - used >= kHeaderBytes) {
    uint64_t number = 0;
    uint32_t length = 0;
    std::memcpy(&number, peer.received.data() + used, sizeof(number));
    std::memcpy(&length, peer.received.data() + used + sizeof(number), sizeof(length));
    if (peer.received.size() - used - kHeaderBytes < length) break;
    const std::string text = peer.received.substr(used + kHeaderBytes, length);
    used += kHeaderBytes + length;
    const size_t newline = text.find('\n');
    std::lock_guard<std::mutex> lock(mutex_);
    peer.latest.sequence = number;
    peer.latest.op = text.substr(0, newline);
    peer.latest.signature = newline == std::string::npos ? "" : text.substr(newline + 1);
  }
  peer.received.erase(0, used);
}

void PeerChannel::Announce(const CollectiveRecord& record) {
  if (peers_.empty()) return;
  const std::string text = record.op + "\n" + record.signature;
  const auto length = static_cast<uint32_t>(text.size());
  std::string message(kHeaderBytes, '\0');
  std::memcpy(message.data(), &record.sequence, sizeof(record.sequence));
  std::memcpy(message.data() + sizeof(record.sequence), &length, sizeof(length));
  message += text;
  // A failed send means the peer is gone; reading its connection tells (after what it sent).
  std::lock_guard<std::mutex> lock(sending_);
  for (Peer& peer : peers_) SendAll(peer.socket.fd(), message.data(), message.size());
}

PeerChannel::Outcome PeerChannel::Await(const CollectiveRecord& record,
                                        std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::vector<pollfd> waiting;
  std::vector<Peer*> waiting_peers;
  while (true) {
    waiting.clear();
    waiting_peers.clear();
    for (Peer& peer : peers_) {
      Parse(peer, record.sequence);
      if (!peer.closed && peer.latest.sequence < record.sequence) {
        waiting.push_back({peer.socket.fd(), POLLIN, 0});
        waiting_peers.push_back(&peer);
      }
    }
    if (waiting.empty()) break;
    const int ready = poll(waiting.data(), waiting.size(), Milliseconds(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return Outcome::kTimedOut;
    for (size_t i = 0; i < waiting.size(); ++i) {
      if (waiting[i].revents == 0 || Receive(*waiting_peers[i])) continue;
      Parse(*waiting_peers[i], record.sequence);  // what it sent before closing still counts
      std::lock_guard<std::mutex> lock(mutex_);
      waiting_peers[i]->closed = true;
    }
  }
  Outcome outcome = Outcome::kAgreed;
  for (const Peer& peer : peers_) {
    if (peer.latest.sequence < record.sequence) return Outcome::kPeerGone;
    if (peer.latest.op != record.op || peer.latest.signature != record.signature) {
      outcome = Outcome::kDiffers;
    }
  }
  return outcome;
}

std::string PeerChannel::Diagnose(const CollectiveRecord& record) const {
  std::vector<std::string> behind;
  std::vector<std::string> different;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Peer& peer : peers_) {
    if (peer.latest.sequence < record.sequence) {
      behind.push_back(std::to_string(peer.rank));
    } else if (peer.latest.sequence == record.sequence &&
               (peer.latest.op != record.op || peer.latest.signature != record.signature)) {
      different.push_back("rank " + std::to_string(peer.rank) + " called " + peer.latest.op +
                          " with " + peer.latest.signature + " where rank " +
                          std::to_string(rank_) + " has " + record.signature);
    }
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

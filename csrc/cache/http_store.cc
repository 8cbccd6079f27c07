// A deliberately small HTTP/1.1 client: one request per connection ("Connection: close"), bodies
// by Content-Length or chunked, every connect/send/receive bounded by the store's timeout so an
// unreachable or stalled server costs at most that long. https:// runs the same exchange over
// TLS (cache/tls_session.h).
#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "cache/entry_store.h"
#include "cache/socket_wait.h"
#include "cache/tls_session.h"

namespace torch_tpu::cache {
namespace {

// Larger responses are not executables we wrote; refuse rather than buffer without bound.
constexpr size_t kMaxResponseBytes = size_t{2} << 30;

class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

int ConnectWithDeadline(const std::string& host, const std::string& port,
                        Clock::time_point deadline, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addresses = nullptr;
  // getaddrinfo has no timeout of its own; numeric hosts and /etc/hosts names resolve at once.
  if (const int status = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &addresses);
      status != 0) {
    error = "cannot resolve " + host + ": " + ::gai_strerror(status);
    return -1;
  }
  int connected = -1;
  for (addrinfo* address = addresses; address != nullptr && connected < 0;
       address = address->ai_next) {
    const int fd = ::socket(address->ai_family, address->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                            address->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, address->ai_addr, address->ai_addrlen) == 0) {
      connected = fd;
      break;
    }
    if (errno == EINPROGRESS && WaitFor(fd, POLLOUT, deadline)) {
      int socket_error = 0;
      socklen_t length = sizeof(socket_error);
      if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &socket_error, &length) == 0 &&
          socket_error == 0) {
        connected = fd;
        break;
      }
      errno = socket_error;
    }
    error =
        "cannot connect to " + host + ":" + port + ": " +
        (RemainingMilliseconds(deadline) == 0 ? std::string("timed out") : std::strerror(errno));
    ::close(fd);
  }
  ::freeaddrinfo(addresses);
  return connected;
}

bool SendAll(int fd, const std::string& data, Clock::time_point deadline) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t sent = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (sent > 0) {
      done += static_cast<size_t>(sent);
    } else if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!WaitFor(fd, POLLOUT, deadline)) return false;
    } else if (!(sent < 0 && errno == EINTR)) {
      return false;
    }
  }
  return true;
}

// Reads until the server closes the connection; false on timeout, error or an oversized reply.
bool ReceiveAll(int fd, std::string& out, Clock::time_point deadline) {
  char chunk[64 * 1024];
  while (true) {
    const ssize_t got = ::recv(fd, chunk, sizeof(chunk), 0);
    if (got > 0) {
      out.append(chunk, static_cast<size_t>(got));
      if (out.size() > kMaxResponseBytes) return false;
    } else if (got == 0) {
      return true;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!WaitFor(fd, POLLIN, deadline)) return false;
    } else if (errno != EINTR) {
      return false;
    }
  }
}

std::string Lowercase(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

bool DecodeChunked(std::string_view body, std::string& out) {
  size_t position = 0;
  while (true) {
    const size_t line_end = body.find("\r\n", position);
    if (line_end == std::string_view::npos) return false;
    size_t size = 0;
    try {
      size = std::stoull(std::string(body.substr(position, line_end - position)), nullptr, 16);
    } catch (const std::exception&) {
      return false;
    }
    position = line_end + 2;
    if (size == 0) return true;
    if (body.size() < position + size + 2) return false;
    out.append(body.substr(position, size));
    position += size + 2;
  }
}

}  // namespace

HttpStore::HttpStore(const std::string& base_url, double timeout_seconds)
    : base_url_(base_url), timeout_seconds_(timeout_seconds) {
  tls_ = base_url.rfind("https://", 0) == 0;
  if (!tls_ && base_url.rfind("http://", 0) != 0) {
    throw std::invalid_argument("TORCH_TPU_CACHE_DIR=" + base_url +
                                ": not an http:// or https:// URL");
  }
  const std::string rest = base_url.substr(tls_ ? 8 : 7);
  const size_t slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  path_prefix_ = slash == std::string::npos ? "/" : rest.substr(slash);
  if (path_prefix_.back() != '/') path_prefix_ += '/';
  const size_t colon = authority.rfind(':');
  host_ = authority.substr(0, colon);
  port_ = colon == std::string::npos ? (tls_ ? "443" : "80") : authority.substr(colon + 1);
  if (host_.empty() || port_.empty() ||
      port_.find_first_not_of("0123456789") != std::string::npos) {
    throw std::invalid_argument("TORCH_TPU_CACHE_DIR=" + base_url +
                                ": expected http[s]://host[:port][/path]");
  }
}

std::optional<HttpStore::Response> HttpStore::Exchange(const std::string& method,
                                                       const std::string& path,
                                                       const std::string& body,
                                                       std::string& error) const {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_seconds_));
  const int fd = ConnectWithDeadline(host_, port_, deadline, error);
  if (fd < 0) return std::nullopt;
  Socket socket(fd);
  std::unique_ptr<TlsSession> tls;
  if (tls_ && !(tls = TlsSession::Open(fd, host_, deadline, error))) {
    error = method + " " + base_url_ + ": " + error;
    return std::nullopt;
  }
  std::string request = method + " " + path + " HTTP/1.1\r\nHost: " + host_ + ":" + port_ +
                        "\r\nUser-Agent: torch_tpu\r\nConnection: close\r\n";
  if (method == "PUT") {
    request +=
        "Content-Type: application/octet-stream\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n";
  }
  request += "\r\n";
  request += body;
  if (!(tls ? tls->SendAll(request, deadline) : SendAll(fd, request, deadline))) {
    error = method + " " + base_url_ + ": sending timed out or failed";
    return std::nullopt;
  }
  std::string raw;
  if (!(tls ? tls->ReceiveAll(raw, deadline, kMaxResponseBytes) : ReceiveAll(fd, raw, deadline))) {
    std::ostringstream message;
    message << method << " " << base_url_ << ": no complete answer within " << timeout_seconds_
            << " s";
    error = message.str();
    return std::nullopt;
  }
  const size_t header_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || header_end == std::string::npos || raw.size() < 12) {
    error = method + " " + base_url_ + ": malformed HTTP response";
    return std::nullopt;
  }
  Response response;
  response.status = std::atoi(raw.c_str() + 9);
  const std::string headers = Lowercase(raw.substr(0, header_end));
  std::string_view payload(raw);
  payload.remove_prefix(header_end + 4);
  if (headers.find("transfer-encoding: chunked") != std::string::npos) {
    if (!DecodeChunked(payload, response.body)) {
      error = method + " " + base_url_ + ": truncated chunked response";
      return std::nullopt;
    }
  } else {
    response.body.assign(payload);
    const size_t length_at = headers.find("content-length:");
    if (length_at != std::string::npos &&
        std::strtoull(headers.c_str() + length_at + 15, nullptr, 10) != response.body.size()) {
      error = method + " " + base_url_ + ": response shorter than its Content-Length";
      return std::nullopt;
    }
  }
  return response;
}

StoreResult HttpStore::Read(const std::string& digest, StoredKind kind) {
  std::string error;
  auto response = Exchange("GET", path_prefix_ + digest + SuffixOf(kind), "", error);
  if (!response) return {StoreResult::kUnavailable, error};
  if (response->status == 404) return {StoreResult::kMissing, ""};
  if (response->status != 200) {
    return {StoreResult::kUnavailable,
            "GET " + base_url_ + " answered HTTP " + std::to_string(response->status)};
  }
  return {StoreResult::kFound, std::move(response->body)};
}

std::string HttpStore::Write(const std::string& digest, const std::string& bytes,
                             StoredKind kind) {
  std::string error;
  auto response = Exchange("PUT", path_prefix_ + digest + SuffixOf(kind), bytes, error);
  if (!response) return error;
  if (response->status < 200 || response->status >= 300) {
    return "PUT " + base_url_ + " answered HTTP " + std::to_string(response->status);
  }
  return "";
}

std::string HttpStore::Clear() {
  return "an http(s):// cache cannot be listed, so clear_cache cannot empty it; delete the entries "
         "on the server (" +
         base_url_ + ")";
}

}  // namespace torch_tpu::cache

// A deliberately small HTTP/1.1 client: one request per connection ("Connection: close"), bodies
// by Content-Length or chunked, every connect/send/receive bounded by the store's timeout so an
// unreachable or stalled server costs at most that long. https:// runs the same exchange over
// TLS (cache/tls_session.h).
#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <limits>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "cache/entry_store.h"
#include "cache/file_descriptor.h"
#include "cache/socket_wait.h"
#include "cache/tls_session.h"

namespace torch_tpu::cache {
namespace {

// Room for a response's status line and headers beyond the entry it carries.
constexpr size_t kMaxHeaderBytes = 64 * 1024;

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

enum class Received { kComplete, kFailed, kTooLarge };

// The Content-Length a complete header block announces; nullopt when it announces none or
// something unparsable (then the body's length decides).
std::optional<uint64_t> AnnouncedLength(std::string_view headers_lowercase) {
  const size_t at = headers_lowercase.find("\r\ncontent-length:");
  if (at == std::string_view::npos) return std::nullopt;
  size_t position = at + 17;
  while (position < headers_lowercase.size() && headers_lowercase[position] == ' ') ++position;
  uint64_t value = 0;
  size_t digits = 0;
  for (; position < headers_lowercase.size() && std::isdigit(static_cast<unsigned char>(
                                                    headers_lowercase[position]));
       ++position, ++digits) {
    if (digits == 19) return std::numeric_limits<uint64_t>::max();  // past any we would accept
    value = value * 10 + static_cast<uint64_t>(headers_lowercase[position] - '0');
  }
  if (digits == 0) return std::nullopt;
  return value;
}

std::string Lowercase(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// Reads until the server closes the connection. Stops as soon as the answer is known to pass
// `limit` bytes (an announced Content-Length over it, or that many bytes received): a hostile or
// broken server cannot make the process buffer without bound.
Received ReceiveAll(int fd, std::string& out, Clock::time_point deadline, size_t limit) {
  char chunk[64 * 1024];
  bool headers_checked = false;
  while (true) {
    const ssize_t got = ::recv(fd, chunk, sizeof(chunk), 0);
    if (got > 0) {
      out.append(chunk, static_cast<size_t>(got));
      if (out.size() > limit) return Received::kTooLarge;
      if (!headers_checked) {
        const size_t header_end = out.find("\r\n\r\n");
        if (header_end != std::string::npos) {
          headers_checked = true;
          const std::optional<uint64_t> length =
              AnnouncedLength(Lowercase(out.substr(0, header_end)));
          if (length && *length > limit - kMaxHeaderBytes) {
            return Received::kTooLarge;
          }
        }
      }
    } else if (got == 0) {
      return Received::kComplete;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!WaitFor(fd, POLLIN, deadline)) return Received::kFailed;
    } else if (errno != EINTR) {
      return Received::kFailed;
    }
  }
}


// Decodes a chunked body into `out`, refusing (false) anything malformed: sizes are at most 15 hex
// digits (no overflow), every chunk must fit in what was received and in `limit`.
bool DecodeChunked(std::string_view body, std::string& out, size_t limit) {
  size_t position = 0;
  while (true) {
    const size_t line_end = body.find("\r\n", position);
    if (line_end == std::string_view::npos) return false;
    std::string_view size_text = body.substr(position, line_end - position);
    if (const size_t extension = size_text.find(';'); extension != std::string_view::npos) {
      size_text = size_text.substr(0, extension);
    }
    while (!size_text.empty() && (size_text.back() == ' ' || size_text.back() == '\t')) {
      size_text.remove_suffix(1);
    }
    if (size_text.empty() || size_text.size() > 15) return false;
    uint64_t size = 0;
    for (const char digit : size_text) {
      if (!std::isxdigit(static_cast<unsigned char>(digit))) return false;
      const int lower = std::tolower(static_cast<unsigned char>(digit));
      size = size * 16 + static_cast<uint64_t>(lower <= '9' ? lower - '0' : lower - 'a' + 10);
    }
    position = line_end + 2;
    if (size == 0) return true;
    if (size > limit - std::min(limit, out.size())) return false;
    if (size > body.size() - position || body.size() - position - size < 2) return false;
    out.append(body.substr(position, size));
    position += size + 2;
  }
}

// RFC 3986 percent-decoding of a URL's user information.
std::string PercentDecoded(std::string_view text) {
  std::string decoded;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() &&
        std::isxdigit(static_cast<unsigned char>(text[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      decoded.push_back(static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr,
                                                    16)));
      i += 2;
    } else {
      decoded.push_back(text[i]);
    }
  }
  return decoded;
}

std::string Base64(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string encoded;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t group = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (i + 1 < bytes.size()) group |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) group |= static_cast<unsigned char>(bytes[i + 2]);
    encoded.push_back(kAlphabet[(group >> 18) & 63]);
    encoded.push_back(kAlphabet[(group >> 12) & 63]);
    encoded.push_back(i + 1 < bytes.size() ? kAlphabet[(group >> 6) & 63] : '=');
    encoded.push_back(i + 2 < bytes.size() ? kAlphabet[group & 63] : '=');
  }
  return encoded;
}

}  // namespace

HttpStore::HttpStore(const std::string& base_url, double timeout_seconds,
                     int64_t max_entry_bytes, std::string authorization)
    : max_entry_bytes_(max_entry_bytes),
      authorization_(std::move(authorization)),
      timeout_seconds_(timeout_seconds) {
  tls_ = base_url.rfind("https://", 0) == 0;
  if (!tls_ && base_url.rfind("http://", 0) != 0) {
    // The URL is not echoed: it may hold credentials.
    throw std::invalid_argument("TORCH_TPU_CACHE_DIR: not an http:// or https:// URL");
  }
  const std::string scheme = tls_ ? "https://" : "http://";
  const std::string rest = base_url.substr(scheme.size());
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  path_prefix_ = slash == std::string::npos ? "/" : rest.substr(slash);
  if (path_prefix_.back() != '/') path_prefix_ += '/';
  if (const size_t at = authority.rfind('@'); at != std::string::npos) {
    if (authorization_.empty()) authorization_ = "Basic " + Base64(PercentDecoded(
                                                               authority.substr(0, at)));
    authority = authority.substr(at + 1);
  }
  base_url_ = scheme + (rest.find('@') < slash ? "***@" : "") + authority +
              (slash == std::string::npos ? "" : rest.substr(slash));
  const size_t colon = authority.rfind(':');
  host_ = authority.substr(0, colon);
  port_ = colon == std::string::npos ? (tls_ ? "443" : "80") : authority.substr(colon + 1);
  if (host_.empty() || port_.empty() ||
      port_.find_first_not_of("0123456789") != std::string::npos) {
    throw std::invalid_argument("TORCH_TPU_CACHE_DIR=" + base_url_ +
                                ": expected http[s]://host[:port][/path]");
  }
  if (authorization_.find_first_of("\r\n") != std::string::npos) {
    throw std::invalid_argument(
        "TORCH_TPU_CACHE_AUTHORIZATION: the header value must be one line");
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
  FileDescriptor socket(fd);
  std::unique_ptr<TlsSession> tls;
  if (tls_ && !(tls = TlsSession::Open(fd, host_, deadline, error))) {
    error = method + " " + base_url_ + ": " + error;
    return std::nullopt;
  }
  std::string request = method + " " + path + " HTTP/1.1\r\nHost: " + host_ + ":" + port_ +
                        "\r\nUser-Agent: torch_tpu\r\nConnection: close\r\n";
  if (!authorization_.empty()) request += "Authorization: " + authorization_ + "\r\n";
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
  const size_t limit = static_cast<size_t>(max_entry_bytes_) + kMaxHeaderBytes;
  const Received received =
      tls ? (tls->ReceiveAll(raw, deadline, limit)
                 ? Received::kComplete
                 : (raw.size() > limit ? Received::kTooLarge : Received::kFailed))
          : ReceiveAll(fd, raw, deadline, limit);
  if (received == Received::kTooLarge) {
    Response response;
    response.status = raw.rfind("HTTP/1.", 0) == 0 && raw.size() >= 12 ? std::atoi(raw.c_str() + 9)
                                                                      : 0;
    response.oversized = true;
    return response;
  }
  if (received == Received::kFailed) {
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
    if (!DecodeChunked(payload, response.body, static_cast<size_t>(max_entry_bytes_))) {
      error = method + " " + base_url_ + ": truncated chunked response";
      return std::nullopt;
    }
  } else {
    response.body.assign(payload);
    const std::optional<uint64_t> length = AnnouncedLength(headers);
    if (length && *length != response.body.size()) {
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
  if (response->oversized) {
    return {StoreResult::kRejected,
            "GET " + base_url_ + " answered more than TORCH_TPU_CACHE_MAX_ENTRY_BYTES=" +
                std::to_string(max_entry_bytes_) + " bytes",
            "oversized"};
  }
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
  if (response->oversized) return "PUT " + base_url_ + ": the answer was oversized";
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

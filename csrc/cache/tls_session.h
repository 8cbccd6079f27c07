// TLS over an already connected non-blocking socket (OpenSSL), for https:// cache stores. The
// server's certificate is verified against the system's trust store (OpenSSL honours
// SSL_CERT_FILE / SSL_CERT_DIR) and must name the host; every step is bounded by the caller's
// deadline, like the plain socket I/O beside it.
#pragma once

#include <memory>
#include <string>

#include "cache/socket_wait.h"

typedef struct ssl_st SSL;

namespace torch_tpu::cache {

class TlsSession {
 public:
  // Handshakes with `host` on `fd`; null with `error` set when it fails or times out.
  static std::unique_ptr<TlsSession> Open(int fd, const std::string& host,
                                          Clock::time_point deadline, std::string& error);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  bool SendAll(const std::string& data, Clock::time_point deadline);
  // Reads until the server closes the session; false on timeout, error or more than `limit`.
  bool ReceiveAll(std::string& out, Clock::time_point deadline, size_t limit);

 private:
  TlsSession(int fd, SSL* ssl) : fd_(fd), ssl_(ssl) {}
  // Waits for what OpenSSL asked for after a call returned `result`; false when it failed.
  bool WaitAfter(int result, Clock::time_point deadline);

  int fd_;
  SSL* ssl_;
};

}  // namespace torch_tpu::cache

#include "cache/tls_session.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <mutex>

namespace torch_tpu::cache {
namespace {

// One client context per process: loading the trust store is the expensive part.
SSL_CTX* ClientContext(std::string& error) {
  static std::once_flag once;
  static SSL_CTX* context = nullptr;
  static std::string setup_error;
  std::call_once(once, [] {
    SSL_CTX* created = SSL_CTX_new(TLS_client_method());
    if (created == nullptr) {
      setup_error = "cannot create a TLS context";
      return;
    }
    SSL_CTX_set_min_proto_version(created, TLS1_2_VERSION);
    SSL_CTX_set_verify(created, SSL_VERIFY_PEER, nullptr);
    if (SSL_CTX_set_default_verify_paths(created) != 1) {
      setup_error = "cannot load the system's trusted certificates";
      SSL_CTX_free(created);
      return;
    }
    context = created;
  });
  error = setup_error;
  return context;
}

std::string LastTlsError(const char* what) {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return what;
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return std::string(what) + ": " + text;
}

}  // namespace

std::unique_ptr<TlsSession> TlsSession::Open(int fd, const std::string& host,
                                             Clock::time_point deadline, std::string& error) {
  SSL_CTX* context = ClientContext(error);
  if (context == nullptr) return nullptr;
  SSL* ssl = SSL_new(context);
  if (ssl == nullptr) {
    error = LastTlsError("cannot start a TLS session");
    return nullptr;
  }
  std::unique_ptr<TlsSession> session(new TlsSession(fd, ssl));
  SSL_set_fd(ssl, fd);
  SSL_set_tlsext_host_name(ssl, host.c_str());  // SNI
  // The certificate must name the host (or its IP address, for numeric hosts).
  X509_VERIFY_PARAM* parameters = SSL_get0_param(ssl);
  if (X509_VERIFY_PARAM_set1_ip_asc(parameters, host.c_str()) != 1) {
    X509_VERIFY_PARAM_set1_host(parameters, host.c_str(), 0);
  }
  while (true) {
    const int result = SSL_connect(ssl);
    if (result == 1) return session;
    if (!session->WaitAfter(result, deadline)) {
      const long verification = SSL_get_verify_result(ssl);
      error = verification != X509_V_OK
                  ? std::string("TLS certificate of ") + host +
                        " not trusted: " + X509_verify_cert_error_string(verification)
                  : LastTlsError(("TLS handshake with " + host + " failed or timed out").c_str());
      return nullptr;
    }
  }
}

TlsSession::~TlsSession() { SSL_free(ssl_); }

bool TlsSession::WaitAfter(int result, Clock::time_point deadline) {
  switch (SSL_get_error(ssl_, result)) {
    case SSL_ERROR_WANT_READ:
      return WaitFor(fd_, POLLIN, deadline);
    case SSL_ERROR_WANT_WRITE:
      return WaitFor(fd_, POLLOUT, deadline);
    default:
      return false;
  }
}

bool TlsSession::SendAll(const std::string& data, Clock::time_point deadline) {
  size_t done = 0;
  while (done < data.size()) {
    size_t written = 0;
    const int result = SSL_write_ex(ssl_, data.data() + done, data.size() - done, &written);
    if (result == 1) {
      done += written;
    } else if (!WaitAfter(result, deadline)) {
      return false;
    }
  }
  return true;
}

bool TlsSession::ReceiveAll(std::string& out, Clock::time_point deadline, size_t limit) {
  char chunk[64 * 1024];
  while (true) {
    size_t got = 0;
    const int result = SSL_read_ex(ssl_, chunk, sizeof(chunk), &got);
    if (result == 1) {
      out.append(chunk, got);
      if (out.size() > limit) return false;
      continue;
    }
    const int reason = SSL_get_error(ssl_, result);
    // A server that closes without close_notify after a complete "Connection: close" answer is
    // common; the HTTP layer checks Content-Length or the chunked terminator for truncation.
    if (reason == SSL_ERROR_ZERO_RETURN || reason == SSL_ERROR_SYSCALL) return true;
    if (!WaitAfter(result, deadline)) return false;
  }
}

}  // namespace torch_tpu::cache

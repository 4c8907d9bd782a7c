#pragma once
// TLS for the native HTTP/1.1 client (https:// providers asking for HTTP/1.1): OpenSSL straight on
// the connection's socket (SSL_set_fd, non-blocking), waiting on Asio's reactor only when OpenSSL
// wants to read or write. No memory BIO and no copy in between, no curl state machine: the same
// cost model as the plain path plus the cryptography (DECISIONS.md, "The native client speaks
// TLS"). Contexts are made once per distinct tls: settings; sessions are resumed per pool key.
// Internal to the transport.
#include <openssl/ssl.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "rpcroute/asio_compat.hpp"
#include "rpcroute/config.hpp"

namespace rpcroute::detail {

struct SslFree {
  void operator()(SSL* ssl) const noexcept { SSL_free(ssl); }
};
using SslPtr = std::unique_ptr<SSL, SslFree>;

/// OpenSSL contexts, one per distinct tls: settings (no settings: the system store), and the
/// sessions kept for resumption, one per pool key.
class TlsContexts {
 public:
  struct Context {
    TlsOptions options;
    SSL_CTX* ctx = nullptr;
    std::string error;  // why it cannot be used ("TLS: CA file or folder unusable (…)"); else empty
    std::size_t index = 0;  // distinguishes pool keys of the same host with other settings
  };

  TlsContexts() = default;
  ~TlsContexts();
  TlsContexts(const TlsContexts&) = delete;
  TlsContexts& operator=(const TlsContexts&) = delete;

  /// The context for these settings, made on first use (a handful per process: one per distinct
  /// provider setting).
  const Context& get(const TlsOptions* tls);

  /// A new connection's SSL on `fd`: SNI and the host check for `host` (a name or an address;
  /// none when the settings say insecure), ALPN http/1.1, the kept session of `key` if any.
  [[nodiscard]] SslPtr start(const Context& context, const std::string& key, std::string_view host,
                             int fd);

 private:
  struct Slot {
    SSL_SESSION* session = nullptr;
  };
  static int on_new_session(SSL* ssl, SSL_SESSION* session);

  std::vector<std::unique_ptr<Context>> contexts_;
  std::unordered_map<std::string, std::unique_ptr<Slot>> sessions_;
};

/// SNI and the peer check for `host` (a name or an address) on a new client SSL: the name is sent
/// as SNI (an address is not), and unless `insecure` the certificate must name it. What start()
/// does; also for callers that make their SSL themselves (the sidecar's wss:// upstreams, through
/// Asio's ssl::stream on a context of TlsContexts).
void set_peer_host(SSL* ssl, std::string_view host, bool insecure);

/// Why a handshake through Asio's ssl::stream failed (`ec` is its error): the certificate check's
/// cause when that failed ("TLS: certificate has expired (…)"), a refused client certificate, or
/// "TLS: handshake failed (…)" with the reason.
[[nodiscard]] std::string tls_handshake_error(SSL* ssl, const boost::system::error_code& ec);

/// Why a handshake failed, in the curl path's words: "TLS: certificate expired (SSL certificate
/// problem: certificate has expired)". Reads (and clears) OpenSSL's error queue.
[[nodiscard]] std::string tls_failure_message(SSL* ssl);

/// The error code of a failed TLS read or write: OpenSSL's, in Asio's SSL category.
[[nodiscard]] bool is_tls_error(const boost::system::error_code& ec);
/// An OpenSSL error during a read or write that is a TLS alert refusing our client certificate
/// (TLS 1.3 servers refuse it after the handshake): the message, else empty.
[[nodiscard]] std::string tls_alert_message(const boost::system::error_code& ec);

/// The handshake; false with `message` set on failure, or with `ec` set when a wait was cancelled
/// (the transfer's deadline).
asio::awaitable<bool> tls_handshake(asio::ip::tcp::socket& socket, SSL* ssl, std::string& message,
                                    boost::system::error_code& ec);

/// Reads what is there (at least one byte, or eof, or an error) into `out`. `wait_first`: the
/// socket is known to be drained (an answer was just asked for), so wait for readability before
/// asking OpenSSL, unless it holds bytes already.
asio::awaitable<std::size_t> tls_read_some(asio::ip::tcp::socket& socket, SSL* ssl,
                                           asio::mutable_buffer out, boost::system::error_code& ec,
                                           bool wait_first = false);

/// Writes all of `data`.
asio::awaitable<void> tls_write(asio::ip::tcp::socket& socket, SSL* ssl, std::string_view data,
                                boost::system::error_code& ec);

}  // namespace rpcroute::detail

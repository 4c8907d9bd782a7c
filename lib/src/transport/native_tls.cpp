#include "native_tls.hpp"

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

#include <boost/asio/ssl/error.hpp>
#include <cerrno>
#include <cstring>

#include "curl_support.hpp"
#include "rpcroute/edge_read.hpp"

namespace rpcroute::detail {

using tcp = asio::ip::tcp;

namespace {

bool same(const TlsOptions& a, const TlsOptions& b) {
  return a.insecure == b.insecure && a.ca_file == b.ca_file && a.ca_dir == b.ca_dir &&
         a.cert_file == b.cert_file && a.key_file == b.key_file;
}

/// Empties this thread's OpenSSL error queue, as SSL_get_error needs before each call. Looking
/// first is cheaper than clearing an empty queue (OpenSSL 3 clears each of its slots), and empty
/// is the usual case.
void clear_errors() {
  if (ERR_peek_error() != 0) ERR_clear_error();
}

/// OpenSSL's last queued error as text (and the queue emptied), or `otherwise`.
std::string openssl_error(std::string_view otherwise) {
  const unsigned long e = ERR_peek_last_error();
  ERR_clear_error();
  if (e == 0) return std::string(otherwise);
  char text[256];
  ERR_error_string_n(e, text, sizeof text);
  return text;
}

int slot_index() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

/// A failed read or write, as an error code: the end of the stream, the system's error, or
/// OpenSSL's (Asio's SSL category, whose message is OpenSSL's reason).
boost::system::error_code io_error(int ssl_error) {
  if (ssl_error == SSL_ERROR_ZERO_RETURN) return asio::error::eof;
  if (ssl_error == SSL_ERROR_SYSCALL) {
    const int saved = errno;
    ERR_clear_error();
    if (saved == 0) return asio::error::eof;
    return {saved, boost::system::system_category()};
  }
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  return {static_cast<int>(e), asio::error::get_ssl_category()};
}

/// Waits until the socket can do what OpenSSL asked for; false for any other OpenSSL result.
asio::awaitable<bool> wait_for(tcp::socket& socket, int ssl_error, boost::system::error_code& ec) {
  if (ssl_error != SSL_ERROR_WANT_READ && ssl_error != SSL_ERROR_WANT_WRITE) co_return false;
  if (ssl_error == SSL_ERROR_WANT_READ) {
    // OpenSSL's read found the socket empty (or an answer was just asked for): the next event.
    co_await async_wait_drained(socket, asio::redirect_error(asio::use_awaitable, ec));
  } else {
    co_await socket.async_wait(tcp::socket::wait_write,
                               asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return true;
}

}  // namespace

TlsContexts::~TlsContexts() {
  for (auto& [key, slot] : sessions_) {
    if (slot->session != nullptr) SSL_SESSION_free(slot->session);
  }
  for (auto& c : contexts_) SSL_CTX_free(c->ctx);
}

const TlsContexts::Context& TlsContexts::get(const TlsOptions* tls) {
  static const TlsOptions none;
  const TlsOptions& want = tls != nullptr ? *tls : none;
  for (const auto& c : contexts_) {
    if (same(c->options, want)) return *c;
  }
  auto c = std::make_unique<Context>();
  c->options = want;
  c->index = contexts_.size();
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  c->ctx = ctx;
  if (ctx == nullptr) {
    c->error = "TLS: " + openssl_error("SSL_CTX_new failed");
    contexts_.push_back(std::move(c));
    return *contexts_.back();
  }
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // An idle kept connection gives its read and write buffers back (~34 KiB each): what bounds the
  // memory of many pooled TLS connections.
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  // One read(2) takes what the socket holds, not a record's 5-byte header and then its body: one
  // system call per answer instead of two.
  SSL_CTX_set_read_ahead(ctx, 1);
  // A server that closes without close_notify ends the stream like a plain one does: the HTTP
  // framing (Content-Length) says whether the answer is whole.
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(ctx, &TlsContexts::on_new_session);
  SSL_CTX_set_verify(ctx, want.insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, nullptr);
  if (!want.ca_file.empty() || !want.ca_dir.empty()) {
    // Exactly the CAs given, like the curl path (no system store besides).
    if (SSL_CTX_load_verify_locations(ctx, want.ca_file.empty() ? nullptr : want.ca_file.c_str(),
                                      want.ca_dir.empty() ? nullptr : want.ca_dir.c_str()) != 1)
      c->error = fmt::format("TLS: CA file or folder unusable ({})", openssl_error("unreadable"));
  } else if (!want.insecure) {
    SSL_CTX_set_default_verify_paths(ctx);  // the system store (SSL_CERT_FILE, SSL_CERT_DIR)
  }
  if (c->error.empty() && !want.cert_file.empty()) {
    const auto& key = want.key_file.empty() ? want.cert_file : want.key_file;
    if (SSL_CTX_use_certificate_chain_file(ctx, want.cert_file.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1)
      c->error =
          fmt::format("TLS: client certificate or key unusable ({})", openssl_error("unreadable"));
  }
  contexts_.push_back(std::move(c));
  return *contexts_.back();
}

int TlsContexts::on_new_session(SSL* ssl, SSL_SESSION* session) {
  auto* slot = static_cast<Slot*>(SSL_get_ex_data(ssl, slot_index()));
  if (slot == nullptr) return 0;
  if (slot->session != nullptr) SSL_SESSION_free(slot->session);
  slot->session = session;  // ours now (returning 1 keeps OpenSSL's reference for us)
  return 1;
}

SslPtr TlsContexts::start(const Context& context, const std::string& key, std::string_view host,
                          int fd) {
  SslPtr ssl(SSL_new(context.ctx));
  if (!ssl) return ssl;
  SSL_set_fd(ssl.get(), fd);
  set_peer_host(ssl.get(), host, context.options.insecure);
  static const unsigned char alpn[] = "\x08http/1.1";
  SSL_set_alpn_protos(ssl.get(), alpn, sizeof alpn - 1);
  auto& slot = sessions_[key];
  if (!slot) slot = std::make_unique<Slot>();
  SSL_set_ex_data(ssl.get(), slot_index(), slot.get());
  if (slot->session != nullptr) SSL_set_session(ssl.get(), slot->session);
  SSL_set_connect_state(ssl.get());
  return ssl;
}

void set_peer_host(SSL* ssl, std::string_view host, bool insecure) {
  const std::string name(host);
  boost::system::error_code ec;
  (void)asio::ip::make_address(name, ec);
  const bool address = !ec;
  if (!address) SSL_set_tlsext_host_name(ssl, name.c_str());
  if (insecure) return;
  if (address) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str());
  } else {
    SSL_set1_host(ssl, name.c_str());
  }
}

std::string tls_handshake_error(SSL* ssl, const boost::system::error_code& ec) {
  // Asio's engine took OpenSSL's error off the queue into `ec`; the verify result stays on ssl.
  if (SSL_get_verify_result(ssl) != X509_V_OK) return tls_failure_message(ssl);
  ERR_clear_error();
  const auto detail = ec.message();
  if (client_certificate_alert(detail))
    return fmt::format("TLS: client certificate rejected ({})", detail);
  return fmt::format("TLS: handshake failed ({})", detail);
}

std::string tls_failure_message(SSL* ssl) {
  const long verified = SSL_get_verify_result(ssl);
  if (verified != X509_V_OK) {
    ERR_clear_error();
    return fmt::format("TLS: {} (SSL certificate problem: {})", verify_cause(verified),
                       X509_verify_cert_error_string(verified));
  }
  const auto detail = openssl_error("the connection ended in the handshake");
  if (client_certificate_alert(detail))
    return fmt::format("TLS: client certificate rejected ({})", detail);
  return fmt::format("TLS: handshake failed ({})", detail);
}

bool is_tls_error(const boost::system::error_code& ec) {
  return ec.category() == asio::error::get_ssl_category();
}

std::string tls_alert_message(const boost::system::error_code& ec) {
  if (!is_tls_error(ec)) return {};
  const auto detail = ec.message();
  if (!client_certificate_alert(detail)) return {};
  return fmt::format("TLS: client certificate rejected ({})", detail);
}

asio::awaitable<bool> tls_handshake(tcp::socket& socket, SSL* ssl, std::string& message,
                                    boost::system::error_code& ec) {
  for (;;) {
    clear_errors();
    const int r = SSL_connect(ssl);
    if (r == 1) co_return true;
    const int e = SSL_get_error(ssl, r);
    if (e == SSL_ERROR_SYSCALL && errno != 0 && SSL_get_verify_result(ssl) == X509_V_OK) {
      message = fmt::format("TLS: handshake failed ({})", std::strerror(errno));
      ERR_clear_error();
      co_return false;
    }
    if (!co_await wait_for(socket, e, ec)) {
      message = tls_failure_message(ssl);
      co_return false;
    }
    if (ec) co_return false;
  }
}

asio::awaitable<std::size_t> tls_read_some(tcp::socket& socket, SSL* ssl, asio::mutable_buffer out,
                                           boost::system::error_code& ec, bool wait_first) {
  if (wait_first && SSL_has_pending(ssl) == 0) {
    co_await wait_for(socket, SSL_ERROR_WANT_READ, ec);
    if (ec) co_return 0;
  }
  for (;;) {
    clear_errors();
    std::size_t n = 0;
    const int r = SSL_read_ex(ssl, out.data(), out.size(), &n);
    if (r == 1) co_return n;
    const int e = SSL_get_error(ssl, r);
    if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
      ec = io_error(e);
      co_return 0;
    }
    co_await wait_for(socket, e, ec);
    if (ec) co_return 0;
  }
}

asio::awaitable<void> tls_write(tcp::socket& socket, SSL* ssl, std::string_view data,
                                boost::system::error_code& ec) {
  while (!data.empty()) {
    clear_errors();
    std::size_t n = 0;
    const int r = SSL_write_ex(ssl, data.data(), data.size(), &n);
    if (r == 1) {
      data.remove_prefix(n);
      continue;
    }
    const int e = SSL_get_error(ssl, r);
    if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
      ec = io_error(e);
      co_return;
    }
    co_await wait_for(socket, e, ec);
    if (ec) co_return;
  }
}

}  // namespace rpcroute::detail

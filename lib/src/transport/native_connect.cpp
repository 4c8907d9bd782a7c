// Opening a native connection: the name resolved (cached), the TCP connection, and over https the
// TLS handshake, all under the transfer's connect deadline (like curl's CONNECTTIMEOUT, which
// covers the handshake too).
#include <fmt/format.h>

#include "native_transfer.hpp"
#include "rpcroute/edge_read.hpp"

namespace rpcroute::detail {

namespace {

constexpr std::int64_t kNameTtlUs = 60'000'000;  // curl's CURLOPT_DNS_CACHE_TIMEOUT default
constexpr std::size_t kMaxNames = 1024;

void connect_timed_out(Transfer& t) {
  t.fail(TransportError::timeout, fmt::format("Connection timed out after {} milliseconds",
                                              (steady_us() - t.started) / 1000));
}

/// Tries each address in turn; false (the Transfer holding the error) when none answers.
asio::awaitable<bool> connect_any(NativeHttp::Conn& conn, Transfer& t,
                                  const std::vector<tcp::endpoint>& endpoints) {
  const auto& deadline = t.deadline;
  deadline->socket = &conn.socket;
  boost::system::error_code ec;
  for (const auto& endpoint : endpoints) {
    if (conn.socket.is_open()) conn.socket.close(ec);
    ec = {};
    co_await conn.socket.async_connect(endpoint, asio::redirect_error(asio::use_awaitable, ec));
    if (!ec || deadline->fired) break;
  }
  if (deadline->fired) {
    deadline->socket = nullptr;
    connect_timed_out(t);
    co_return false;
  }
  if (ec) {
    deadline->socket = nullptr;
    t.fail(TransportError::connect, fmt::format("Failed to connect to {} port {}: {}",
                                                t.target.host, t.target.port, ec.message()));
    co_return false;
  }
  conn.socket.set_option(tcp::no_delay(true), ec);
  conn.socket.set_option(asio::socket_base::keep_alive(true), ec);
  conn.socket.non_blocking(true, ec);
  enable_edge_reads(conn.socket);
  co_return true;
}

/// The TLS handshake on a connected socket; false (the Transfer holding the error) when it fails.
asio::awaitable<bool> handshake(NativeHttp::Conn& conn, Transfer& t, TlsContexts& tls) {
  const auto& context = *t.target.context;
  conn.ssl = tls.start(context, t.target.key, t.target.host, conn.socket.native_handle());
  if (!conn.ssl) {
    t.fail(TransportError::tls, "TLS: SSL_new failed");
    co_return false;
  }
  t.deadline->socket = &conn.socket;
  std::string message;
  boost::system::error_code ec;
  const bool ok = co_await tls_handshake(conn.socket, conn.ssl.get(), message, ec);
  t.deadline->socket = nullptr;
  if (ok) co_return true;
  if (t.deadline->fired) {
    connect_timed_out(t);
  } else {
    t.fail(TransportError::tls, message.empty() ? "TLS: " + ec.message() : message);
  }
  co_return false;
}

}  // namespace

asio::awaitable<std::vector<tcp::endpoint>> NameCache::resolve(Transfer& t) {
  const auto now = steady_us();
  if (auto it = entries_.find(t.target.key_host); it != entries_.end()) {
    if (now < it->second.expires_us) co_return it->second.endpoints;
    entries_.erase(it);
  }
  tcp::resolver resolver(co_await asio::this_coro::executor);
  t.deadline->resolver = &resolver;
  boost::system::error_code ec;
  const auto results = co_await resolver.async_resolve(
      t.target.host, std::to_string(t.target.port), tcp::resolver::numeric_service,
      asio::redirect_error(asio::use_awaitable, ec));
  t.deadline->resolver = nullptr;
  std::vector<tcp::endpoint> endpoints;
  if (t.deadline->fired) {
    connect_timed_out(t);
    co_return endpoints;
  }
  if (ec || results.empty()) {
    t.fail(TransportError::dns, fmt::format("Could not resolve host: {}", t.target.host));
    co_return endpoints;
  }
  for (const auto& r : results) endpoints.push_back(r.endpoint());
  if (entries_.size() >= kMaxNames) entries_.clear();
  entries_[t.target.key_host] = Entry{endpoints, steady_us() + kNameTtlUs};
  co_return endpoints;
}

asio::awaitable<bool> open_connection(NativeHttp::Conn& conn, Transfer& t, NameCache& names,
                                      TlsContexts& tls) {
  if (t.target.context != nullptr && !t.target.context->error.empty()) {
    t.fail(TransportError::tls, t.target.context->error);
    co_return false;
  }
  const auto started = steady_us();
  const bool short_connect = t.connect_timeout_ms < t.timeout_ms;
  if (short_connect)
    arm(t.deadline, t.start_point + std::chrono::milliseconds(t.connect_timeout_ms));
  bool ok = false;
  if (!t.target.endpoints.empty()) {
    ok = co_await connect_any(conn, t, t.target.endpoints);
  } else {
    const auto endpoints = co_await names.resolve(t);
    ok = !endpoints.empty() && co_await connect_any(conn, t, endpoints);
  }
  if (ok && t.target.context != nullptr) ok = co_await handshake(conn, t, tls);
  if (!ok) co_return false;
  if (short_connect) arm(t.deadline, t.start_point + std::chrono::milliseconds(t.timeout_ms));
  t.r.connect_us = steady_us() - started;
  co_return true;
}

}  // namespace rpcroute::detail

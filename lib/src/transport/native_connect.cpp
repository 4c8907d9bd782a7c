// Opening a native connection: the name resolved (cached), the TCP connection, and over https the
// TLS handshake, all under the transfer's connect deadline (like curl's CONNECTTIMEOUT, which
// covers the handshake too).
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cstring>

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

/// One getaddrinfo_a request: glibc's thread writes into it until gai_error says it is done.
struct NameCache::Lookup {
  std::string host;
  std::string service;
  addrinfo hints{};
  gaicb request{};
  gaicb* list[1] = {&request};

  Lookup(std::string name, std::uint16_t port)
      : host(std::move(name)), service(std::to_string(port)) {
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    request.ar_name = host.c_str();
    request.ar_service = service.c_str();
    request.ar_request = &hints;
  }
  ~Lookup() {
    if (request.ar_result != nullptr) freeaddrinfo(request.ar_result);
  }
  Lookup(const Lookup&) = delete;
  Lookup& operator=(const Lookup&) = delete;
  [[nodiscard]] bool pending() { return gai_error(&request) == EAI_INPROGRESS; }
};

NameCache::NameCache() = default;

NameCache::~NameCache() {
  for (auto& lookup : abandoned_) {
    if (lookup->pending() && gai_cancel(&lookup->request) != EAI_CANCELED && lookup->pending())
      (void)lookup.release();  // glibc's thread may still write into it: never freed
  }
}

void NameCache::reap() {
  std::erase_if(abandoned_, [](const auto& lookup) { return !lookup->pending(); });
}

asio::awaitable<std::vector<tcp::endpoint>> NameCache::resolve(Transfer& t) {
  std::vector<tcp::endpoint> endpoints;
  const auto now = steady_us();
  if (auto it = entries_.find(t.target.key_host); it != entries_.end()) {
    if (now < it->second.expires_us) co_return it->second.endpoints;
    entries_.erase(it);
  }
  reap();
  auto lookup = std::make_unique<Lookup>(t.target.host, t.target.port);
  if (getaddrinfo_a(GAI_NOWAIT, lookup->list, 1, nullptr) != 0) {
    t.fail(TransportError::dns, fmt::format("Could not resolve host: {}", t.target.host));
    co_return endpoints;
  }
  // Polled: a lookup happens once a minute per name at most, and a poll costs nothing.
  asio::steady_timer poll(co_await asio::this_coro::executor);
  t.deadline->waiting = &poll;
  auto step = std::chrono::microseconds(200);
  while (lookup->pending() && !t.deadline->fired) {
    poll.expires_after(step);
    boost::system::error_code ignored;
    co_await poll.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    step = std::min<std::chrono::microseconds>(step * 2, std::chrono::milliseconds(5));
  }
  t.deadline->waiting = nullptr;
  if (lookup->pending()) {  // the deadline
    if (gai_cancel(&lookup->request) != EAI_CANCELED) abandoned_.push_back(std::move(lookup));
    connect_timed_out(t);
    co_return endpoints;
  }
  if (gai_error(&lookup->request) != 0) {
    t.fail(TransportError::dns, fmt::format("Could not resolve host: {}", t.target.host));
    co_return endpoints;
  }
  for (auto* a = lookup->request.ar_result; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET && a->ai_addrlen >= sizeof(sockaddr_in)) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      endpoints.emplace_back(asio::ip::address_v4(ntohl(in->sin_addr.s_addr)), t.target.port);
    } else if (a->ai_family == AF_INET6 && a->ai_addrlen >= sizeof(sockaddr_in6)) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      asio::ip::address_v6::bytes_type bytes;
      std::memcpy(bytes.data(), in6->sin6_addr.s6_addr, bytes.size());
      endpoints.emplace_back(asio::ip::address_v6(bytes, in6->sin6_scope_id), t.target.port);
    }
  }
  if (endpoints.empty()) {
    t.fail(TransportError::dns, fmt::format("Could not resolve host: {}", t.target.host));
    co_return endpoints;
  }
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

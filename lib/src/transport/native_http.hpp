#pragma once
// The engine's own HTTP/1.1 client for http:// and https:// upstreams (TLS by OpenSSL on the
// socket, native_tls.hpp; names resolved and kept for a minute): no curl state machine, no liveness
// poll() and no epoll_ctl per request. What stays with curl: HTTP/2 (a provider's `http: "2"`),
// proxies (the proxy variables set), user:password@ URLs, and everything when
// RPCROUTE_HTTP_CLIENT=curl (https alone with RPCROUTE_NATIVE_TLS=0). Internal to the transport.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "native_tls.hpp"
#include "rpcroute/asio_compat.hpp"
#include "rpcroute/transport.hpp"

namespace rpcroute::detail {

class NameCache;

/// Test hook for both clients: with RPCROUTE_TEST_ALLOC_LIMIT=BYTES in the environment, an answer's
/// body that would need more than BYTES fails with std::bad_alloc, as if memory had run out, so
/// that tests drive the out-of-memory paths deterministically (in every build: sanitizer builds
/// replace operator new with their own). Called before each growth of a body; read once.
void check_body_capacity(std::size_t bytes);

class NativeHttp : public std::enable_shared_from_this<NativeHttp> {
 public:
  /// Where a request goes, parsed once per URL.
  struct Target {
    std::vector<asio::ip::tcp::endpoint> endpoints;  // empty: a name, resolved when connecting
    std::string host;                                // for messages, SNI and the host check
    std::uint16_t port = 80;
    std::string key_host;  // "host:port"
    std::string key;       // pool key: "host:port", over https also which tls: settings
    bool https = false;
    const TlsContexts::Context* context = nullptr;  // over https: the provider's tls: settings
    std::string
        head;  // "POST path HTTP/1.1\r\nHost: …\r\n…" without Content-Length and extra headers
  };
  struct Conn;

  explicit NativeHttp(asio::io_context& io);
  ~NativeHttp();
  NativeHttp(const NativeHttp&) = delete;
  NativeHttp& operator=(const NativeHttp&) = delete;

  /// The parsed target when this request can use the native client; null when curl must take it.
  [[nodiscard]] std::shared_ptr<const Target> target_for(const HttpRequest& request);

  [[nodiscard]] asio::awaitable<HttpResponse> perform(HttpRequest request,
                                                      std::shared_ptr<const Target> target);

  /// Closes the idle keep-alive connections (engine shutdown).
  void close_idle();

  /// Closes the idle connection with this serial (Engine::close_connection), if it is still idle.
  void close_connection(std::uint64_t serial);

  [[nodiscard]] std::size_t idle_connections() const { return idle_count_; }
  /// Transfers in flight (each perform() frame counts itself).
  [[nodiscard]] std::size_t in_flight() const { return in_flight_; }

 private:
  std::unique_ptr<Conn> take_idle(const std::string& key);
  ConnectionRef give_back(const std::string& key, std::unique_ptr<Conn> conn);
  static bool quiet(Conn& conn);

  asio::io_context& io_;
  bool enabled_ = true;      // plain http://
  bool tls_enabled_ = true;  // https://
  TlsContexts tls_;          // before the pools: every connection's SSL goes before its context
  std::unique_ptr<NameCache> names_;
  // By URL, one per tls: settings met with it (usually one); a null target: not native.
  std::unordered_map<std::string, std::vector<std::shared_ptr<const Target>>> targets_;
  std::unordered_map<std::string, std::vector<std::unique_ptr<Conn>>> idle_;
  std::size_t idle_count_ = 0;
  std::size_t in_flight_ = 0;
  std::uint64_t next_serial_ = 1;
};

/// The native client's target for a URL, or null when curl must take it: not http:// or https://,
/// user info, a zone-scoped IPv6 address, or bytes a request line cannot carry.
[[nodiscard]] std::shared_ptr<const NativeHttp::Target> parse_native_target(std::string_view url);

}  // namespace rpcroute::detail

#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rpcroute/asio_compat.hpp"
#include "rpcroute/cancel.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/transport/error.hpp"

namespace rpcroute {

/// The default cap on one answer's body (issue 14): far above any real JSON-RPC answer, far below
/// what an endless or lying body would take. Profiles change it per provider and per method.
inline constexpr std::uint64_t kDefaultMaxResponseBytes = std::uint64_t{128} << 20;

struct HttpRequest {
  std::string url;
  std::string body;
  const std::vector<Header>* headers = nullptr;  // extra headers; must outlive perform()
  std::int64_t timeout_ms = 10'000;
  /// Larger answers are abandoned (TransportError::too_large), whatever their framing.
  std::uint64_t max_response_bytes = kDefaultMaxResponseBytes;
  Cancellation* cancel = nullptr;  // request() stops the transfer: TransportError::cancelled
  HttpVersion http = HttpVersion::http1_1;  // over TLS; plain http:// is HTTP/1.1 anyway
  const TlsOptions* tls = nullptr;  // the provider's tls: settings (none: defaults); must outlive
                                    // perform()
  /// Whom it is for (the router sets it): a WebSocket transport keeps a socket per provider and
  /// names it in errors. Must outlive perform().
  const Provider* provider = nullptr;
};

/// Bytes reserved past a body's Content-Length: simdjson's padding (64), so that the answer is
/// parsed in place, and room for the router to turn a result into the client's response in place
/// (the envelope with a client id of up to ~200 bytes) instead of copying a large body.
inline constexpr std::size_t kBodySlack = 256;

/// Which pooled connection carried an answer: what Engine::close_connection needs to drop it.
struct ConnectionRef {
  enum class Client : std::uint8_t { none, native, curl };
  Client client = Client::none;  // none: the connection was not kept
  std::uint64_t id = 0;          // the client's serial of the connection
};

struct HttpResponse {
  TransportError error = TransportError::none;
  std::string error_message;
  long status = 0;
  std::string body;             // the provider's bytes, untouched
  std::string retry_after;      // Retry-After header, if any
  std::int64_t latency_us = 0;  // from the start of the request to the last byte
  std::int64_t connect_us = 0;  // time spent connecting (0 on a reused connection)
  ConnectionRef connection;     // the keep-alive connection it came on, if it was kept
};

/// How routing reaches providers: one HTTP exchange at a time. Engine is the real one; tests use a
/// scripted fake (tests/unit/support/fake_transport.hpp); other transports (WebSocket) plug in
/// here.
class Transport {
 public:
  virtual ~Transport() = default;
  [[nodiscard]] virtual asio::awaitable<HttpResponse> perform(HttpRequest request) = 0;
  /// Drops the keep-alive connection an answer came on, if it is still idle in the pool: an answer
  /// that is not the one asked for means the connection is out of step with its requests.
  virtual void close_connection(const ConnectionRef& connection) = 0;
};

/// The HTTP client: one curl multi handle driven by the io_context (DESIGN.md section 2).
/// Connections are reused across requests; everything runs on the context's thread.
///
///   Engine engine(io);
///   HttpResponse r = co_await engine.perform({.url = "http://127.0.0.1:8545", .body = "..."});
class Engine final : public Transport {
 public:
  explicit Engine(asio::io_context& io);
  ~Engine() override;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  [[nodiscard]] asio::awaitable<HttpResponse> perform(HttpRequest request) override;
  void close_connection(const ConnectionRef& connection) override;

  /// Number of transfers in flight.
  [[nodiscard]] std::size_t in_flight() const;

  struct Core;

 private:
  [[nodiscard]] asio::awaitable<HttpResponse> perform_curl(HttpRequest request);
  std::shared_ptr<Core> core_;
};

/// Loads libcurl (rpcroute/transport/curl_api.hpp) and runs curl_global_init, once per process
/// (thread-safe); false when it cannot (curl::load_error() says why).
bool init_curl();

}  // namespace rpcroute

#pragma once
// Single requests over providers' WebSockets (issue 18, "transports in routing"): the router's
// Transport for ws:// and wss:// URLs, and the sidecar's transport that sends each request the way
// its URL says.

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "rpcroute/transport.hpp"

namespace rpcroute::sidecar {

class WsUpstream;

/// One WebSocket per provider for routed requests, opened on first use and again after a drop.
/// Its own, not the subscriptions' (ws_subscriptions.hpp): a request's failure or a large answer
/// never touches a subscription's socket, and its message bound is the response cap, not the
/// event bound. The request's id (the router's upstream id, unique in the process) is the socket's
/// key: an answer goes only to the request that carries its id. Failures come back as the
/// TransportError HTTP would give: connect / tls (no socket), reset (dropped before the answer),
/// timeout, too_large, cancelled. An upgrade the provider declines with an HTTP status (401, 429,
/// 503) comes back as that status and body, as the same answer to an HTTP request would.
class WsTransport final : public Transport {
 public:
  WsTransport();
  ~WsTransport() override;
  WsTransport(const WsTransport&) = delete;
  WsTransport& operator=(const WsTransport&) = delete;

  [[nodiscard]] asio::awaitable<HttpResponse> perform(HttpRequest request) override;
  /// Answers are matched by id: a socket is never out of step with its requests.
  void close_connection(const ConnectionRef&) override {}

  /// Sockets kept (one per provider used over WebSocket).
  [[nodiscard]] std::size_t sockets() const { return sockets_.size(); }

 private:
  struct Socket;
  // By provider id and ws_url: a reloaded profile whose provider moved gets a new socket.
  std::map<std::pair<std::string, std::string>, std::unique_ptr<Socket>> sockets_;
};

/// The sidecar's transport: ws:// and wss:// URLs (the router's choice of a provider's WebSocket)
/// go to the WebSocket transport, the rest to HTTP.
class SplitTransport final : public Transport {
 public:
  explicit SplitTransport(Transport& http) : http_(http) {}
  [[nodiscard]] asio::awaitable<HttpResponse> perform(HttpRequest request) override;
  void close_connection(const ConnectionRef& connection) override {
    http_.close_connection(connection);
  }
  [[nodiscard]] static bool websocket_url(std::string_view url);

 private:
  Transport& http_;
  WsTransport ws_;
};

}  // namespace rpcroute::sidecar

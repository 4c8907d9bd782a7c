#pragma once
// WebSocket clients of the sidecar (issue 18): a connection whose request is an upgrade on an RPC
// route is handed over here (connection.cpp) after the same Host, Origin and token checks as any
// request. Each message is a JSON-RPC body, routed exactly as a POST is (Handlers::prepare_message,
// Router::route, Handlers::finish_rpc); answers go back in the order they are ready, matched by
// id as JSON-RPC over WebSocket is. A client is bounded in what it makes us hold: message size
// (--max-body), calls routed at once, answers queued for it (past them it is closed with 1008 and
// never delays the others), and a ping timeout. Shutdown closes each client with 1001 once its
// calls are answered. Light on purpose: Beast's websocket headers stay in ws_session.cpp.

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "request.hpp"
#include "routes.hpp"
#include "rpcroute/asio_compat.hpp"
#include "ws_subscriptions.hpp"

namespace rpcroute::sidecar {

class Handlers;
class Metrics;
class WsSession;
struct ServerConfig;

/// A request asking for a WebSocket (an Upgrade field naming websocket). Beast's handshake checks
/// the rest (method, version, key) and answers 400 itself.
[[nodiscard]] bool is_websocket_upgrade(const Request& req);

/// The WebSocket clients being served, for the connection limit and shutdown.
class WsClients {
 public:
  WsClients(const ServerConfig& config, Handlers& handlers, Metrics& metrics);
  WsClients(const WsClients&) = delete;
  WsClients& operator=(const WsClients&) = delete;

  /// Takes over `socket`, whose request `req` asked for an upgrade on `route` and passed the
  /// checks (Handlers::prepare_upgrade): answers the handshake and serves the client.
  void start(asio::ip::tcp::socket socket, const Request& req, Route route, std::string remote);
  /// Shutdown: each client is closed with 1001 once its calls are answered and written.
  void going_away();
  /// The end of the grace period: the sockets still open are closed.
  void close_all();
  [[nodiscard]] std::size_t size() const { return sessions_.size(); }
  /// After a reload: the subscriptions move to the profiles served now (WsSubscriptions::rebind).
  void rebind(const Runtimes& current) { subscriptions_.rebind(current); }

 private:
  friend class WsSession;
  const ServerConfig& config_;
  Handlers& handlers_;
  Metrics& metrics_;
  std::set<WsSession*> sessions_;
  WsSubscriptions subscriptions_;
  std::uint64_t next_session_ = 0;
  bool going_away_ = false;
};

}  // namespace rpcroute::sidecar

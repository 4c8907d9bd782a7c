#pragma once
// A provider's WebSocket (its profile `ws_url`), opened on first use and shared by every
// subscription the sidecar holds on that provider (ws_subscriptions.hpp). Calls are matched to
// answers by the router's own ids; subscription events go to one callback. Bounded: message size,
// a ping timeout (Beast's keep-alive pings), a deadline per call, a connect + TLS handshake limit.
// ws:// and wss:// (the provider's tls: settings apply, as to its HTTPS transfers); the provider's
// `headers:` (an API key's Authorization among them) go on the upgrade request, as on each HTTP
// request.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tl/expected.hpp>
#include <vector>

#include "rpcroute/asio_compat.hpp"
#include "rpcroute/cancel.hpp"
#include "rpcroute/config.hpp"

namespace rpcroute::sidecar {

class WsUpstream {
 public:
  /// An event of subscription `id` (the provider's), with its result as raw JSON.
  using OnEvent = std::function<void(std::string_view id, std::string_view result)>;
  /// The socket is gone (closed, failed, silent past the ping timeout); the object may be reused.
  using OnDrop = std::function<void()>;

  WsUpstream(asio::any_io_executor ex, const Provider& provider, std::size_t max_message,
             OnEvent on_event, OnDrop on_drop);
  ~WsUpstream();
  WsUpstream(const WsUpstream&) = delete;
  WsUpstream& operator=(const WsUpstream&) = delete;

  /// One JSON-RPC call over the socket (connecting first when needed): the result as raw JSON, or
  /// what went wrong.
  asio::awaitable<tl::expected<std::string, std::string>> call(std::string_view method,
                                                               std::string_view params);
  /// A call whose answer nobody waits for (eth_unsubscribe).
  void notify(std::string_view method, std::string_view params);
  [[nodiscard]] const Provider& provider() const { return provider_; }
  void close();

  // Single requests routed over the socket (issue 18, ws_transport.hpp).

  /// An upgrade the provider declined with an HTTP answer (401 for a missing key, 429 for too many
  /// sockets, 503): its status (0: not declined so), Retry-After and the first kMaxRefusalBody
  /// bytes of its body. The router classifies it as it does that answer over HTTP.
  struct Refusal {
    unsigned status = 0;
    std::string retry_after;
    std::string body;
  };
  static constexpr std::size_t kMaxRefusalBody = 64 * 1024;

  /// What became of one request().
  struct RawAnswer {
    enum class Status : std::uint8_t {
      ok,
      connect_failed,
      closed,
      timeout,
      cancelled,
      id_in_use,
      bad_answer
    };
    Status status = Status::ok;
    std::string message;          // ok: the whole answer message, as the provider sent it
    std::string error;            // otherwise: what went wrong (names the provider, never its URL)
    std::int64_t connect_us = 0;  // spent opening the socket (0 when it was open)
    Refusal refusal;              // connect_failed: the HTTP answer that declined the upgrade
  };
  /// Sends `message`, a JSON-RPC request whose id is `id` (unique on this socket: the router's
  /// upstream ids), connecting first when needed, and returns the answer message that carries
  /// exactly that id. Ends after `timeout_ms`, connect, TLS and upgrade included (a connect still
  /// going then goes on for later requests), when the socket drops, or when `cancel` is requested.
  asio::awaitable<RawAnswer> request(std::uint64_t id, std::string message, std::int64_t timeout_ms,
                                     Cancellation* cancel);

 private:
  struct Link;
  struct Pending;
  struct ConnectWait;
  /// Opens the link: connect, TLS, upgrade, each bounded (kConnectLimit); false and why not.
  asio::awaitable<bool> connect(std::string& error, Refusal& refusal);
  /// One connect at a time, run on its own (connect_task) so that a waiter may leave first.
  void start_connect();
  asio::awaitable<void> connect_task();
  enum class Opened : std::uint8_t { open, failed, timeout, cancelled };
  /// The link, open now or by the connect under way (started if none): `failed` when that connect
  /// failed (connect_error_ says why), `timeout` at `deadline`, `cancelled` when `cancel` is.
  asio::awaitable<Opened> wait_open(std::chrono::steady_clock::time_point deadline,
                                    Cancellation* cancel);
  [[nodiscard]] std::string connect_failure() const;
  asio::awaitable<void> read_loop(std::shared_ptr<Link> link);
  void dispatch(std::string_view message);
  void send(std::string message);
  asio::awaitable<void> write_loop(std::shared_ptr<Link> link);
  void dropped();

  asio::any_io_executor ex_;
  const Provider& provider_;
  std::size_t max_message_;
  OnEvent on_event_;
  OnDrop on_drop_;
  std::shared_ptr<Link> link_;  // the open socket, if any
  bool connecting_ = false;     // connect_task runs
  std::vector<ConnectWait*> connect_waiters_;
  std::string connect_error_;  // the last connect's failure, empty after a success
  Refusal connect_refusal_;    // ... and the upgrade's refusal, if it was one
  std::uint64_t next_id_ = 1;
  std::map<std::uint64_t, Pending*> pending_;
  // Ids of request()s in pending_: their answer is the whole message (deliver_raw).
  std::map<std::uint64_t, bool> raw_ids_;
  bool deliver_raw(std::string_view message);
  /// request()'s socket: open, or opened by `deadline` (the connect under way or a new one), or
  /// `out` says why not.
  asio::awaitable<bool> open_for_request(RawAnswer& out,
                                         std::chrono::steady_clock::time_point deadline,
                                         std::int64_t timeout_ms, Cancellation* cancel);
};

}  // namespace rpcroute::sidecar

#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "metrics.hpp"
#include "routes.hpp"
#include "rpcroute/asio_compat.hpp"
#include "rpcroute/clock.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/router.hpp"
#include "rpcroute/state.hpp"
#include "rpcroute/transport.hpp"

namespace rpcroute::sidecar {

struct ServerConfig {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8545;
  bool allow_remote = false;
  std::string token;                         // bearer token; required when allow_remote
  std::vector<std::string> allow_origins;    // extra browser origins ("*" allows any)
  std::size_t max_body = 8 * 1024 * 1024;
  std::size_t max_connections = 1024;                  // more are answered 503 and closed
  std::size_t max_inflight_bytes = std::size_t{256} << 20;  // request bodies held at once; beyond: 503
  std::size_t max_batch = 1000;               // viem's default batch size
  std::int64_t read_timeout_ms = 10'000;     // one request's headers and body
  std::int64_t idle_timeout_ms = 60'000;     // a keep-alive connection with nothing to do
  std::int64_t grace_ms = 10'000;            // to finish in-flight requests at shutdown
  std::int64_t flush_interval_ms = 5'000;    // state file
  std::optional<Strategy> strategy;          // for routes without a strategy segment
  bool verbose = false;                      // a log line per request
  bool json_logs = false;
  bool background_probes = true;
};

struct Connection;
struct Request;

/// The request-body bytes all connections hold, against --max-inflight-mb: a body that would pass
/// the cap is refused (503) before it is read, and a connection gives its bytes back once answered.
struct BodyBudget {
  std::size_t used = 0;
  std::size_t cap = SIZE_MAX;
  /// Adds `n` to the connection's `held` bytes, or answers false when that would pass the cap.
  [[nodiscard]] bool take(std::size_t& held, std::size_t n) {
    if (n > cap - used) return false;
    used += n;
    held += n;
    return true;
  }
  void give_back(std::size_t& held) {
    used -= held;
    held = 0;
  }
};

/// The localhost sidecar of DESIGN.md section 11: Beast HTTP/1.1 on the io_context that also drives
/// the curl engine; one Router per profile; state flushed periodically and at shutdown.
class Server {
 public:
  Server(asio::io_context& io, ServerConfig config, std::vector<Profile> profiles, Engine& engine, StateStore& store,
         const Clock& clock);
  ~Server();

  /// Binds and listens. The port is known afterwards (port 0 picks one).
  [[nodiscard]] Result<std::uint16_t> listen();
  /// Accepts, probes and flushes until shutdown() has drained; then flushes the state a last time.
  [[nodiscard]] asio::awaitable<void> run();
  /// Stops accepting and lets in-flight requests finish within the grace period.
  void shutdown();
  /// Saves the state now and goes on serving (SIGHUP); `why` is logged.
  void save_state(std::string_view why);

  [[nodiscard]] std::uint16_t port() const { return port_; }

 private:
  struct ProfileRuntime {
    Profile profile;
    std::unique_ptr<Router> router;
  };

  ProfileRuntime* runtime(const std::string& name);  // empty: the default profile
  asio::awaitable<void> accept_loop();
  /// Past --max-connections: a 503 with Retry-After, then the client's bytes are read until it
  /// closes (for a second at most), so that the close does not reset the answer away.
  asio::awaitable<void> refuse_connection(asio::ip::tcp::socket socket);
  asio::awaitable<void> flush_loop();
  /// Every kSweepMs: cancels the operation of each connection past its deadline (idle, read or
  /// write timeout). One timer for all connections instead of one per operation.
  asio::awaitable<void> sweep_loop();
  static constexpr int kSweepMs = 100;
  asio::awaitable<void> poll_provider(ProfileRuntime* rt, const Chain* chain, const Provider* provider);
  /// While no provider of the chain is usable, probes this one if its breaker is open, backing off
  /// from 250 ms to 1 s; a success closes the breaker.
  asio::awaitable<void> recover_provider(ProfileRuntime* rt, const Chain* chain, const Provider* provider);
  /// Saves pending state changes. `wait` false (on the loop): one non-blocking try at the lock;
  /// false when another process holds it (retried every kFlushRetryMs).
  bool flush_state(bool wait);
  static constexpr int kFlushRetryMs = 250;
  static constexpr int kFlushWarnAfter = 20;  // deferred attempts (5 s) before a warning
  int flush_deferred_ = 0;
  static constexpr std::size_t kMaxUnloadable = 256;  // unknown profile names remembered
  void log(const std::string& line);

  asio::io_context& io_;
  ServerConfig config_;
  Engine& engine_;
  StateStore& store_;
  const Clock& clock_;
  Random rng_;
  asio::ip::tcp::acceptor acceptor_;
  std::uint16_t port_ = 0;
  std::string default_profile_;
  bool check_host_ = true;        // the Host (DNS rebinding) check; off only for remote addresses
  std::string last_good_host_;    // the last Host header the rebinding check passed
  std::string last_good_origin_;  // the last Origin the allow-list passed
  std::string route_cache_target_;  // the last request target that parsed to an RPC route ...
  Route route_cache_;               // ... and its route
  std::map<std::string, std::unique_ptr<ProfileRuntime>, std::less<>> profiles_;
  std::set<std::string, std::less<>> unloadable_;
  Metrics metrics_;
  std::set<Connection*> connections_;
  BodyBudget body_budget_;
  int refusing_ = 0;  // refuse_connection()s running
  bool draining_ = false;
  std::uint64_t request_counter_ = 0;
  std::uint64_t request_prefix_ = 0;
  asio::steady_timer wake_;  // wakes the background loops at shutdown
  int background_ = 0;       // loops still running

  asio::awaitable<void> serve_connection(asio::ip::tcp::socket socket);
  struct Reply;
  struct RpcJob;
  /// Answers into `reply` whatever needs no provider (checks, GET routes, bad bodies); true when
  /// the request is JSON-RPC to route, described by `job`.
  bool prepare(const Request& request, Reply& reply, RpcJob& job);
  /// The reply to a routed JSON-RPC request from the router's outcomes.
  void finish_rpc(RpcJob& job, std::vector<CallOutcome>& outs, Reply& reply);
};

}  // namespace rpcroute::sidecar

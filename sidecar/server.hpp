#pragma once
// The sidecar's lifecycle (server.cpp): listen, accept or refuse, sweep deadlines, flush the state,
// schedule the head pollers, drain at shutdown. Each connection is served in connection.cpp; what
// a request is answered with is the handlers' job (handlers.hpp).
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "handlers.hpp"
#include "metrics.hpp"
#include "reload.hpp"
#include "request.hpp"
#include "rpcroute/asio_compat.hpp"
#include "rpcroute/clock.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/state.hpp"
#include "rpcroute/transport.hpp"
#include "server_config.hpp"
#include "ws_session.hpp"

namespace rpcroute::sidecar {

struct Connection;
struct ConnectionState;

/// The localhost sidecar of DESIGN.md section 11: Beast HTTP/1.1 on the io_context that also drives
/// the curl engine; one Router per profile; state flushed periodically and at shutdown.
class Server {
 public:
  /// Also reads the fences' environment variables (apply_fence_environment), once.
  /// `shared`: the Redis-backed store over `store` (issue 20), when one is configured.
  Server(asio::io_context& io, ServerConfig config, std::vector<Profile> profiles, Engine& engine,
         StateStore& store, const Clock& clock, shared::SharedStore* shared = nullptr);
  ~Server();

  /// Binds and listens. The port is known afterwards (port 0 picks one).
  [[nodiscard]] Result<std::uint16_t> listen();
  /// Accepts, probes and flushes until shutdown() has drained; then flushes the state a last time.
  [[nodiscard]] asio::awaitable<void> run();
  /// Stops accepting and lets in-flight requests finish within the grace period.
  void shutdown();
  /// Saves the state now and goes on serving (SIGHUP, SIGUSR1/2); `why` is logged.
  void save_state(std::string_view why);
  /// Turns hot reload on (server_reload.cpp): run() watches the profiles' files, and reload()
  /// loads them again through `loader`.
  void enable_reload(ProfileLoader loader);
  /// Loads the profiles again (SIGHUP, a file changed; `trigger` says which) and serves them from
  /// now on; requests already routed finish on the old ones. When any fails to load, the profiles
  /// served stay and the error is logged and shown in /status.
  void reload(std::string_view trigger);

  [[nodiscard]] std::uint16_t port() const { return port_; }

 private:
  asio::awaitable<void> accept_loop();
  /// Past --max-connections: a 503 with Retry-After, then the client's bytes are read until it
  /// closes (for a second at most), so that the close does not reset the answer away.
  asio::awaitable<void> refuse_connection(asio::ip::tcp::socket socket);
  asio::awaitable<void> flush_loop();
  /// Every kSweepMs: cancels the operation of each connection past its deadline (idle, read or
  /// write timeout). One timer for all connections instead of one per operation.
  asio::awaitable<void> sweep_loop();
  static constexpr int kSweepMs = 100;
  /// The head poller and recovery probe of every provider of `rt` (rpcroute/poller.hpp), until
  /// it is replaced or the server drains (rt->stop).
  void start_pollers(const std::shared_ptr<ProfileRuntime>& rt);
  /// server_reload.cpp: every kWatchMs, the profiles' files are stat()ed; a change that holds for
  /// one more look (the writer is done) reloads.
  asio::awaitable<void> watch_profiles();
  static constexpr int kWatchMs = 250;
  /// A runtime a reload replaced: freed once nothing holds it (requests routed on it, its pollers)
  /// and its background sends (broadcasts) are done.
  asio::awaitable<void> retire(std::shared_ptr<ProfileRuntime> rt);
  /// Once the first probes are in (within a minute): a warning for each chain whose every
  /// provider is on another chain than the profile's. Started again by a reload (`generation`:
  /// the older one ends).
  asio::awaitable<void> warn_wrong_chains(std::uint64_t generation);
  std::uint64_t warn_generation_ = 0;
  /// Saves pending state changes. `wait` false (on the loop): one non-blocking try at the lock;
  /// false when another process holds it (retried every kFlushRetryMs).
  bool flush_state(bool wait);
  static constexpr int kFlushRetryMs = 250;
  static constexpr int kFlushWarnAfter = 20;  // deferred attempts (5 s) before a warning
  int flush_deferred_ = 0;
  void log(const std::string& line);

  // connection.cpp: one connection's requests, in order, until it closes.
  asio::awaitable<void> serve_connection(asio::ip::tcp::socket socket);
  /// The rest of a request the buffer does not hold whole yet, through Beast's parser; `ec` set
  /// when it could not be read (a timeout, a limit, a malformed message, the client gone). Sends
  /// 100 Continue when the client waits for it, or answers early when the head alone is refused.
  asio::awaitable<void> read_request(ConnectionState& s, boost::system::error_code& ec);
  /// A request that could not be read: its error answer (when one is due) before the close.
  asio::awaitable<void> refuse_request(ConnectionState& s, boost::system::error_code ec);
  /// Answers a read request into s.reply without a provider, or says it is JSON-RPC to route.
  bool answer_locally(ConnectionState& s);
  /// s.reply through Beast's serializer: the HTTP/1 fast path is off (RPCROUTE_FAST_HTTP1=0).
  asio::awaitable<void> write_with_beast(ConnectionState& s, bool keep_alive,
                                         boost::system::error_code& ec);
  /// Every request gets an answer: an unexpected failure (out of memory, say) is a 500, and the
  /// connection goes on.
  void answer_internal_error(ConnectionState& s, std::string_view what);
  void log_request(const ConnectionState& s, double ms);  // -v: the line of an answered request
  void log_request(const ConnectionState& s, std::string_view note);  // -v: one that got no answer
  [[nodiscard]] EdgeLoad edge() const {
    return {connections_.size() + websockets_.size(), body_budget_.used};
  }

  asio::io_context& io_;
  ServerConfig config_;
  Engine& engine_;
  StateStore& store_;
  shared::SharedStore* shared_;
  const Clock& clock_;
  Random rng_;
  Metrics metrics_;
  Handlers handlers_;
  WsClients websockets_;  // upgraded connections, out of connections_
  asio::ip::tcp::acceptor acceptor_;
  std::uint16_t port_ = 0;
  std::set<Connection*> connections_;
  BodyBudget body_budget_;
  int refusing_ = 0;  // refuse_connection()s running
  bool draining_ = false;
  ProfileLoader loader_;              // empty: no hot reload
  std::vector<std::string> watched_;  // the profiles' files ...
  std::vector<FileStamp> stamps_;     // ... as last loaded
};

}  // namespace rpcroute::sidecar

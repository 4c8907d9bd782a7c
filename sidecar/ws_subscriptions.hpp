#pragma once
// Subscriptions of the sidecar's WebSocket clients (issue 18): identical eth_subscribe calls (same
// profile, chain and params) share one upstream subscription on a provider's WebSocket
// (ws_upstream.hpp); each client gets its own id, and the last unsubscribe closes the upstream
// one. When the provider's socket drops, or stalls (no newHeads for `stall_blocks` block times
// while the chain's head moves elsewhere), each of its subscriptions is opened again on the first
// candidate that takes it, by the routing order, and what was missed meanwhile is fetched over HTTP
// (ws_stream.hpp): clients see one stream, without gaps or duplicates. A subscription that no
// provider takes again within the chain's websocket.resubscribe_timeout_ms ends: each client gets
// a JSON-RPC error notification for it, then its `ended` callback (the sidecar closes the socket
// with 1013, `rpcroute subscribe` exits 3). Used by the sidecar (ws_session.hpp) and by
// `rpcroute subscribe` (cli/cmd_subscribe.cpp) alike.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "rpcroute/asio_compat.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/executor.hpp"
#include "rpcroute/health/store.hpp"
#include "rpcroute/jsonrpc.hpp"

namespace rpcroute::sidecar {

struct ProfileRuntime;
using Runtimes = std::map<std::string, std::shared_ptr<ProfileRuntime>, std::less<>>;
class WsUpstream;

class WsSubscriptions {
 public:
  /// Where a client's events go (its session's queue): each a whole eth_subscription
  /// notification, or, for a `bare` client, the event's result alone.
  using Sink = std::function<void(std::string message)>;
  /// The subscription ended (no provider can serve it): called once, after the error
  /// notification went to the sink (a `bare` client gets none), with why.
  using Ended = std::function<void(const std::string& reason)>;
  struct Listener {
    Sink sink;
    Ended ended;
    bool bare = false;
  };
  /// What the subscriptions need of whoever holds them.
  struct Host {
    /// The heights routing has seen (the stall detector's "head elsewhere").
    std::function<const HealthView&()> health;
    /// The count of upstream subscriptions open, each time it changes (the sidecar's /metrics).
    std::function<void(std::size_t)> upstream_count;
    /// The wall clock the heights were recorded by (ms since the epoch).
    std::function<std::int64_t()> now_ms;
  };

  WsSubscriptions(std::size_t max_message, Host host);
  ~WsSubscriptions();
  WsSubscriptions(const WsSubscriptions&) = delete;
  WsSubscriptions& operator=(const WsSubscriptions&) = delete;

  /// eth_subscribe for client `session`: its own subscription id, or the error.
  asio::awaitable<CallOutcome> subscribe(std::uint64_t session, std::shared_ptr<ProfileRuntime> rt,
                                         const Chain& chain, const jsonrpc::Call& call,
                                         Listener listener);
  /// A reload: each subscription follows its profile and chain into `current`. One open on a
  /// provider that is gone from it, or whose URL changed, is opened again where the new routing
  /// order says (as when its socket drops); one on a provider still there stays open. A
  /// subscription whose chain is gone stays on the old set until its clients leave.
  void rebind(const Runtimes& current);
  /// eth_unsubscribe: true when the id was this client's.
  CallOutcome unsubscribe(std::uint64_t session, const jsonrpc::Call& call);
  /// The client is gone: its subscriptions go with it.
  void drop_session(std::uint64_t session);
  /// The same, waiting (each within its provider's timeout) for the providers to confirm the
  /// eth_unsubscribe of the upstream subscriptions it was the last client of: a client about to
  /// exit (`rpcroute subscribe`) leaves nothing open behind.
  asio::awaitable<void> leave(std::uint64_t session);
  /// Upstream subscriptions open now.
  [[nodiscard]] std::size_t upstream_count() const;

 private:
  struct Shared;
  /// Subscribes upstream on the first candidate with a ws_url that takes it; the error otherwise.
  asio::awaitable<std::string> open(Shared& shared);
  /// The provider's socket; `owner` (its profile) lives as long as the socket may.
  WsUpstream& upstream_for(const Provider& provider, std::shared_ptr<ProfileRuntime> owner);
  void on_event(const Provider& provider, std::string_view id, std::string_view result);
  void on_drop(const Provider& provider);
  /// Opens a subscription whose provider went again, retrying with a backoff while it has clients.
  /// `first_wait`: before the first try (a provider whose socket keeps dropping soon after it took
  /// the subscription).
  asio::awaitable<void> reopen(std::string key, std::shared_ptr<bool> alive,
                               std::chrono::milliseconds first_wait);
  /// Takes the subscription's events in order: a stream (ws_stream.hpp) decides what each client
  /// gets, fetching what a failover missed.
  void kick(const std::shared_ptr<Shared>& shared);
  asio::awaitable<void> drain(std::shared_ptr<Shared> shared, std::shared_ptr<bool> alive);
  /// One event to each client of the subscription, under its own id.
  void fan_out(Shared& shared, const std::string& result);
  /// The stall detector: every newHeads subscription whose socket has been silent for
  /// stall_blocks block times while the chain's head moved past the last head delivered.
  asio::awaitable<void> watch_stalls(std::shared_ptr<bool> alive);
  void check_stalls();
  /// The head of the subscription's chain seen anywhere but on its provider, by the head rule
  /// (rpcroute::head_elsewhere).
  [[nodiscard]] std::uint64_t head_elsewhere(const Shared& shared) const;
  /// Takes the client out; when it was the last, the upstream subscription too: what to send
  /// eth_unsubscribe on and the provider's id for it, if it was open.
  std::optional<std::pair<WsUpstream*, std::string>> remove_client(const std::string& client_id);
  /// No provider can serve the subscription: its clients get the error notification and their
  /// `ended`, and it is gone.
  void end(const std::string& key, const std::string& reason);
  void publish();

  std::size_t max_message_;
  Host host_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // false once destroyed
  bool watching_ = false;                                       // the stall detector runs
  asio::any_io_executor ex_;
  std::uint64_t id_prefix_;
  std::uint64_t id_counter_ = 0;
  std::map<std::string, std::shared_ptr<Shared>> by_key_;
  std::map<std::string, Shared*> by_client_;  // a client's subscription id → its shared one
  std::map<std::pair<const Provider*, std::string>, Shared*> by_upstream_;
  struct Upstream {
    std::unique_ptr<WsUpstream> socket;
    std::shared_ptr<ProfileRuntime> owner;  // holds the Provider the socket and callbacks use
  };
  std::map<const Provider*, Upstream> upstreams_;
  // Providers whose socket stalled: tried last until then.
  std::map<const Provider*, std::chrono::steady_clock::time_point> shunned_;
  // Drops of a provider's socket that follow each other within 10 s. Put last (shunned_) is still
  // first when it is the only candidate: one that takes each subscription and drops it would have
  // it opened again at once, over and over. The first drop reopens at once; each that follows
  // within 10 s waits 250 ms, twice longer each time, at most 30 s.
  struct DropStreak {
    int count = 0;
    std::chrono::steady_clock::time_point last{};
    std::chrono::milliseconds next_wait(std::chrono::steady_clock::time_point now) {
      count = count > 0 && now - last < std::chrono::seconds(10) ? count + 1 : 1;
      last = now;
      if (count <= 1) return std::chrono::milliseconds(0);
      return std::min<std::chrono::milliseconds>(
          std::chrono::milliseconds(250) * (1 << std::min(count - 2, 7)), std::chrono::seconds(30));
    }
  };
  std::map<const Provider*, DropStreak> drops_;
};

}  // namespace rpcroute::sidecar

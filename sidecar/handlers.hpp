#pragma once
// What the sidecar answers (DESIGN.md section 11): the edge checks (policy.hpp), the GET routes
// (/healthz, /status, /metrics) and the JSON-RPC job — prepare() before the router, finish_rpc()
// after it, with the X-Rpcroute-* headers. No socket and no Beast parser here: the connection
// (connection.cpp) reads the Request and writes the Reply.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cache.hpp"
#include "coalesce.hpp"
#include "dashboard.hpp"
#include "metrics.hpp"
#include "reload.hpp"
#include "reply.hpp"
#include "request.hpp"
#include "routes.hpp"
#include "rpcroute/blocks.hpp"
#include "rpcroute/clock.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/json.hpp"
#include "rpcroute/jsonrpc.hpp"
#include "rpcroute/router.hpp"
#include "rpcroute/state.hpp"
#include "rpcroute/transport.hpp"
#include "server_config.hpp"
#include "ws_transport.hpp"

namespace rpcroute::sidecar {

/// A served profile and its router. Shared: a reload swaps in new ones while the requests routed
/// on the old ones (and their pollers, WebSocket subscriptions) finish on what they hold.
struct ProfileRuntime {
  Profile profile;
  std::unique_ptr<Router> router;
  bool polled = false;  // the background polls watch its providers (/healthz wants fresh answers)
  bool stop = false;    // replaced by a reload, or shutting down: its pollers end
  bool on_demand = false;                // loaded on first use by a URL's name, not given to serve
  std::unique_ptr<ResponseCache> cache;  // null: off (cache.max_mb 0, --cache-mb 0)
  std::vector<std::string> chain_keys;   // chain_key() of each chain, in profile.chains order
  std::vector<std::vector<std::string>> provider_keys;  // provider_key() of each, per chain
  std::vector<std::uint64_t> last_head;                 // the head the cache last saw, per chain
  std::vector<ChainActivity> activity;        // cache and hedge counts per chain, for the dashboard
  std::vector<FinalityVotes> finality_votes;  // per chain, shared by its providers' pollers
};
using Runtimes = std::map<std::string, std::shared_ptr<ProfileRuntime>, std::less<>>;

/// A JSON-RPC request on its way to the router: what prepare() found, what finish_rpc() needs.
struct RpcJob {
  std::shared_ptr<ProfileRuntime> rt;  // held until the job ends, across a reload
  const Chain* chain = nullptr;
  jsonrpc::Body parsed;
  std::size_t routed = 0;  // the calls routed: all but a batch's items beyond --max-batch
  RouteOptions options;
  char request_id_text[40];
  std::string_view request_id;  // into request_id_text
  std::int64_t started_us = 0;  // steady_us() when prepared: the feed's total time
  // Coalescing and the cache (rpc_cache.cpp), for a single call that may use them.
  std::string_view cache_header = "MISS";  // X-Rpcroute-Cache: MISS, HIT or BYPASS (static text)
  bool shared = false;                     // routed through the coalescer under `key`
  bool keep = false;                       // a good answer may be kept in the cache under `key`
  CacheRule rule = CacheRule::never;
  ChainFinality finality;  // when the call was taken
  std::string key;         // the canonical key (reused buffer)
};

/// The edge right now, for /metrics and /status.
struct EdgeLoad {
  std::size_t connections = 0;
  std::size_t request_bytes = 0;
};

class Handlers {
 public:
  Handlers(const ServerConfig& config, std::vector<Profile> profiles, Engine& engine,
           StateStore& store, const Clock& clock, Random& rng, Metrics& metrics,
           shared::SharedStore* shared = nullptr);

  /// Answers into `reply` whatever needs no provider (checks, GET routes, bad bodies); true when
  /// the request is JSON-RPC to route, described by `job`.
  bool prepare(const Request& request, Reply& reply, RpcJob& job, EdgeLoad edge);
  /// The reply to a routed JSON-RPC request from the router's outcomes.
  void finish_rpc(RpcJob& job, std::vector<CallOutcome>& outs, Reply& reply);
  /// A WebSocket upgrade (ws_session.hpp): the checks of an HTTP request (Host, Origin, token) and
  /// an RPC route whose profile and chain exist; false with the refusal in `reply`.
  bool prepare_upgrade(const Request& req, Reply& reply, Route& route);
  /// One WebSocket message, a JSON-RPC body on the socket's `route`: what prepare() does with a
  /// POST body.
  bool prepare_message(const std::string& body, const Route& route, Reply& reply, RpcJob& job) {
    return prepare_rpc(body, route, reply, job);
  }

  /// Identical in-flight reads share one upstream request (coalesce.hpp).
  [[nodiscard]] Coalescer& coalescer() { return coalescer_; }
  /// The Host (DNS rebinding) check; off only for a remote listen address (Server::listen).
  void check_host(bool on) { check_host_ = on; }
  /// The live dashboard's memory (dashboard.hpp): the connection hands it an events stream.
  [[nodiscard]] Dashboard& dashboard() { return dashboard_; }
  /// What routing reads and records into: the shared store when there is one.
  [[nodiscard]] HealthStore& health() {
    return shared_ != nullptr ? static_cast<HealthStore&>(*shared_)
                              : static_cast<HealthStore&>(store_);
  }
  /// The wall clock heights and finality are recorded by.
  [[nodiscard]] const Clock& clock() const { return clock_; }
  /// The profiles served so far (those named in URLs join on first use).
  [[nodiscard]] const Runtimes& profiles() const { return profiles_; }
  /// A reload: `profiles` are served from now on (polled when `polled`); the runtimes they replace
  /// are returned, those loaded on first use too (they load again on their next use).
  [[nodiscard]] std::vector<std::shared_ptr<ProfileRuntime>> replace_profiles(
      std::vector<Profile> profiles, bool polled);
  /// What /status shows of reloads (Server keeps it up to date).
  [[nodiscard]] ReloadStatus& reload_status() { return reload_status_; }

 private:
  /// Host and Origin: false with a 403 in `reply`; an allowed Origin adds the CORS headers.
  bool admit(const Request& req, Reply& reply);
  /// The route of a target: clients post to the same path over and over, so the last RPC route is
  /// kept with its target.
  const Route& route_for(const std::string& target);
  /// The bearer token (when one is set) on every route but /healthz: false with a 401.
  bool authorized(const Request& req, const Route& route, Reply& reply);
  void answer_get(const Route& route, Reply& reply, EdgeLoad edge);
  void write_status(json::Writer& w, EdgeLoad edge, std::int64_t now);
  bool write_health(json::Writer& w, std::int64_t now);  // false: some chain has no provider up
  void write_cordons(json::Writer& w, std::int64_t now);
  /// One chain's providers that are up (poller.hpp, liveness_problem), with why each other is not
  /// when `detail` (/status); the count of those up.
  std::int64_t write_chain_health(json::Writer& w, const ProfileRuntime& rt, const Chain& chain,
                                  std::int64_t now, bool detail);
  // dashboard_routes.cpp: the page, its state and its stream (off with --no-dashboard).
  void answer_dashboard(const Route& route, const Request& req, Reply& reply);
  void write_dashboard_state(json::Writer& w, std::int64_t now);
  /// GET / is the page; the root's POST stays JSON-RPC.
  [[nodiscard]] bool dashboard_root(const Route& route, const Request& req) const;
  /// The profile, chain and provider of an RPC route, and its body parsed into `job`.
  /// `min_block`: the X-Rpcroute-Min-Block field as sent (empty: none); a bad one is a 400.
  bool prepare_rpc(const std::string& body, const Route& route, Reply& reply, RpcJob& job,
                   bool no_cache = false, std::string_view min_block = {});
  bool find_chain(const RpcTarget& target, Reply& reply, RpcJob& job);
  void next_request_id(RpcJob& job);
  /// Empty: the default profile; a null pointer when there is no such profile.
  const std::shared_ptr<ProfileRuntime>& runtime(const std::string& name);
  std::shared_ptr<ProfileRuntime> make_runtime(Profile profile);
  void record_decisions(const RpcJob& job, const std::vector<CallOutcome>& outs);
  void write_rpc_body(const RpcJob& job, std::vector<CallOutcome>& outs, Reply& reply);
  /// A single call that may be coalesced or cached: its key in `job`; true when answered from the
  /// cache into `reply` (rpc_cache.cpp).
  bool consult_cache(bool no_cache, const RpcTarget& target, RpcJob& job, Reply& reply);
  [[nodiscard]] ChainFinality finality(const ProfileRuntime& rt, std::size_t chain_index) const;
  /// A cache hit's reply: the result under the call's id, with the X-Rpcroute-* headers.
  void finish_hit(const RpcJob& job, const std::string& result, Reply& reply);
  /// Keeps a routed call's good answer when the job may (before the reply takes the response).
  void keep_answer(RpcJob& job, const CallOutcome& out);
  void write_cache_status(json::Writer& w);
  [[nodiscard]] CacheStats cache_stats() const;
  static constexpr std::size_t kMaxUnloadable = 256;  // unknown profile names remembered

  const ServerConfig& config_;
  Engine& engine_;
  /// What the routers send through: HTTP by the engine, ws:// and wss:// over provider sockets.
  std::unique_ptr<SplitTransport> transport_;
  StateStore& store_;
  shared::SharedStore* shared_;  // null: the state file alone
  const Clock& clock_;
  Random& rng_;
  Metrics& metrics_;
  std::string default_profile_;
  bool check_host_ = true;
  std::string last_good_host_;      // the last Host header the rebinding check passed
  std::string last_good_origin_;    // the last Origin the allow-list passed
  std::string route_cache_target_;  // the last request target that parsed to an RPC route ...
  Route route_cache_;               // ... and its route
  Runtimes profiles_;
  std::set<std::string, std::less<>> unloadable_;
  Coalescer coalescer_;
  std::uint64_t request_counter_ = 0;
  std::uint64_t request_prefix_ = 0;
  Dashboard dashboard_;
  ReloadStatus reload_status_;
};

}  // namespace rpcroute::sidecar

#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <span>
#include <string>
#include <vector>

#include "rpcroute/asio_compat.hpp"
#include "rpcroute/blocks.hpp"
#include "rpcroute/clock.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/jsonrpc.hpp"
#include "rpcroute/outcome.hpp"
#include "rpcroute/health/store.hpp"
#include "rpcroute/sticky.hpp"
#include "rpcroute/strategy.hpp"
#include "rpcroute/transport.hpp"

namespace rpcroute {

/// Why a provider was left out, as a stable name for JSON output ("kind").
enum class ExclusionKind {
  caller,        // --provider / the /rpc/provider/ route chose another
  policy,        // the method override restricts providers
  filter,        // the filter id lives on another provider
  method,        // the provider's allow/deny list
  chain_id,      // probe saw another chain id
  breaker,       // circuit open
  half_open,     // half-open with its trial in flight
  lag,           // more than max_lag_blocks behind
  archive,       // the request reads old state; the provider is not archival
  height,        // the request names a block above the provider's height
  limit,         // a provider limit (eth_getLogs block range)
  quota,         // token bucket empty
  quarantine,    // its head claim is not believed (absurd, a jump, unconfirmed by the others)
};
[[nodiscard]] std::string_view exclusion_kind_name(ExclusionKind k);

/// A provider left out of a request's candidates, and why (shown by `rank` and in 503 details).
struct Exclusion {
  std::string provider;
  std::string reason;
  std::int64_t retry_in_ms = 0;  // when it may be eligible again (breakers, quotas); 0 unknown
  ExclusionKind kind = ExclusionKind::caller;
};

/// The ordered candidates for one method on one chain, and what was excluded.
struct Plan {
  Strategy strategy = Strategy::load_balanced;
  MethodPolicy policy;
  std::vector<Candidate> candidates;
  std::vector<Exclusion> excluded;
  BlockNeed need;               // the block(s) the request reads
  std::uint64_t head = 0;       // the chain's estimated head; 0 unknown
  bool needs_archive = false;   // reads state older than head - archival_threshold, or `earliest`
  bool lag_fallback = false;    // every eligible provider lagged or was quarantined: they are tried anyway
  bool breaker_trial = false;   // every breaker was open: the open ones are tried, one trial each
  StickyKey sticky;             // the sender or transaction this call stays with
};

/// Attempts on their way, per provider. One that runs far beyond the provider's usual latency
/// (a hung node) ranks the provider down while it lasts.
class AttemptsInFlight {
 public:
  struct Attempt {
    std::string_view method;  // the call's method; the call outlives its attempt
    std::int64_t start_ms = 0;
  };
  void start(const Provider* p, std::string_view method, std::int64_t t_ms);
  void finish(const Provider* p, std::int64_t start_ms);
  /// The longest-running attempt on `p`, or null.
  [[nodiscard]] const Attempt* oldest(const Provider* p) const;

 private:
  std::unordered_map<const Provider*, std::vector<Attempt>> by_provider_;
};

/// Whether an attempt running for `age_ms` is far beyond a usual latency of `p50_ms` (0: unknown).
[[nodiscard]] bool attempt_stalled(std::int64_t age_ms, double p50_ms);

struct RouteOptions {
  std::optional<Strategy> strategy;        // overrides the method policy and the profile default
  std::optional<std::string> provider;     // exactly this provider (no fallback)
  std::optional<std::int64_t> timeout_ms;  // overall deadline
  std::optional<int> max_attempts;
  bool with_stats = false;  // fill latency stats even when the strategy does not rank by them (rank, /status)
  /// false: the caller only needs CallOutcome::response (the sidecar). A result is then turned into
  /// the response in the provider's answer buffer, without a copy of a large body, and
  /// CallOutcome::result is left empty.
  bool keep_result = true;
  /// Requested: route() stops, its transfer in flight is aborted, and the calls not yet answered
  /// end unavailable ("cancelled"), with nothing recorded against a provider (the sidecar's client left).
  Cancellation* cancel = nullptr;
};

/// One exchange with one provider, as the caller of the router sees it.
struct AttemptRecord {
  std::string provider;
  Classification result;
  long http_status = 0;
  double latency_ms = 0;
};

/// The answer to one call.
struct CallOutcome {
  enum class Status { result, rpc_error, unavailable, invalid, local };
  Status status = Status::result;
  std::string response;  // complete JSON-RPC response with the client's id; empty for notifications
  std::string result;    // raw result (result and local)
  std::string error;     // raw error object (rpc_error, unavailable, invalid)
  std::string provider;  // who answered; empty when nobody did
  double upstream_latency_ms = 0;
  std::vector<AttemptRecord> attempts;
  std::vector<Exclusion> excluded;
  std::int64_t retry_after_ms = -1;
  std::string unavailable_reason;  // unavailable: why ("no eligible provider", "deadline of 1500 ms exceeded")
  Strategy strategy = Strategy::load_balanced;
  /// eth_blockNumber: the provider answered this lower height; the answer was raised to the
  /// high-water mark so that it never goes backwards.
  std::optional<std::uint64_t> raised_from;
  bool broadcast = false;  // sent to every eligible provider at once
};

/// The pipeline of DESIGN.md section 4: filter, rank, tier, execute with failover, record.
///
///   Router router(profile, engine, store, clock, rng);  // Transport&, HealthStore&
///   auto answers = co_await router.route(chain, body.calls, {});
class Router {
 public:
  Router(const Profile& profile, Transport& transport, HealthStore& store, const Clock& clock, Random& rng);

  /// The candidates a call of `method` would try now, in order, and the exclusions with reasons.
  [[nodiscard]] Plan plan(const Chain& chain, std::string_view method, std::string_view params,
                          const RouteOptions& options);

  /// Routes calls (one, or the items of a batch) on one chain. Answers come back in call order.
  [[nodiscard]] asio::awaitable<std::vector<CallOutcome>> route(const Chain& chain,
                                                                std::span<const jsonrpc::Call> calls,
                                                                RouteOptions options);

  /// Waits for work that outlives route(): the remaining sends of a broadcast. Call before exit.
  [[nodiscard]] asio::awaitable<void> drain();

  [[nodiscard]] const Profile& profile() const { return profile_; }
  [[nodiscard]] AttemptsInFlight& attempts_in_flight() { return in_flight_; }

 private:
  struct Item;
  struct Broadcast;
  void finish_unavailable(Item& item, const Chain& chain, std::string_view why);
  [[nodiscard]] asio::awaitable<void> route_broadcast(const Chain& chain, Item& item, std::int64_t deadline_us);
  [[nodiscard]] asio::awaitable<void> broadcast_send(std::shared_ptr<Broadcast> b, const Chain* chain, Candidate cand,
                                                     std::string method, std::string params, std::int64_t deadline_us);
  /// What a success teaches (heights, the high-water mark, filters, archival); `result` is a view
  /// into the answer. Raising an eth_blockNumber answer sets out.raised_from and out.result.
  void on_success(const Chain& chain, const Candidate& cand, Item& item, std::int64_t now, std::string_view result);
  [[nodiscard]] Classification scrubbed(const Classification& c) const;
  /// Moves the provider that served this call's sender or transaction lately to the front.
  void keep_sticky_first(const Chain& chain, Plan& plan, std::string_view method, std::string_view params,
                         std::int64_t now);
  /// An attempt on `p` runs far beyond its usual latency for that method.
  [[nodiscard]] bool stalled(const Provider& p, const ProviderState* ps, std::int64_t now) const;

  const Profile& profile_;
  Transport& transport_;
  HealthStore& store_;
  const Clock& clock_;
  Random& rng_;
  std::map<std::string, int, std::less<>> half_open_in_flight_;
  AttemptsInFlight in_flight_;
  StickyProviders sticky_;
  std::unordered_map<const Provider*, std::string> keys_;  // state keys, built once
  std::unordered_map<const Chain*, std::string> chain_keys_;
  int background_ = 0;                                      // broadcast sends still in flight
  std::optional<asio::steady_timer> drained_;               // woken when background_ reaches 0

  const std::string& key_for(const Chain& chain, const Provider& provider);
  const std::string& chain_key_for(const Chain& chain);
};

}  // namespace rpcroute

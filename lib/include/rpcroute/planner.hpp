#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "rpcroute/blocks.hpp"
#include "rpcroute/cancel.hpp"
#include "rpcroute/clock.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/health/store.hpp"
#include "rpcroute/sticky.hpp"
#include "rpcroute/strategy.hpp"

namespace rpcroute {

/// Why a provider was left out, as a stable name for JSON output ("kind").
enum class ExclusionKind {
  caller,      // --provider / the /rpc/provider/ route chose another
  cordon,      // an operator took it out of routing (`rpcroute cordon`)
  policy,      // the method override restricts providers
  filter,      // the filter id lives on another provider
  method,      // the provider's allow/deny list
  chain_id,    // probe saw another chain id
  breaker,     // circuit open
  half_open,   // half-open with its trial in flight
  lag,         // more than max_lag_blocks behind
  archive,     // the request reads old state; the provider is not archival
  height,      // the request names a block above the provider's height
  limit,       // a provider limit (eth_getLogs block range)
  quota,       // token bucket empty
  quarantine,  // its head claim is not believed (absurd, a jump, unconfirmed by the others)
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
  BlockNeed need;              // the block(s) the request reads
  std::uint64_t head = 0;      // the chain's estimated head; 0 unknown
  bool needs_archive = false;  // reads state older than head - archival_threshold, or `earliest`
  bool lag_fallback =
      false;  // every eligible provider lagged or was quarantined: they are tried anyway
  bool breaker_trial = false;  // every breaker was open: the open ones are tried, one trial each
  StickyKey sticky;            // the sender or transaction this call stays with
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

/// What this process knows of its own traffic beyond the health store: attempts in flight, trials
/// through half-open breakers, and the provider each sender used last. The executor writes it, the
/// planner reads it.
struct LocalTraffic {
  AttemptsInFlight attempts;
  std::map<std::string, int, std::less<>> half_open_trials;  // by state key
  StickyProviders sticky;
};

struct RouteOptions {
  std::optional<Strategy> strategy;        // overrides the method policy and the profile default
  std::optional<std::string> provider;     // exactly this provider (no fallback)
  std::optional<std::int64_t> timeout_ms;  // overall deadline
  std::optional<int> max_attempts;
  bool with_stats =
      false;  // fill latency stats even when the strategy does not rank by them (rank, /status)
  /// false: the caller only needs CallOutcome::response (the sidecar). A result is then turned into
  /// the response in the provider's answer buffer, without a copy of a large body, and
  /// CallOutcome::result is left empty.
  bool keep_result = true;
  /// Requested: route() stops, its transfer in flight is aborted, and the calls not yet answered
  /// end unavailable ("cancelled"), with nothing recorded against a provider (the sidecar's client
  /// left).
  Cancellation* cancel = nullptr;
  /// `call --hedge` (true: hedge with the profile's settings, else the defaults) / `--no-hedge`
  /// (false); unset: as the profile says.
  std::optional<bool> hedge;
  /// `call` (issue 21): a provider whose chain id the state does not hold yet is asked for it
  /// alongside the first request to it (chain_check.cpp), and left out when it is on another chain.
  bool verify_chain_id = false;
  /// X-Rpcroute-Min-Block / `call --min-block` (issue 19): only providers whose observed height is
  /// at or past this block serve the call (read-your-writes across providers).
  std::optional<std::uint64_t> min_block;
  /// The sidecar (issue 18): a provider's single requests may go over its WebSocket as its
  /// `transport:` says (the transport then takes ws:// URLs). Off: HTTP only (one-shot commands).
  bool websocket = false;
};

struct RuleInput;
struct ProviderView;

/// Filter, rank, tier (DESIGN.md section 4) without sending anything: which providers a call would
/// try now, in order, and why the others are left out. Reads health, never writes it.
///
///   Planner planner(profile, store, clock, rng);
///   Plan plan = planner.plan(chain, "eth_getBalance", R"(["0xabc…", "0x10"])", {});
class Planner {
 public:
  Planner(const Profile& profile, const HealthView& health, const Clock& clock, Random& rng,
          const LocalTraffic& traffic);
  /// A planner that sees no traffic of its own (rank, tests).
  Planner(const Profile& profile, const HealthView& health, const Clock& clock, Random& rng);
  Planner(const Planner&) = delete;
  Planner& operator=(const Planner&) = delete;

  [[nodiscard]] Plan plan(const Chain& chain, std::string_view method, std::string_view params,
                          const RouteOptions& options);

  /// State keys, built once per provider and chain; candidates' keys point into these.
  const std::string& provider_key_for(const Chain& chain, const Provider& provider);
  const std::string& chain_key_for(const Chain& chain);

  [[nodiscard]] const Profile& profile() const { return profile_; }

 private:
  struct Heights;
  void read_heights(const Chain& chain, std::int64_t now, Heights& h);
  /// Params parsed once for every rule: the filter's owner, the block need, the log range.
  [[nodiscard]] RuleInput read_request(const Chain& chain, std::string_view method,
                                       std::string_view params, const RouteOptions& options,
                                       Plan& plan, const Heights& heights, std::int64_t now);
  /// The exclusion rules over every provider, then the lag and breaker-trial fallbacks.
  void sort_providers(const Chain& chain, const RuleInput& in, const RouteOptions& options,
                      Plan& plan, const Heights& heights);
  [[nodiscard]] Candidate make_candidate(const ProviderView& view, std::size_t position,
                                         std::string_view method, Strategy strategy,
                                         bool needs_stats, bool websocket, std::int64_t now) const;
  /// Over HTTP or the provider's WebSocket (transport: ws | auto; the sidecar only).
  void choose_transport(Candidate& c, const ProviderState* ps, std::string_view method,
                        Strategy strategy, bool needs_stats, std::int64_t now) const;
  /// This host's samples of `method` over the provider's WebSocket, in the strategy's window.
  [[nodiscard]] LatencyStats ws_stats_of(const ProviderState& ps, std::string_view method,
                                         Strategy strategy, std::int64_t now) const;
  void rank(const Chain& chain, Plan& plan, std::string_view method, std::string_view params,
            std::int64_t now);
  /// An attempt on `p` runs far beyond its usual latency for that method.
  [[nodiscard]] bool stalled(const Provider& p, const ProviderState* ps, std::int64_t now) const;

  const Profile& profile_;
  const HealthView& health_;
  const Clock& clock_;
  Random& rng_;
  std::optional<LocalTraffic> own_traffic_;  // the traffic-less planner's empty one
  const LocalTraffic& traffic_;
  std::unordered_map<const Provider*, std::string> keys_;
  std::unordered_map<const Chain*, std::string> chain_keys_;
};

}  // namespace rpcroute

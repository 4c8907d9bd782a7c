#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "rpcroute/clock.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/metrics.hpp"
#include "rpcroute/state.hpp"

namespace rpcroute {

/// Health tiers of DESIGN.md section 4; lower is tried first. Open circuits appear only as trials
/// when no provider is usable (tier half_open). `stalled`: an attempt on it runs far beyond its
/// usual latency (a hung node), whatever its circuit.
enum class Tier : int {
  healthy = 1,
  rate_limited = 2,
  half_open = 3,
  half_open_rate_limited = 4,
  stalled = 5
};

[[nodiscard]] Tier tier_of(BreakerState effective, bool rate_limited);
[[nodiscard]] std::string_view tier_name(Tier t);

/// One provider that may serve a request, with what the strategy knew about it.
struct Candidate {
  const Provider* provider = nullptr;
  std::size_t position = 0;  // in the profile
  std::string_view key;      // state key (the Router keeps the string); candidates copy cheaply
  Tier tier = Tier::healthy;
  BreakerState breaker = BreakerState::closed;
  std::int64_t rate_limited_until_ms = 0;
  LatencyStats stats;            // for this method, over the strategy's window
  double metric = 0;             // what the strategy ranked by (p50 ms, weight, priority)
  bool cold = false;             // latency strategies: no usable data; ranked at the baseline
  double first_probability = 0;  // chance of being tried first, after tiering
  /// How an attempt on it goes (issue 18): its WebSocket only in the sidecar, for a provider with
  /// `transport: ws`, or `auto` whose WebSocket measured better (choose_transport()).
  TransportKind transport = TransportKind::http;
  /// `transport: auto` under a latency strategy: each transport's own figures (stats holds the
  /// chosen one's). weighed false otherwise.
  bool weighed = false;
  LatencyStats http_stats;
  LatencyStats ws_stats;
};

/// `transport: auto` (issue 18): which of a provider's two transports a latency strategy uses,
/// from each one's own samples. While either has fewer than `min_calls` samples in the window, the
/// one with fewer is tried (explored, as the strategies explore unmeasured providers); then the
/// one that qualifies (success rate at least `min_success_rate`), the lower p50 when both do, the
/// higher success rate when neither does. Ties go to HTTP.
[[nodiscard]] TransportKind better_transport(const LatencyStats& http, const LatencyStats& ws,
                                             int min_calls, double min_success_rate);

struct RankInput {
  Strategy strategy = Strategy::load_balanced;
  const StrategyParams* params = nullptr;
  Random* rng = nullptr;
  std::uint64_t rr_cursor = 0;
};

/// Orders candidates by the strategy, then stably by tier, and fills metric and first_probability.
void rank_candidates(std::vector<Candidate>& candidates, const RankInput& in);

/// The strategy's order alone (no tiering), for tests and `rank`.
void order_by_strategy(std::vector<Candidate>& candidates, const RankInput& in);

/// Where a candidate stands after the strategy: by tier, and within a tier a backup after every
/// primary (`group: backup` is used only when no primary of a better or the same tier is left).
[[nodiscard]] inline int standing(const Candidate& c) {
  return 2 * static_cast<int>(c.tier) + (c.provider->group == ProviderGroup::backup ? 1 : 0);
}

/// Stable partition by standing (tier, then group); first_probability renormalised over the first
/// non-empty one.
void apply_tiers(std::vector<Candidate>& candidates);

/// latency_weighted's weight for one candidate given the best p50 among them (exposed for tests).
[[nodiscard]] double latency_weight(const Candidate& c, double best_p50_ms, double baseline_ms,
                                    const LatencyWeightedParams& p);

/// The cold-start baseline: p75 of the qualifying providers' p50, or 0 when none qualifies.
[[nodiscard]] double cold_start_baseline(std::span<const Candidate> candidates, int min_calls,
                                         double min_success_rate);

}  // namespace rpcroute

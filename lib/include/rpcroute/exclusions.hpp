#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "rpcroute/blocks.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/health/store.hpp"
#include "rpcroute/planner.hpp"

namespace rpcroute {

/// What the exclusion rules know of one request, read once per plan (params are parsed here, not
/// per provider).
struct RuleInput {
  const Chain* chain = nullptr;
  std::string_view method;
  const MethodPolicy* policy = nullptr;
  std::optional<std::string_view> only_provider;  // RouteOptions::provider
  std::optional<std::string_view> filter_owner;   // the provider a filter the call reads lives on
  BlockNeed need;
  std::uint64_t head = 0;
  bool needs_archive = false;
  std::optional<std::uint64_t> highest;  // the highest block the request names by number
  std::uint64_t log_range = 0;           // blocks an eth_getLogs call scans; 0 unknown
  std::optional<Height> reference;       // the chain's head as one observation (lag compares to it)
  std::optional<std::uint64_t> min_block;  // RouteOptions::min_block
  std::int64_t now_ms = 0;
  int half_open_max_inflight = 1;
  const std::map<std::string, int, std::less<>>* half_open_trials = nullptr;  // LocalTraffic
};

/// One provider as the rules see it.
struct ProviderView {
  const Provider* provider = nullptr;
  const ProviderState* state = nullptr;  // null: nothing known yet
  std::string_view key;
  BreakerState breaker = BreakerState::closed;  // effective now
  std::optional<std::uint64_t> estimate;        // its height now, when fresh
  ClaimJudgement judgement;                     // what the head rule made of its height
};

/// What becomes of a provider a rule excludes.
enum class Keep : std::uint8_t {
  no,     // out
  trial,  // out, but kept for a breaker trial when nothing else is usable; later rules still apply
  lag,    // out, but tried anyway when every eligible provider lagged or was quarantined
};

struct RuleVerdict {
  ExclusionKind kind = ExclusionKind::caller;
  std::string reason;
  std::int64_t retry_in_ms = 0;
  Keep keep = Keep::no;
};

using ExclusionRule = std::optional<RuleVerdict> (*)(const RuleInput&, const ProviderView&);

/// The rules in the order they are asked (the first that excludes gives the reason `rank` and a 503
/// show): caller, cordon, policy, filter, method, chain_id, breaker, half_open, archive, height,
/// limit, quota, quarantine, lag. After a `Keep::trial` verdict the provider's later exclusions are
/// not reported (its breaker already says why) and `Keep::lag` rules no longer apply to it.
[[nodiscard]] std::span<const ExclusionRule> exclusion_rules();

/// Where a provider ends after the rules.
enum class Fate : std::uint8_t { candidate, trial, lagging, out };

/// Asks every rule in order about one provider; exclusions to report go to `excluded`.
[[nodiscard]] Fate apply_exclusion_rules(const RuleInput& in, const ProviderView& view,
                                         std::vector<Exclusion>& excluded);

/// "cordoned: REASON (until 2026-12-02T08:20:00Z, in 540.0s)", or "(until uncordoned)": what
/// `rank`, /status and a 503 show of an active cordon.
[[nodiscard]] std::string cordon_text(const Cordon& c, std::int64_t now_ms);

/// Whether a provider serves old state: the profile decides when it says; otherwise the newest of
/// what probe found and what answers showed. nullopt: unknown (treated as able).
[[nodiscard]] std::optional<bool> archival_of(const Provider& p, const ProviderState* ps);

}  // namespace rpcroute

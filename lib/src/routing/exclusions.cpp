#include "rpcroute/exclusions.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <ctime>
#include <iterator>

#include "rpcroute/health/bucket.hpp"
#include "rpcroute/log_split.hpp"

namespace rpcroute {

namespace {

std::string seconds_text(std::int64_t ms) {
  return fmt::format("{:.1f}s", static_cast<double>(ms) / 1000.0);
}

std::string_view archival_source(const Provider& p, const ProviderState* ps) {
  if (p.archival) return "the profile says archival: false";
  if (ps != nullptr && ps->archival_seen.archival && ps->archival_seen.t_ms >= ps->probe.t_ms) {
    return "an answer showed missing state";
  }
  return "probe found no state at block 1";
}

using Verdict = std::optional<RuleVerdict>;

Verdict by_caller(const RuleInput& in, const ProviderView& v) {
  if (!in.only_provider || v.provider->id == *in.only_provider) return std::nullopt;
  return RuleVerdict{ExclusionKind::caller,
                     fmt::format("not selected (only {} was requested)", *in.only_provider)};
}

Verdict by_cordon(const RuleInput& in, const ProviderView& v) {
  if (v.state == nullptr || !v.state->cordon.active(in.now_ms)) return std::nullopt;
  return RuleVerdict{ExclusionKind::cordon, cordon_text(v.state->cordon, in.now_ms),
                     v.state->cordon.until_ms == 0 ? 0 : v.state->cordon.until_ms - in.now_ms};
}

Verdict by_policy(const RuleInput& in, const ProviderView& v) {
  const auto& allowed = in.policy->providers;
  if (allowed.empty() ||
      std::find(allowed.begin(), allowed.end(), v.provider->id) != allowed.end()) {
    return std::nullopt;
  }
  return RuleVerdict{
      ExclusionKind::policy,
      fmt::format("the method policy for {} restricts it to other providers", in.method)};
}

Verdict by_filter(const RuleInput& in, const ProviderView& v) {
  if (!in.filter_owner || *in.filter_owner == v.provider->id) return std::nullopt;
  return RuleVerdict{ExclusionKind::filter,
                     fmt::format("the filter lives on {}", *in.filter_owner)};
}

Verdict by_method(const RuleInput& in, const ProviderView& v) {
  if (v.provider->methods.permits(in.method)) return std::nullopt;
  return RuleVerdict{ExclusionKind::method,
                     fmt::format("{} is denied by the provider's method list", in.method)};
}

Verdict by_chain_id(const RuleInput& in, const ProviderView& v) {
  const auto* ps = v.state;
  if (ps == nullptr || ps->probe.chain_id == 0 || ps->probe.chain_id == in.chain->chain_id)
    return std::nullopt;
  // No probe time: a `call` learned it alongside a request (chain_check.cpp).
  const auto seen = ps->probe.t_ms > 0 ? fmt::format("seen by probe {} ago",
                                                     seconds_text(in.now_ms - ps->probe.t_ms))
                                       : std::string("seen by a call's chain id check");
  return RuleVerdict{ExclusionKind::chain_id,
                     fmt::format("wrong chain id {} (the profile says {}), {}", ps->probe.chain_id,
                                 in.chain->chain_id, seen)};
}

Verdict by_breaker(const RuleInput& in, const ProviderView& v) {
  if (v.state == nullptr || v.breaker != BreakerState::open) return std::nullopt;
  const auto& b = v.state->breaker;
  const auto retry = b.retry_in_ms(in.now_ms);
  return RuleVerdict{ExclusionKind::breaker,
                     fmt::format("circuit breaker open ({}); half-opens in {}",
                                 b.reason.empty() ? "failures" : b.reason, seconds_text(retry)),
                     retry, Keep::trial};
}

Verdict by_half_open(const RuleInput& in, const ProviderView& v) {
  if (v.state == nullptr || v.breaker == BreakerState::closed) return std::nullopt;
  auto it = in.half_open_trials->find(v.key);
  if (it == in.half_open_trials->end() || it->second < in.half_open_max_inflight)
    return std::nullopt;
  return RuleVerdict{ExclusionKind::half_open,
                     "circuit breaker half-open with its trial request in flight"};
}

Verdict by_archive(const RuleInput& in, const ProviderView& v) {
  if (!in.needs_archive || archival_of(*v.provider, v.state) != false) return std::nullopt;
  auto oldest = oldest_block(in.need, in.head);
  return RuleVerdict{
      ExclusionKind::archive,
      fmt::format("not archival ({}); the request reads block {} (head ~{}, archival_threshold {})",
                  archival_source(*v.provider, v.state),
                  oldest ? std::to_string(*oldest) : std::string("earliest"), in.head,
                  in.chain->archival_threshold)};
}

Verdict by_height(const RuleInput& in, const ProviderView& v) {
  if (!in.highest || !v.estimate || *v.estimate >= *in.highest || in.head < *in.highest)
    return std::nullopt;
  return RuleVerdict{ExclusionKind::height,
                     fmt::format("block {} is above its height (~{}; head ~{})", *in.highest,
                                 *v.estimate, in.head)};
}

/// The client asked for a block this provider is not known to have reached: its observed height
/// (not an estimate moved forward by block time: "known at or past N" is what the client asked).
Verdict by_min_block(const RuleInput& in, const ProviderView& v) {
  if (!in.min_block) return std::nullopt;
  const bool seen = v.state != nullptr && v.state->height.t_ms > 0;
  if (seen && v.state->height.block >= *in.min_block) return std::nullopt;
  return RuleVerdict{
      ExclusionKind::height,
      seen ? fmt::format("below the minimum block {} the client asked (last seen at {})",
                         *in.min_block, v.state->height.block)
           : fmt::format("not known to be at the minimum block {} the client asked (height "
                         "unknown)",
                         *in.min_block)};
}

Verdict by_limit(const RuleInput& in, const ProviderView& v) {
  const auto limit = log_range_limit(*v.provider, v.state);
  if (in.log_range == 0 || !limit || in.log_range <= *limit) return std::nullopt;
  const bool learned =
      !v.provider->limits.max_block_range || *limit < *v.provider->limits.max_block_range;
  return RuleVerdict{
      ExclusionKind::limit,
      fmt::format("eth_getLogs over {} blocks exceeds its {} {}", in.log_range,
                  learned ? "learned block range limit" : "max_block_range", *limit)};
}

Verdict by_quota(const RuleInput& in, const ProviderView& v) {
  const auto& rate = v.provider->rate_limit;
  if (!rate) return std::nullopt;
  const Bucket bucket = v.state != nullptr ? v.state->quota : Bucket{};
  const auto wait = bucket_wait_ms(bucket, *rate, in.now_ms);
  if (wait <= 0) return std::nullopt;
  return RuleVerdict{ExclusionKind::quota,
                     fmt::format("quota used up (rate_limit {} rps, burst {}); a token in {} ms",
                                 rate->rps, rate->burst, wait),
                     wait};
}

Verdict by_quarantine(const RuleInput& in, const ProviderView& v) {
  if (!quarantined(v.judgement.verdict)) return std::nullopt;
  return RuleVerdict{ExclusionKind::quarantine,
                     claim_doubt(v.state->height, v.judgement, *in.chain), 0, Keep::lag};
}

Verdict by_lag(const RuleInput& in, const ProviderView& v) {
  if (v.judgement.verdict != ClaimVerdict::believed) return std::nullopt;
  const auto* ps = v.state;
  const auto& chain = *in.chain;
  const auto lag = in.reference ? lag_behind(ps->height, *in.reference, chain) : 0;
  if (lag > static_cast<std::int64_t>(chain.max_lag_blocks)) {
    return RuleVerdict{
        ExclusionKind::lag,
        fmt::format("lagging {} blocks behind (height ~{}, best {}; max_lag_blocks {})", lag,
                    height_at(ps->height, in.reference->t_ms, chain), in.reference->block,
                    chain.max_lag_blocks),
        0, Keep::lag};
  }
  // The judgement made when its height was seen (probe compares every provider at once) stands
  // while that height is fresh, even after the others' newer heights would give it the benefit
  // of the doubt: one rule for rank, /status and routing, with the horizon of a height.
  const bool judged_behind = ps->lag.behind_since_ms != 0 && ps->lag.t_ms >= ps->height.t_ms;
  if (!judged_behind) return std::nullopt;
  return RuleVerdict{
      ExclusionKind::lag,
      fmt::format("lagging {} blocks behind (height {} seen {} ago; max_lag_blocks {})",
                  ps->lag.blocks, ps->height.block, seconds_text(in.now_ms - ps->height.t_ms),
                  chain.max_lag_blocks),
      0, Keep::lag};
}

// Behaviour as data: the order is the order of the reasons users see.
constexpr std::array<ExclusionRule, 15> kRules = {
    by_caller,    by_cordon,  by_policy,    by_filter,     by_method,
    by_chain_id,  by_breaker, by_half_open, by_archive,    by_height,
    by_min_block, by_limit,   by_quota,     by_quarantine, by_lag,
};

}  // namespace

std::string_view exclusion_kind_name(ExclusionKind k) {
  switch (k) {
    case ExclusionKind::caller:
      return "caller";
    case ExclusionKind::cordon:
      return "cordon";
    case ExclusionKind::policy:
      return "policy";
    case ExclusionKind::filter:
      return "filter";
    case ExclusionKind::method:
      return "method";
    case ExclusionKind::chain_id:
      return "chain_id";
    case ExclusionKind::breaker:
      return "breaker";
    case ExclusionKind::half_open:
      return "half_open";
    case ExclusionKind::lag:
      return "lag";
    case ExclusionKind::archive:
      return "archive";
    case ExclusionKind::height:
      return "height";
    case ExclusionKind::limit:
      return "limit";
    case ExclusionKind::quota:
      return "quota";
    case ExclusionKind::quarantine:
      return "quarantine";
  }
  return "?";
}

std::string cordon_text(const Cordon& c, std::int64_t now_ms) {
  std::string out = "cordoned";
  if (!c.reason.empty()) fmt::format_to(std::back_inserter(out), ": {}", c.reason);
  if (c.until_ms == 0) {
    out += " (until uncordoned)";
  } else {
    const auto t = static_cast<std::time_t>(c.until_ms / 1000);
    std::tm tm{};
    ::gmtime_r(&t, &tm);
    fmt::format_to(std::back_inserter(out), " (until {:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z, in {})",
                   tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                   seconds_text(c.until_ms - now_ms));
  }
  return out;
}

std::optional<bool> archival_of(const Provider& p, const ProviderState* ps) {
  if (p.archival) return p.archival;
  if (ps == nullptr) return std::nullopt;
  if (ps->archival_seen.archival && ps->archival_seen.t_ms >= ps->probe.t_ms)
    return ps->archival_seen.archival;
  return ps->probe.archival;
}

std::span<const ExclusionRule> exclusion_rules() { return kRules; }

Fate apply_exclusion_rules(const RuleInput& in, const ProviderView& view,
                           std::vector<Exclusion>& excluded) {
  bool open =
      false;  // excluded by its breaker already: later rules only decide whether it may be a trial
  for (const ExclusionRule rule : kRules) {
    auto v = rule(in, view);
    if (!v) continue;
    if (v->keep == Keep::lag && open)
      continue;  // an open breaker is tried as a trial, not as a laggard
    if (!open)
      excluded.push_back({view.provider->id, std::move(v->reason), v->retry_in_ms, v->kind});
    switch (v->keep) {
      case Keep::trial:
        open = true;
        continue;
      case Keep::lag:
        return Fate::lagging;
      case Keep::no:
        return Fate::out;
    }
  }
  return open ? Fate::trial : Fate::candidate;
}

}  // namespace rpcroute

#include "rpcroute/planner.hpp"

#include <simdjson.h>

#include <algorithm>

#include "rpcroute/exclusions.hpp"
#include "rpcroute/methods.hpp"

namespace rpcroute {

namespace {

/// The first element of a params array when it is a string ("0x1" for a filter id).
std::optional<std::string> first_string_param(std::string_view params) {
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(params.data(), params.size(), true).get(root)) return std::nullopt;
  simdjson::dom::array arr;
  if (root.get_array().get(arr) || arr.size() == 0) return std::nullopt;
  std::string_view s;
  if (arr.at(0).get_string().get(s)) return std::nullopt;
  return std::string(s);
}

// Ten times the median, never under 250 ms (a local node answers in a millisecond, and a busy
// machine pauses longer than that); 1 s when the provider has no latency data yet.
constexpr std::int64_t kStallFloorMs = 250;
constexpr std::int64_t kStallColdMs = 1'000;

}  // namespace

void AttemptsInFlight::start(const Provider* p, std::string_view method, std::int64_t t_ms) {
  by_provider_[p].push_back({method, t_ms});
}

void AttemptsInFlight::finish(const Provider* p, std::int64_t start_ms) {
  auto it = by_provider_.find(p);
  if (it == by_provider_.end()) return;
  auto& v = it->second;
  auto a =
      std::find_if(v.begin(), v.end(), [&](const Attempt& x) { return x.start_ms == start_ms; });
  if (a != v.end()) v.erase(a);
}

const AttemptsInFlight::Attempt* AttemptsInFlight::oldest(const Provider* p) const {
  auto it = by_provider_.find(p);
  if (it == by_provider_.end() || it->second.empty()) return nullptr;
  return &*std::min_element(
      it->second.begin(), it->second.end(),
      [](const Attempt& a, const Attempt& b) { return a.start_ms < b.start_ms; });
}

bool attempt_stalled(std::int64_t age_ms, double p50_ms) {
  if (age_ms < kStallFloorMs) return false;
  if (p50_ms <= 0) return age_ms >= kStallColdMs;
  return static_cast<double>(age_ms) >= 10.0 * p50_ms;
}

/// The providers' heights as the head rule sees them, per profile position. Per-thread buffers:
/// plan() runs for every call and never suspends.
struct Planner::Heights {
  std::vector<const ProviderState*>& states;
  std::vector<std::optional<std::uint64_t>>& estimates;
  std::vector<HeadClaim>& claims;
  std::vector<ClaimJudgement>& judgements;
  std::optional<Height> reference;  // the chain's head as one observation
};

Planner::Planner(const Profile& profile, const HealthView& health, const Clock& clock, Random& rng,
                 const LocalTraffic& traffic)
    : profile_(profile), health_(health), clock_(clock), rng_(rng), traffic_(traffic) {}

Planner::Planner(const Profile& profile, const HealthView& health, const Clock& clock, Random& rng)
    : profile_(profile),
      health_(health),
      clock_(clock),
      rng_(rng),
      own_traffic_(std::in_place),
      traffic_(*own_traffic_) {}

const std::string& Planner::provider_key_for(const Chain& chain, const Provider& provider) {
  auto it = keys_.find(&provider);
  if (it == keys_.end())
    it = keys_.emplace(&provider, provider_key(profile_.name, chain.name, provider)).first;
  return it->second;
}

const std::string& Planner::chain_key_for(const Chain& chain) {
  auto it = chain_keys_.find(&chain);
  if (it == chain_keys_.end())
    it = chain_keys_.emplace(&chain, chain_key(profile_.name, chain)).first;
  return it->second;
}

void Planner::read_heights(const Chain& chain, std::int64_t now, Heights& h) {
  // Heights: one rule (chain_head) over the providers' fresh observations, shared with lag
  // judgements, probe and the sidecar. The head is taken over providers not shut out by their
  // breaker (a dead provider's last height would make every live one look behind); lag compares
  // like with like (lag_behind), so an exclusion lasts while both heights are fresh.
  const auto n = chain.providers.size();
  h.states.assign(n, nullptr);
  h.estimates.assign(n, std::nullopt);
  h.claims.assign(n, HeadClaim{Height{}, false});
  h.judgements.assign(n, ClaimJudgement{});
  for (std::size_t i = 0; i < n; ++i) {
    const ProviderState* found = health_.provider(provider_key_for(chain, chain.providers[i]));
    if (found == nullptr) continue;
    const auto& ps = *found;
    h.states[i] = &ps;
    const bool right_chain = ps.probe.chain_id == 0 || ps.probe.chain_id == chain.chain_id;
    h.claims[i] = {ps.height, right_chain && ps.breaker.effective_state(now) != BreakerState::open};
    if (right_chain && height_fresh(ps.height, now, chain) &&
        ps.height.block <= kMaxPlausibleHeight) {
      h.estimates[i] = estimate_height(ps.height, now, chain);
    }
  }
  h.reference = chain_head(h.claims, h.judgements, chain, now).head;
}

Plan Planner::plan(const Chain& chain, std::string_view method, std::string_view params,
                   const RouteOptions& options) {
  Plan plan;
  plan.policy = profile_.policy_for(method);
  plan.strategy =
      options.strategy.value_or(plan.policy.strategy.value_or(profile_.routing.default_strategy));
  const auto now = clock_.now_ms();

  thread_local std::vector<const ProviderState*> states;
  thread_local std::vector<std::optional<std::uint64_t>> estimates;
  thread_local std::vector<HeadClaim> claims;
  thread_local std::vector<ClaimJudgement> judgements;
  Heights heights{states, estimates, claims, judgements, std::nullopt};
  read_heights(chain, now, heights);
  // The mark counts for the head (archive and block decisions) only when no provider height is
  // fresh; lag is never measured against it.
  if (heights.reference) {
    plan.head = heights.reference->block;
  } else if (const ChainState* cs = health_.chain(chain_key_for(chain));
             cs != nullptr && height_fresh(cs->high_water, now, chain)) {
    plan.head = cs->high_water.block;
  }
  const RuleInput in = read_request(chain, method, params, options, plan, heights, now);
  sort_providers(chain, in, options, plan, heights);
  rank(chain, plan, method, params, now);
  return plan;
}

RuleInput Planner::read_request(const Chain& chain, std::string_view method,
                                std::string_view params, const RouteOptions& options, Plan& plan,
                                const Heights& heights, std::int64_t now) {
  RuleInput in;
  in.chain = &chain;
  in.method = method;
  in.policy = &plan.policy;
  if (options.provider) in.only_provider = *options.provider;
  if (method_info(method).filter == FilterRole::reads) {
    if (auto id = first_string_param(params)) {
      if (const FilterPin* pin = health_.filter(filter_key(profile_.name, chain, *id));
          pin != nullptr) {
        in.filter_owner = pin->provider;
      }
    }
  }
  plan.need = analyze_block_need(method, params);
  if (plan.need.any()) {
    bool earliest = false;
    for (const auto* ref : {&plan.need.block, &plan.need.from, &plan.need.to}) {
      earliest = earliest || (*ref && (*ref)->kind == BlockRef::Kind::earliest);
    }
    const auto oldest = oldest_block(plan.need, plan.head);
    plan.needs_archive =
        earliest || (oldest && plan.head > 0 && *oldest + chain.archival_threshold < plan.head);
  }
  in.need = plan.need;
  in.head = plan.head;
  in.needs_archive = plan.needs_archive;
  in.highest = highest_numbered_block(plan.need);
  // Blocks an eth_getLogs call scans; 0 when not known (a tag without a head, a blockHash query).
  in.log_range = method == "eth_getLogs" ? log_range_blocks(plan.need, plan.head).value_or(0) : 0;
  in.reference = heights.reference;
  in.min_block = options.min_block;
  in.now_ms = now;
  in.half_open_max_inflight = profile_.health.circuit_breaker.half_open_max_inflight;
  in.half_open_trials = &traffic_.half_open_trials;
  return in;
}

void Planner::sort_providers(const Chain& chain, const RuleInput& in, const RouteOptions& options,
                             Plan& plan, const Heights& heights) {
  const bool needs_stats = options.with_stats || plan.strategy == Strategy::fastest ||
                           plan.strategy == Strategy::latency_weighted;
  std::vector<Candidate> lagging;
  std::vector<Candidate>
      open;  // open breakers that pass every other rule: trials when nothing else is usable
  plan.candidates.reserve(chain.providers.size());
  for (std::size_t i = 0; i < chain.providers.size(); ++i) {
    const Provider& p = chain.providers[i];
    const ProviderState* ps = heights.states[i];
    ProviderView view;
    view.provider = &p;
    view.state = ps;
    view.key = provider_key_for(chain, p);
    if (ps != nullptr) view.breaker = ps->breaker.effective_state(in.now_ms);
    view.estimate = heights.estimates[i];
    view.judgement = heights.judgements[i];
    const Fate fate = apply_exclusion_rules(in, view, plan.excluded);
    if (fate == Fate::out) continue;
    Candidate c = make_candidate(view, i, in.method, plan.strategy, needs_stats, options.websocket,
                                 in.now_ms);
    if (fate == Fate::trial) {
      open.push_back(std::move(c));
    } else if (fate == Fate::lagging) {
      lagging.push_back(std::move(c));
    } else {
      plan.candidates.push_back(std::move(c));
    }
  }
  // A lagging or quarantined provider is better than none: when that alone left nothing to try,
  // they are tried (eth_blockNumber answers still never go below the mark, and a doubtful head
  // answer is still refused).
  if (plan.candidates.empty() && !lagging.empty()) {
    plan.lag_fallback = true;
    std::erase_if(plan.excluded, [](const Exclusion& e) {
      return e.kind == ExclusionKind::lag || e.kind == ExclusionKind::quarantine;
    });
    plan.candidates = std::move(lagging);
  }
  // Nothing usable at all: rather than refuse everyone until a recovery timeout passes, each open
  // breaker lets one request through as a trial (half_open_max_inflight at a time); a success
  // closes it. A node that came back is used by the next request, not 30 s later.
  if (plan.candidates.empty() && !open.empty()) {
    plan.breaker_trial = true;
    std::erase_if(plan.excluded, [&](const Exclusion& e) {
      return e.kind == ExclusionKind::breaker &&
             std::any_of(open.begin(), open.end(),
                         [&](const Candidate& c) { return c.provider->id == e.provider; });
    });
    plan.candidates = std::move(open);
  }
}

Candidate Planner::make_candidate(const ProviderView& view, std::size_t position,
                                  std::string_view method, Strategy strategy, bool needs_stats,
                                  bool websocket, std::int64_t now) const {
  Candidate c;
  c.provider = view.provider;
  c.position = position;
  c.key = view.key;
  if (const ProviderState* ps = view.state; ps != nullptr) {
    const bool is_open = view.breaker == BreakerState::open;
    c.breaker = view.breaker;
    c.rate_limited_until_ms = ps->rate_limited_until_ms;
    c.tier = tier_of(is_open ? BreakerState::half_open : view.breaker, ps->rate_limited(now));
    if (needs_stats) {
      const bool weighted = strategy == Strategy::latency_weighted;
      const auto window = weighted ? profile_.strategies.latency_weighted.window_ms
                                   : profile_.strategies.fastest.window_ms;
      auto m = ps->methods.find(method);
      c.stats = summarize(m == ps->methods.end() ? nullptr : &m->second, now, window);
      // What the other hosts on one Redis measured: a prior while this host has few samples.
      if (!ps->shared_latency.empty()) {
        auto s = ps->shared_latency.find(catalogue_slot(method));
        if (s != ps->shared_latency.end()) {
          c.stats = with_prior(c.stats, &s->second,
                               weighted ? profile_.strategies.latency_weighted.min_calls
                                        : profile_.strategies.fastest.min_calls);
        }
      }
    }
  }
  if (websocket) choose_transport(c, view.state, method, strategy, needs_stats, now);
  if (stalled(*view.provider, view.state, now)) c.tier = Tier::stalled;
  return c;
}

LatencyStats Planner::ws_stats_of(const ProviderState& ps, std::string_view method,
                                  Strategy strategy, std::int64_t now) const {
  const auto window = strategy == Strategy::latency_weighted
                          ? profile_.strategies.latency_weighted.window_ms
                          : profile_.strategies.fastest.window_ms;
  const std::string key = sample_method(method, TransportKind::ws);
  auto m = ps.methods.find(method_slot(ps.methods, key));
  return summarize(m == ps.methods.end() ? nullptr : &m->second, now, window);
}

void Planner::choose_transport(Candidate& c, const ProviderState* ps, std::string_view method,
                               Strategy strategy, bool needs_stats, std::int64_t now) const {
  const Provider& p = *c.provider;
  if (p.transport == TransportMode::http || p.ws_url.empty()) return;
  // A provider on trial (its breaker not closed) is tried over HTTP, whose breaker it is; a
  // WebSocket whose own breaker is open waits out its recovery time the same way.
  if (c.breaker != BreakerState::closed) return;
  if (ps != nullptr && ps->ws_breaker.effective_state(now) == BreakerState::open) return;
  const bool latency = strategy == Strategy::fastest || strategy == Strategy::latency_weighted;
  if (p.transport == TransportMode::ws) {
    c.transport = TransportKind::ws;
    if (needs_stats)
      c.stats = ps != nullptr ? ws_stats_of(*ps, method, strategy, now) : LatencyStats{};
    return;
  }
  if (!latency) return;  // auto: measured only by the latency strategies; HTTP for the others
  // Over HTTP, c.stats are the method's (with the shared prior); over the WebSocket, this host's
  // own samples only (the socket is this host's).
  c.weighed = true;
  c.http_stats = c.stats;
  if (ps != nullptr) c.ws_stats = ws_stats_of(*ps, method, strategy, now);
  const bool weighted = strategy == Strategy::latency_weighted;
  const int min_calls = weighted ? profile_.strategies.latency_weighted.min_calls
                                 : profile_.strategies.fastest.min_calls;
  const double min_rate = weighted ? profile_.strategies.latency_weighted.min_success_rate
                                   : profile_.strategies.fastest.min_success_rate;
  if (better_transport(c.http_stats, c.ws_stats, min_calls, min_rate) == TransportKind::ws) {
    c.transport = TransportKind::ws;
    c.stats = c.ws_stats;
  }
}

void Planner::rank(const Chain& chain, Plan& plan, std::string_view method, std::string_view params,
                   std::int64_t now) {
  RankInput in;
  in.strategy = plan.strategy;
  in.params = &profile_.strategies;
  in.rng = &rng_;
  if (const ChainState* cs = health_.chain(chain_key_for(chain)); cs != nullptr)
    in.rr_cursor = cs->rr_cursor;
  rank_candidates(plan.candidates, in);
  // A sender's nonce lookups, sends and receipt polls go where its last ones went (one mempool),
  // whatever the strategy drew, as long as that provider is in the best tier (and group).
  plan.sticky = sticky_key(method, params);
  auto id = traffic_.sticky.find(chain.name, plan.sticky, now);
  if (!id || plan.candidates.empty()) return;
  auto& cands = plan.candidates;
  auto it = std::find_if(cands.begin(), cands.end(),
                         [&](const Candidate& c) { return c.provider->id == *id; });
  if (it == cands.end() || standing(*it) != standing(cands.front())) return;
  std::rotate(cands.begin(), it, it + 1);
  for (auto& c : cands) c.first_probability = 0;
  cands.front().first_probability = 1.0;
}

bool Planner::stalled(const Provider& p, const ProviderState* ps, std::int64_t now) const {
  const auto* a = traffic_.attempts.oldest(&p);
  if (a == nullptr) return false;
  const auto age = now - a->start_ms;
  if (age < kStallFloorMs) return false;  // the common case: no statistics needed
  double p50 = 0;
  if (ps != nullptr) {
    if (auto m = ps->methods.find(a->method); m != ps->methods.end()) {
      p50 = summarize(&m->second, now, profile_.strategies.fastest.window_ms).p50_ms;
    }
  }
  return attempt_stalled(age, p50);
}

}  // namespace rpcroute

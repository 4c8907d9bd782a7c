// One chain as the dashboard and `rpcroute top` show it (dashboard_view.hpp).
#include "dashboard_view.hpp"

#include "rpcroute/blocks.hpp"
#include "rpcroute/health/breaker.hpp"
#include "rpcroute/plan_report.hpp"

namespace rpcroute::sidecar {

namespace {

const Candidate* find_candidate(const Plan& plan, const Provider& p) {
  for (const auto& c : plan.candidates)
    if (c.provider == &p) return &c;
  return nullptr;
}

const Exclusion* find_exclusion(const Plan& plan, const Provider& p) {
  for (const auto& e : plan.excluded)
    if (e.provider == p.id) return &e;
  return nullptr;
}

template <class T>
void value_or_null(json::Writer& w, bool known, T v) {
  if (known)
    w.value(v);
  else
    w.null();
}

/// The health-state half of a provider's row: breaker, rate limit, height and lag.
void write_health(json::Writer& w, const ProviderState* st, std::uint64_t head, std::int64_t now) {
  const BreakerState breaker = st ? st->breaker.effective_state(now) : BreakerState::closed;
  w.key("breaker");
  w.value(breaker_state_name(breaker));
  w.key("half_open_in_ms");
  value_or_null(w, breaker == BreakerState::open, st ? st->breaker.retry_in_ms(now) : 0);
  w.key("breaker_reason");
  value_or_null(w, st != nullptr && breaker != BreakerState::closed && !st->breaker.reason.empty(),
                st ? std::string_view(st->breaker.reason) : std::string_view());
  w.key("rate_limited_until_ms");
  w.value(st != nullptr && st->rate_limited(now) ? st->rate_limited_until_ms : 0);
  const bool has_height = st != nullptr && st->height.t_ms > 0;  // block 0 is a height (anvil)
  w.key("height");
  value_or_null(w, has_height, has_height ? st->height.block : 0);
  w.key("lag");
  value_or_null(w, has_height,
                has_height ? static_cast<std::int64_t>(head) -
                                 static_cast<std::int64_t>(std::min(st->height.block, head))
                           : 0);
}

/// The routing half: where the plan put it (tier, probability, latency) or why it left it out.
void write_routing(json::Writer& w, const Candidate* c, const Exclusion* e) {
  w.key("tier");
  value_or_null(w, c != nullptr, c ? static_cast<int>(c->tier) : 0);
  w.key("tier_name");
  value_or_null(w, c != nullptr, c ? tier_name(c->tier) : std::string_view());
  w.key("first_probability");
  value_or_null(w, c != nullptr, c ? c->first_probability : 0.0);
  w.key("samples");
  value_or_null(w, c != nullptr, c ? c->stats.calls : 0);
  w.key("success_rate");
  value_or_null(w, c != nullptr && c->stats.calls > 0, c ? c->stats.success_rate : 0.0);
  w.key("p50_ms");
  value_or_null(w, c != nullptr && c->stats.has_latency(), c ? c->stats.p50_ms : 0.0);
  w.key("excluded");
  value_or_null(w, e != nullptr, e ? std::string_view(e->reason) : std::string_view());
  w.key("excluded_kind");
  value_or_null(w, e != nullptr, e ? exclusion_kind_name(e->kind) : std::string_view());
}

/// How the provider's single requests go now (issue 18), as rank shows it: "transport", the
/// plan's for it ("http" or "ws"; null when it is not a candidate), and "ws_breaker", its
/// WebSocket's breaker (null unless its `transport:` is ws or auto).
void write_transport(json::Writer& w, const Provider& p, const Candidate* c,
                     const ProviderState* st, std::int64_t now) {
  w.key("transport");
  value_or_null(w, c != nullptr, c ? transport_name(c->transport) : std::string_view());
  const bool ws = p.transport != TransportMode::http && !p.ws_url.empty();
  w.key("ws_breaker");
  value_or_null(
      w, ws, breaker_state_name(st ? st->ws_breaker.effective_state(now) : BreakerState::closed));
}

/// "cache": {hits, misses, bypasses, bytes, max_bytes} (null: off), "hedges": {fired, won}.
void write_counters(json::Writer& w, const ChainCounters& c) {
  const ChainActivity& a = c.activity;
  w.key("cache");
  if (c.cache == nullptr) {
    w.null();
  } else {
    w.begin_object();
    w.key("hits");
    w.value(a.cache_hits);
    w.key("misses");
    w.value(a.cache_misses);
    w.key("bypasses");
    w.value(a.cache_bypasses);
    w.key("bytes");  // the profile's cache: shared by its chains
    w.value(static_cast<std::uint64_t>(c.cache->bytes));
    w.key("max_bytes");
    w.value(static_cast<std::uint64_t>(c.cache->max_bytes));
    w.end_object();
  }
  w.key("hedges");
  w.begin_object();
  w.key("fired");
  w.value(a.hedges_fired);
  w.key("won");
  w.value(a.hedges_won);
  w.end_object();
}

}  // namespace

void write_chain_view(json::Writer& w, Router& router, const Chain& chain, const HealthView& view,
                      std::optional<Strategy> strategy, std::int64_t now, const Dashboard* dash,
                      const ChainCounters* counters) {
  const Profile& profile = router.profile();
  RouteOptions opts;
  opts.strategy = strategy;
  opts.with_stats = true;
  // As the sidecar routes a single request (and rank shows it): over a provider's WebSocket where
  // its `transport:` allows it.
  opts.websocket = true;
  const Plan plan = router.plan(chain, "eth_blockNumber", "[]", opts);
  const std::uint64_t head = best_known_height(view, profile, chain, now);
  // 0 is both "nothing fresh" and a dev chain's genesis: known when some provider has a height.
  bool head_known = head > 0;
  for (const auto& p : chain.providers) {
    const ProviderState* st = view.provider(provider_key(profile.name, chain.name, p));
    head_known = head_known || (st != nullptr && st->height.t_ms > 0);
  }
  w.begin_object();
  w.key("profile");
  w.value(profile.name);
  w.key("chain");
  w.value(chain.name);
  w.key("chain_id");
  w.value(static_cast<std::uint64_t>(chain.chain_id));
  w.key("strategy");
  w.value(strategy_name(plan.strategy));
  w.key("head");
  value_or_null(w, head_known, head);
  w.key("plan");
  write_plan_json(w, profile, chain, "eth_blockNumber", plan, now, true);
  const std::uint64_t firsts = dash ? dash->chain_firsts(profile.name, chain.name) : 0;
  w.key("first_attempts");
  value_or_null(w, dash != nullptr, firsts);
  if (counters != nullptr) write_counters(w, *counters);
  w.key("providers");
  w.begin_array();
  for (const auto& p : chain.providers) {
    w.begin_object();
    w.key("provider");
    w.value(p.id);
    const ProviderState* st = view.provider(provider_key(profile.name, chain.name, p));
    const Candidate* c = find_candidate(plan, p);
    write_health(w, st, head, now);
    write_routing(w, c, find_exclusion(plan, p));
    write_transport(w, p, c, st, now);
    if (dash != nullptr) {
      const ProviderTraffic t = dash->traffic(profile.name, chain.name, p.id);
      w.key("first_share");
      value_or_null(w, firsts > 0, firsts > 0 ? double(t.first) / double(firsts) : 0.0);
      w.key("attempts");
      w.value(t.attempts);
      w.key("answered");
      w.value(t.answered);
    }
    w.end_object();
  }
  w.end_array();
  if (dash != nullptr) {
    w.key("series");
    dash->write_series_json(w, profile.name, chain.name, now);
  }
  w.end_object();
}

}  // namespace rpcroute::sidecar

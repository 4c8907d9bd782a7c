#include "rpcroute/plan_report.hpp"

#include <fmt/format.h>

namespace rpcroute {

namespace {

std::string ms_text(double ms) {
  if (ms < 10) return fmt::format("{:.2f} ms", ms);
  if (ms < 1000) return fmt::format("{:.1f} ms", ms);
  return fmt::format("{:.2f} s", ms / 1000);
}

/// How an attempt on the candidate goes, where its provider may use its WebSocket (issue 18); ""
/// for an HTTP-only provider.
std::string transport_text(const Candidate& c) {
  const auto side = [](const char* name, const LatencyStats& s) {
    if (s.calls == 0) return fmt::format("{} no data", name);
    if (!s.has_latency()) return fmt::format("{} {} call(s), none answered", name, s.calls);
    return fmt::format("{} p50 {} over {} call(s), {:.0f}% success", name, ms_text(s.p50_ms),
                       s.calls, s.success_rate * 100);
  };
  if (c.weighed) {
    return fmt::format("; it goes over {} ({}; {})",
                       c.transport == TransportKind::ws ? "its WebSocket" : "HTTP",
                       side("WebSocket", c.ws_stats), side("HTTP", c.http_stats));
  }
  switch (c.provider->transport) {
    case TransportMode::http:
      return "";
    case TransportMode::ws:
      return c.transport == TransportKind::ws
                 ? "; it goes over its WebSocket (transport: ws)"
                 : "; it goes over HTTP (transport: ws, but its WebSocket is not usable now)";
    case TransportMode::automatic:
      return "; it goes over HTTP (transport: auto weighs both only under fastest and "
             "latency_weighted)";
  }
  return "";
}

}  // namespace

std::string explain_candidate(Strategy s, const Candidate& c, std::size_t pos, std::int64_t now) {
  std::string why;
  switch (s) {
    case Strategy::fastest:
      why = c.cold
                ? fmt::format(
                      "it has too little recent data for {} (ranked at the cold-start baseline {})",
                      "this method", ms_text(c.metric))
                : fmt::format("its rolling p50 is {} over {} call(s) with {:.0f}% success",
                              ms_text(c.stats.p50_ms), c.stats.calls, c.stats.success_rate * 100);
      break;
    case Strategy::priority:
      why = fmt::format("its priority is {}", c.provider->priority);
      break;
    case Strategy::round_robin:
      why = fmt::format("the round-robin cursor is at {}", c.metric);
      break;
    case Strategy::weighted:
      why = fmt::format("its weight {:g} gives it a {:.1f}% chance of being tried first",
                        c.provider->weight, c.first_probability * 100);
      break;
    case Strategy::latency_weighted:
      why = c.cold
                ? fmt::format(
                      "it has little data, so it gets an exploring weight {:.3g} ({:.1f}% first)",
                      c.metric, c.first_probability * 100)
                : fmt::format("p50 {} and {:.0f}% success give it weight {:.3g} ({:.1f}% first)",
                              ms_text(c.stats.p50_ms), c.stats.success_rate * 100, c.metric,
                              c.first_probability * 100);
      break;
    case Strategy::load_balanced:
    case Strategy::random:
      why = fmt::format("the order is drawn at random for each request ({:.1f}% first)",
                        c.first_probability * 100);
      break;
  }
  std::string tier;
  switch (c.tier) {
    case Tier::healthy:
      tier = "its circuit is closed and it is not rate-limited";
      break;
    case Tier::rate_limited:
      tier = fmt::format("it is rate-limited {}, so it drops to tier 2",
                         fmt::format("for another {:.1f}s",
                                     static_cast<double>(c.rate_limited_until_ms - now) / 1000.0));
      break;
    case Tier::half_open:
      tier =
          c.breaker == BreakerState::open
              ? "its circuit is open, but no provider is usable: it gets a trial request (tier 3)"
              : "its circuit is half-open (on trial), so it drops to tier 3";
      break;
    case Tier::half_open_rate_limited:
      tier = "its circuit is half-open and it is rate-limited: tier 4";
      break;
    case Tier::stalled:
      tier = "an attempt on it runs far beyond its usual latency, so it drops to the last tier";
      break;
  }
  if (c.provider->group == ProviderGroup::backup)
    tier += "; it is a backup, tried after every primary of its tier";
  return fmt::format("#{} {}: {}{}; {}.", pos, c.provider->id, why, transport_text(c), tier);
}

void write_plan_json(json::Writer& w, const Profile& profile, const Chain& chain,
                     std::string_view method, const Plan& plan, std::int64_t now, bool explain) {
  w.begin_object();
  write_plan_members(w, profile, chain, method, plan, now, explain);
  w.end_object();
}

/// `transport: auto` under a latency strategy: each transport's own figures.
static void write_transports(json::Writer& w, const Candidate& c) {
  w.key("transports");
  w.begin_object();
  for (const auto& [name, st] : {std::pair{"http", &c.http_stats}, std::pair{"ws", &c.ws_stats}}) {
    w.key(name);
    w.begin_object();
    w.key("samples");
    w.value(st->calls);
    w.key("p50_ms");
    if (st->has_latency())
      w.value(st->p50_ms);
    else
      w.null();
    w.key("success_rate");
    w.value(st->success_rate, 4);
    w.end_object();
  }
  w.end_object();
}

void write_plan_members(json::Writer& w, const Profile& profile, const Chain& chain,
                        std::string_view method, const Plan& plan, std::int64_t now, bool explain) {
  w.key("profile");
  w.value(profile.name);
  w.key("chain");
  w.value(chain.name);
  w.key("chain_id");
  w.value(static_cast<std::uint64_t>(chain.chain_id));
  w.key("method");
  w.value(method);
  w.key("strategy");
  w.value(strategy_name(plan.strategy));
  w.key("candidates");
  w.begin_array();
  for (std::size_t i = 0; i < plan.candidates.size(); ++i) {
    const auto& c = plan.candidates[i];
    w.begin_object();
    w.key("position");
    w.value(static_cast<std::int64_t>(i + 1));
    w.key("provider");
    w.value(c.provider->id);
    w.key("tier");
    w.value(static_cast<int>(c.tier));
    w.key("tier_name");
    w.value(tier_name(c.tier));
    w.key("group");
    w.value(group_name(c.provider->group));
    w.key("breaker");
    w.value(breaker_state_name(c.breaker));
    w.key("rate_limited_until_ms");
    w.value(c.rate_limited_until_ms > now ? c.rate_limited_until_ms : 0);
    w.key("metric");
    w.value(c.metric, 6);
    w.key("first_probability");
    w.value(c.first_probability, 6);
    w.key("cold");
    w.value(c.cold);
    w.key("samples");
    w.value(c.stats.calls);
    w.key("shared_samples");  // of `samples`, how many stand for other hosts' (shared state)
    w.value(c.stats.prior);
    w.key("p50_ms");
    if (c.stats.has_latency())
      w.value(c.stats.p50_ms);
    else
      w.null();
    w.key("success_rate");
    w.value(c.stats.success_rate, 4);
    w.key("freshness_ms");
    if (c.stats.newest_ms > 0)
      w.value(now - c.stats.newest_ms);
    else
      w.null();
    w.key("priority");
    w.value(c.provider->priority);
    w.key("weight");
    w.value(c.provider->weight);
    w.key("transport");  // issue 18: how an attempt on it goes (the sidecar's choice)
    w.value(transport_name(c.transport));
    if (c.weighed) write_transports(w, c);
    if (explain) {
      w.key("explain");
      w.value(explain_candidate(plan.strategy, c, i + 1, now));
    }
    w.end_object();
  }
  w.end_array();
  w.key("excluded");
  w.begin_array();
  for (const auto& e : plan.excluded) write_exclusion_json(w, e, RetryField::always);
  w.end_array();
}

void write_exclusion_json(json::Writer& w, const Exclusion& e, RetryField retry) {
  w.begin_object();
  w.key("provider");
  w.value(e.provider);
  w.key("kind");
  w.value(exclusion_kind_name(e.kind));
  w.key("reason");
  w.value(e.reason);
  if (retry == RetryField::always || (retry == RetryField::when_known && e.retry_in_ms > 0)) {
    w.key("retry_in_ms");
    if (e.retry_in_ms > 0)
      w.value(e.retry_in_ms);
    else
      w.null();
  }
  w.end_object();
}

void write_attempt_json(json::Writer& w, const AttemptRecord& a) {
  w.begin_object();
  w.key("provider");
  w.value(a.provider);
  w.key("outcome");
  w.value(outcome_name(a.result.outcome));
  w.key("class");
  w.value(class_name(a.result.cls));
  w.key("http_status");
  w.value(static_cast<std::int64_t>(a.http_status));
  w.key("latency_ms");
  w.value(a.latency_ms);
  if (a.transport == TransportKind::ws) {  // issue 18: absent, HTTP
    w.key("transport");
    w.value(transport_name(a.transport));
  }
  w.key("message");
  w.value(a.result.message);
  w.end_object();
}

}  // namespace rpcroute

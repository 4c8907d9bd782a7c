#include "metrics.hpp"

#include <fmt/format.h>

namespace rpcroute::sidecar {

namespace {

std::string label(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

/// rpcroute_breaker_state's value: 0 closed, 1 half-open, 2 open.
int breaker_gauge(BreakerState state) {
  return state == BreakerState::open ? 2 : state == BreakerState::half_open ? 1 : 0;
}

}  // namespace

std::string_view status_name(CallOutcome::Status s) {
  switch (s) {
    case CallOutcome::Status::result:
      return "result";
    case CallOutcome::Status::rpc_error:
      return "rpc_error";
    case CallOutcome::Status::unavailable:
      return "unavailable";
    case CallOutcome::Status::invalid:
      return "invalid";
    case CallOutcome::Status::local:
      return "local";
  }
  return "?";
}

/// The value under a key given as views, inserting it (with owned strings) when it is new.
template <class Map, class... Views>
typename Map::mapped_type& slot(Map& map, Views... views) {
  const auto key = std::make_tuple(std::string_view(views)...);
  auto it = map.find(key);
  if (it == map.end())
    it = map.emplace(typename Map::key_type(std::string(views)...), typename Map::mapped_type{})
             .first;
  return it->second;
}

void Metrics::on_call(const std::string& profile, const std::string& chain, std::string_view method,
                      const CallOutcome& out) {
  const std::string_view provider =
      out.provider.empty() ? std::string_view("-") : std::string_view(out.provider);
  const auto status = status_name(out.status);
  auto& c = last_call_;
  if (c.count == nullptr || c.status != status.data() || c.method != method ||
      c.provider != provider || c.chain != chain || c.profile != profile) {
    // Method names come from clients: cap how many distinct ones become label values. (A method
    // that matched the last call's was mapped the same way then.)
    std::string_view m = method;
    if (auto seen = methods_seen_.find(m); seen == methods_seen_.end()) {
      if (methods_seen_.size() >= 256 || m.size() > 64) {
        m = "other";
      } else {
        methods_seen_.emplace(std::string(m), true);
      }
    }
    c.count =
        &slot(calls_, std::string_view(profile), std::string_view(chain), m, provider, status);
    c.profile = profile;
    c.chain = chain;
    c.method.assign(method);
    c.provider.assign(provider);
    c.status = status.data();
  }
  ++*c.count;
  if (out.hedge != CallOutcome::Hedge::none)
    ++slot(hedges_, std::string_view(profile), std::string_view(chain), hedge_name(out.hedge));
  for (const auto& a : out.attempts) {
    const auto outcome = outcome_name(a.result.outcome);
    auto& l = last_attempt_;
    if (l.count == nullptr || l.outcome != outcome.data() || l.transport != a.transport ||
        l.provider != a.provider || l.chain != chain || l.profile != profile) {
      const auto transport = transport_name(a.transport);
      l.count = &slot(attempts_, std::string_view(profile), std::string_view(chain),
                      std::string_view(a.provider), outcome, transport);
      l.latency = &slot(latency_, std::string_view(profile), std::string_view(chain),
                        std::string_view(a.provider), transport);
      l.transport = a.transport;
      l.profile = profile;
      l.chain = chain;
      l.provider = a.provider;
      l.outcome = outcome.data();
    }
    ++*l.count;
    auto& h = *l.latency;
    for (std::size_t i = 0; i < kBucketsMs.size(); ++i) {
      if (a.latency_ms <= kBucketsMs[i]) ++h.buckets[i];
    }
    ++h.count;
    h.sum_s += a.latency_ms / 1000.0;
  }
}

std::string Metrics::render_shared(const shared::SharedStatus& s) {
  return fmt::format(
      "# HELP rpcroute_shared_state_up 1 while Redis (shared state) answers; 0: local state "
      "only.\n# TYPE rpcroute_shared_state_up gauge\nrpcroute_shared_state_up {}\n"
      "# HELP rpcroute_shared_state_fallbacks_total Times Redis went away and routing fell back "
      "to local state.\n# TYPE rpcroute_shared_state_fallbacks_total counter\n"
      "rpcroute_shared_state_fallbacks_total {}\n"
      "# HELP rpcroute_shared_state_syncs_total Refresh rounds Redis answered.\n# TYPE "
      "rpcroute_shared_state_syncs_total counter\nrpcroute_shared_state_syncs_total {}\n"
      "# HELP rpcroute_shared_state_adopted_total Changes of other hosts folded into the local "
      "state.\n# TYPE rpcroute_shared_state_adopted_total counter\n"
      "rpcroute_shared_state_adopted_total {}\n"
      "# HELP rpcroute_shared_state_write_errors_total Writes Redis refused (a full Redis).\n"
      "# TYPE rpcroute_shared_state_write_errors_total counter\n"
      "rpcroute_shared_state_write_errors_total {}\n"
      "# HELP rpcroute_shared_state_script_reloads_total Lua scripts Redis had forgotten "
      "(NOSCRIPT), loaded again.\n# TYPE rpcroute_shared_state_script_reloads_total counter\n"
      "rpcroute_shared_state_script_reloads_total {}\n",
      s.state == shared::LinkState::up ? 1 : 0, s.fallbacks, s.syncs, s.adopted, s.write_errors,
      s.script_reloads);
}

void Metrics::render_cache(std::string& out) const {
  auto it = std::back_inserter(out);
  const std::pair<const char*, std::uint64_t> counters[] = {
      {"cache_hits_total", cache_.hits},
      {"cache_misses_total", cache_.misses},
      {"cache_bypasses_total", cache_.bypasses},
      {"cache_evictions_total", cache_.evictions},
      {"cache_inserts_total", cache_.inserts},
      {"cache_too_large_total", cache_.too_large},
      {"coalesced_flights_total", coalesce_.leaders},
      {"coalesced_calls_total", coalesce_.joined},
      {"coalesced_rerouted_total", coalesce_.rerouted},
  };
  fmt::format_to(it,
                 "# HELP rpcroute_cache_hits_total Answer cache (issue 19): hits, misses, bypasses "
                 "(asked by the client), evictions, inserts, results too large to keep; coalesced "
                 "flights, calls answered by another call's flight, joined calls routed alone.\n");
  for (const auto& [name, v] : counters)
    fmt::format_to(it, "# TYPE rpcroute_{0} counter\nrpcroute_{0} {1}\n", name, v);
  fmt::format_to(it, "# HELP rpcroute_cache_bytes Bytes the answer cache holds, and its cap.\n");
  fmt::format_to(it, "# TYPE rpcroute_cache_bytes gauge\nrpcroute_cache_bytes {}\n", cache_.bytes);
  fmt::format_to(it, "# TYPE rpcroute_cache_max_bytes gauge\nrpcroute_cache_max_bytes {}\n",
                 cache_.max_bytes);
  fmt::format_to(it, "# TYPE rpcroute_cache_entries gauge\nrpcroute_cache_entries {}\n",
                 cache_.entries);
}

std::string Metrics::render(const std::vector<const Profile*>& profiles, const State& state,
                            std::int64_t now_ms) const {
  std::string out;
  auto it = std::back_inserter(out);
  fmt::format_to(it,
                 "# HELP rpcroute_requests_total JSON-RPC calls answered, by how they ended.\n");
  fmt::format_to(it, "# TYPE rpcroute_requests_total counter\n");
  for (const auto& [k, v] : calls_) {
    const auto& [profile, chain, method, provider, status] = k;
    fmt::format_to(it,
                   "rpcroute_requests_total{{profile=\"{}\",chain=\"{}\",method=\"{}\",provider=\"{"
                   "}\",outcome=\"{}\"}} {}\n",
                   label(profile), label(chain), label(method), label(provider), status, v);
  }
  fmt::format_to(
      it,
      "# HELP rpcroute_attempts_total Upstream attempts, by provider, outcome and transport.\n");
  fmt::format_to(it, "# TYPE rpcroute_attempts_total counter\n");
  for (const auto& [k, v] : attempts_) {
    const auto& [profile, chain, provider, outcome, transport] = k;
    fmt::format_to(it,
                   "rpcroute_attempts_total{{profile=\"{}\",chain=\"{}\",provider=\"{}\",outcome="
                   "\"{}\",transport=\"{}\"}} {}\n",
                   label(profile), label(chain), label(provider), outcome, transport, v);
  }
  fmt::format_to(it, "# HELP rpcroute_upstream_latency_seconds Upstream round trip per attempt.\n");
  fmt::format_to(it, "# TYPE rpcroute_upstream_latency_seconds histogram\n");
  for (const auto& [k, h] : latency_) {
    const auto& [profile, chain, provider, transport] = k;
    auto labels = fmt::format("profile=\"{}\",chain=\"{}\",provider=\"{}\",transport=\"{}\"",
                              label(profile), label(chain), label(provider), transport);
    for (std::size_t i = 0; i < kBucketsMs.size(); ++i) {
      fmt::format_to(it, "rpcroute_upstream_latency_seconds_bucket{{{},le=\"{}\"}} {}\n", labels,
                     kBucketsMs[i] / 1000.0, h.buckets[i]);
    }
    fmt::format_to(it, "rpcroute_upstream_latency_seconds_bucket{{{},le=\"+Inf\"}} {}\n", labels,
                   h.count);
    fmt::format_to(it, "rpcroute_upstream_latency_seconds_sum{{{}}} {}\n", labels, h.sum_s);
    fmt::format_to(it, "rpcroute_upstream_latency_seconds_count{{{}}} {}\n", labels, h.count);
  }
  fmt::format_to(it,
                 "# HELP rpcroute_http_responses_total HTTP answers of the sidecar by status.\n");
  fmt::format_to(it, "# TYPE rpcroute_http_responses_total counter\n");
  for (const auto& [status, v] : http_)
    fmt::format_to(it, "rpcroute_http_responses_total{{status=\"{}\"}} {}\n", status, v);
  fmt::format_to(it, "# HELP rpcroute_in_flight_requests HTTP requests being answered now.\n");
  fmt::format_to(it, "# TYPE rpcroute_in_flight_requests gauge\nrpcroute_in_flight_requests {}\n",
                 in_flight_);
  fmt::format_to(it, "# HELP rpcroute_connections Client connections open now.\n");
  fmt::format_to(it, "# TYPE rpcroute_connections gauge\nrpcroute_connections {}\n", connections_);
  fmt::format_to(
      it,
      "# HELP rpcroute_request_bytes_in_flight Request-body bytes held now (--max-inflight-mb).\n");
  fmt::format_to(
      it, "# TYPE rpcroute_request_bytes_in_flight gauge\nrpcroute_request_bytes_in_flight {}\n",
      request_bytes_);
  fmt::format_to(it,
                 "# HELP rpcroute_cancelled_total Requests abandoned because their client left.\n");
  fmt::format_to(it, "# TYPE rpcroute_cancelled_total counter\nrpcroute_cancelled_total {}\n",
                 cancelled_);
  fmt::format_to(it,
                 "# HELP rpcroute_refused_total Requests refused with 503 at a limit (connections, "
                 "memory).\n");
  fmt::format_to(it, "# TYPE rpcroute_refused_total counter\n");
  for (const auto& [reason, v] : refused_)
    fmt::format_to(it, "rpcroute_refused_total{{limit=\"{}\"}} {}\n", reason, v);
  fmt::format_to(it, "# HELP rpcroute_websocket_clients WebSocket clients connected now.\n");
  fmt::format_to(it, "# TYPE rpcroute_websocket_clients gauge\nrpcroute_websocket_clients {}\n",
                 websockets_);
  fmt::format_to(it,
                 "# HELP rpcroute_websocket_closes_total WebSocket clients gone, by close code "
                 "(1008: not reading, 1001: shutdown, 1006: no close frame).\n");
  fmt::format_to(it, "# TYPE rpcroute_websocket_closes_total counter\n");
  for (const auto& [code, v] : websocket_closes_)
    fmt::format_to(it, "rpcroute_websocket_closes_total{{code=\"{}\"}} {}\n", code, v);
  fmt::format_to(it,
                 "# HELP rpcroute_websocket_upstream_subscriptions Subscriptions open on "
                 "providers now, each shared by every client with the same one.\n");
  fmt::format_to(it,
                 "# TYPE rpcroute_websocket_upstream_subscriptions gauge\n"
                 "rpcroute_websocket_upstream_subscriptions {}\n",
                 websocket_upstream_subs_);
  fmt::format_to(it,
                 "# HELP rpcroute_hedges_total Hedged reads: a second provider was asked; by which "
                 "attempt answered (first, hedge, neither).\n");
  fmt::format_to(it, "# TYPE rpcroute_hedges_total counter\n");
  for (const auto& [k, v] : hedges_) {
    const auto& [profile, chain, won] = k;
    fmt::format_to(it, "rpcroute_hedges_total{{profile=\"{}\",chain=\"{}\",won=\"{}\"}} {}\n",
                   label(profile), label(chain), won, v);
  }
  render_cache(out);

  fmt::format_to(it,
                 "# HELP rpcroute_breaker_state Circuit breaker per provider and transport (http: "
                 "the provider's; ws: its WebSocket's, where transport is ws or auto): 0 closed, "
                 "1 half-open, 2 open.\n");
  fmt::format_to(it, "# TYPE rpcroute_breaker_state gauge\n");
  std::string limited =
      "# HELP rpcroute_rate_limited 1 while the provider is marked rate-limited.\n# TYPE "
      "rpcroute_rate_limited gauge\n";
  std::string heights =
      "# HELP rpcroute_provider_height Last block height seen from the provider.\n# TYPE "
      "rpcroute_provider_height gauge\n";
  std::string marks =
      "# HELP rpcroute_high_water_mark Greatest block height returned to clients or polled and "
      "confirmed.\n# TYPE "
      "rpcroute_high_water_mark gauge\n";
  for (const auto* p : profiles) {
    for (const auto& c : p->chains) {
      for (const auto& pr : c.providers) {
        auto labels = fmt::format("profile=\"{}\",chain=\"{}\",provider=\"{}\"", label(p->name),
                                  label(c.name), label(pr.id));
        auto found = state.providers.find(provider_key(p->name, c.name, pr));
        int breaker = 0;
        int ws_breaker = 0;
        bool rl = false;
        std::uint64_t height = 0;
        if (found != state.providers.end()) {
          breaker = breaker_gauge(found->second.breaker.effective_state(now_ms));
          ws_breaker = breaker_gauge(found->second.ws_breaker.effective_state(now_ms));
          rl = found->second.rate_limited(now_ms);
          height = found->second.height.block;
        }
        fmt::format_to(it, "rpcroute_breaker_state{{{},transport=\"http\"}} {}\n", labels, breaker);
        // The WebSocket's own breaker (issue 18), where the provider may route over it.
        if (pr.transport != TransportMode::http && !pr.ws_url.empty())
          fmt::format_to(it, "rpcroute_breaker_state{{{},transport=\"ws\"}} {}\n", labels,
                         ws_breaker);
        limited += fmt::format("rpcroute_rate_limited{{{}}} {}\n", labels, rl ? 1 : 0);
        heights += fmt::format("rpcroute_provider_height{{{}}} {}\n", labels, height);
      }
      auto cs = state.chains.find(chain_key(p->name, c));
      marks += fmt::format("rpcroute_high_water_mark{{profile=\"{}\",chain=\"{}\"}} {}\n",
                           label(p->name), label(c.name),
                           cs == state.chains.end() ? 0 : cs->second.high_water.block);
    }
  }
  out += limited;
  out += heights;
  out += marks;
  return out;
}

}  // namespace rpcroute::sidecar

#include "cmd_rank.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "options.hpp"
#include "output.hpp"
#include "rpcroute/json.hpp"
#include "rpcroute/plan_report.hpp"
#include "rpcroute/router.hpp"
#include "setup.hpp"

namespace rpcroute::cli {

void setup_rank(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<RankOptions>();
  auto* sub =
      app.add_subcommand("rank", "Show the ordered candidates the router would use now, and why");
  sub->add_option("--profile,-p", opts->profile,
                  "Profile name or path (default: $RPCROUTE_PROFILE or 'public')");
  sub->add_option("--chain,-c", opts->chain,
                  "Chain name or decimal chain id (default: the profile's first chain)");
  sub->add_option("--method,-m", opts->method, "Method to rank for (default eth_blockNumber)");
  sub->add_option("--strategy,-s", opts->strategy,
                  "Strategy (default: the profile's, with method overrides applied)");
  sub->add_option(
      "params", opts->params,
      "Params of the call to rank for, as for call (e.g. an address and block 0x1: archive and "
      "block-range filters depend on them)");
  sub->add_option("--state", opts->state,
                  "State file (default: $RPCROUTE_STATE or $XDG_STATE_HOME/rpcroute/state.json)");
  sub->add_flag("--no-state", opts->no_state,
                "Rank without the state file (no latency data, breakers or heights)");
  sub->add_option("--shared-state", opts->shared_state,
                  "Read what other hosts share through Redis (breakers, heights, learned limits, "
                  "latency summaries): redis://HOST:PORT/DB (default: the profile's shared_state)");
  sub->add_flag("--json", opts->json, "Print as JSON");
  sub->add_flag("--explain", opts->explain,
                "One plain sentence per provider saying why it is where it is (and, for a "
                "provider with transport: ws|auto, whether serve sends it over WebSocket or HTTP)");
  sub->callback([opts, &exit_code] { exit_code = run_rank(*opts); });
}

namespace {

std::string metric_header(Strategy s) {
  switch (s) {
    case Strategy::fastest:
      return "P50 RANKED";
    case Strategy::weighted:
    case Strategy::latency_weighted:
      return "WEIGHT";
    case Strategy::priority:
      return "PRIORITY";
    case Strategy::round_robin:
      return "CURSOR";
    default:
      return "METRIC";
  }
}

std::string metric_text(Strategy s, const Candidate& c) {
  switch (s) {
    case Strategy::fastest:
      return c.cold ? fmt::format("{} (baseline)", format_ms(c.metric)) : format_ms(c.metric);
    case Strategy::weighted:
    case Strategy::latency_weighted:
      return fmt::format("{:.3g}", c.metric);
    case Strategy::priority:
    case Strategy::round_robin:
      return fmt::format("{:g}", c.metric);
    default:
      return "-";
  }
}

std::string tier_text(const Candidate& c, std::int64_t now) {
  std::string t = fmt::format("{} {}", static_cast<int>(c.tier), tier_name(c.tier));
  if (c.rate_limited_until_ms > now)
    t += fmt::format(" (until {})", relative_time(c.rate_limited_until_ms, now));
  return t;
}

/// Strategies that draw their order per request: one plan is one draw, so it is listed by the
/// chance of coming first instead (within its tier), which matches the P(FIRST) column.
bool drawn_per_request(Strategy s) {
  return s == Strategy::load_balanced || s == Strategy::random || s == Strategy::weighted ||
         s == Strategy::latency_weighted;
}

/// One row per candidate; a GROUP column only where the chain has backups (primaries alone is the
/// usual case), a TRANSPORT column only where a provider may use its WebSocket (issue 18), and
/// under a provider whose two transports were weighed (transport: auto), a row for each.
Table candidate_table(const Chain& chain, Strategy strategy, const std::vector<Candidate>& shown,
                      std::int64_t now) {
  const bool groups =
      std::any_of(chain.providers.begin(), chain.providers.end(),
                  [](const Provider& p) { return p.group != ProviderGroup::primary; });
  std::vector<std::string> head{"#",        "PROVIDER", "TIER", "BREAKER", metric_header(strategy),
                                "P(FIRST)", "SAMPLES",  "P50",  "SUCCESS"};
  if (groups) head.insert(head.begin() + 3, "GROUP");
  const bool transports =
      std::any_of(chain.providers.begin(), chain.providers.end(),
                  [](const Provider& p) { return p.transport != TransportMode::http; });
  if (transports) head.insert(head.begin() + 2, "TRANSPORT");
  Table t(head);
  // A transport's own figures, as a row under its provider's.
  auto transport_row = [&](TransportKind k, const LatencyStats& s) {
    std::vector<std::string> row{"",
                                 fmt::format("  {}", transport_name(k)),
                                 "",
                                 "",
                                 "",
                                 "",
                                 "",
                                 std::to_string(s.calls),
                                 s.has_latency() ? format_ms(s.p50_ms) : "-",
                                 s.calls > 0 ? fmt::format("{:.0f}%", s.success_rate * 100) : "-"};
    if (groups) row.insert(row.begin() + 3, "");
    t.add(row);
  };
  for (std::size_t i = 0; i < shown.size(); ++i) {
    const auto& c = shown[i];
    std::vector<std::string> row{
        std::to_string(i + 1),
        c.provider->id,
        tier_text(c, now),
        std::string(breaker_state_name(c.breaker)),
        metric_text(strategy, c),
        fmt::format("{:.1f}%", c.first_probability * 100),
        std::to_string(c.stats.calls),
        c.stats.has_latency() ? format_ms(c.stats.p50_ms) : "-",
        c.stats.calls > 0 ? fmt::format("{:.0f}%", c.stats.success_rate * 100) : "-"};
    if (groups) row.insert(row.begin() + 3, std::string(group_name(c.provider->group)));
    if (transports) row.insert(row.begin() + 2, std::string(transport_name(c.transport)));
    t.add(row);
    if (transports && c.weighed) {
      transport_row(TransportKind::http, c.http_stats);
      transport_row(TransportKind::ws, c.ws_stats);
    }
  }
  return t;
}

/// `learned_limits`: the eth_getLogs block ranges the providers stated in their errors (issue 19),
/// which the router splits wider ranges by: [{provider, eth_getLogs_blocks, t_ms}].
void write_learned_limits(json::Writer& w, Setup& setup, const Chain& chain) {
  w.key("learned_limits");
  w.begin_array();
  for (const auto& p : chain.providers) {
    const ProviderState* ps =
        setup.health().provider(provider_key(setup.profile.name, chain.name, p));
    if (ps == nullptr || ps->log_limit.blocks == 0) continue;
    w.begin_object();
    w.key("provider");
    w.value(p.id);
    w.key("eth_getLogs_blocks");
    w.value(ps->log_limit.blocks);
    w.key("t_ms");
    w.value(ps->log_limit.t_ms);
    w.end_object();
  }
  w.end_array();
}

}  // namespace

int run_rank(const RankOptions& options) {
  Setup setup;
  if (!setup.select(options.profile, options.chain)) return code_of(ExitCode::usage);
  const Chain& chain = *setup.chain;
  RouteOptions route;
  route.with_stats = true;
  // As the sidecar would route a single request: a provider's WebSocket where its `transport:`
  // allows it (`call` and `bench` always use HTTP).
  route.websocket = true;
  if (auto s = strategy_flag(options.strategy); !s) {
    return usage_error(s.error().message);
  } else {
    route.strategy = *s;
  }
  if (!setup.open_state(resolve_state_path(options.state, options.no_state)) ||
      !setup.open_shared(options.shared_state))
    return code_of(ExitCode::usage);
  // The router plans without sending anything; the loop is there only for its Engine.
  EventLoop loop;
  Router router(setup.profile, loop.engine(), setup.health(), setup.clock, setup.rng);
  const auto params = params_json(options.params);
  const Plan plan = router.plan(chain, options.method, params, route);
  const auto now = setup.clock.now_ms();

  if (options.json) {
    json::Writer w;
    w.begin_object();
    write_plan_members(w, setup.profile, chain, options.method, plan, now, options.explain);
    write_learned_limits(w, setup, chain);
    w.end_object();
    write_stdout(w.take() + "\n");
    return 0;
  }

  fmt::print("{} on {} ({}), strategy {}\n", options.method, chain.name, chain.chain_id,
             strategy_name(plan.strategy));
  std::vector<Candidate> shown = plan.candidates;
  if (drawn_per_request(plan.strategy)) {
    std::stable_sort(shown.begin(), shown.end(), [](const Candidate& a, const Candidate& b) {
      if (standing(a) != standing(b)) return standing(a) < standing(b);
      if (a.first_probability != b.first_probability)
        return a.first_probability > b.first_probability;
      return a.position < b.position;
    });
    fmt::print("the order is drawn per request; listed by the chance of being tried first\n");
  }
  const Table t = candidate_table(chain, plan.strategy, shown, now);
  if (plan.candidates.empty()) {
    fmt::print("no eligible provider\n");
  } else {
    write_stdout(t.render());
  }
  if (!plan.excluded.empty()) {
    fmt::print("\nexcluded:\n");
    Table x({"  PROVIDER", "REASON"});
    for (const auto& e : plan.excluded) x.add({"  " + e.provider, e.reason});
    write_stdout(x.render());
  }
  // eth_getLogs range limits the providers stated in their errors (issue 19): the router splits
  // wider ranges up front.
  bool learned_header = false;
  for (const auto& p : chain.providers) {
    const ProviderState* ps =
        setup.health().provider(provider_key(setup.profile.name, chain.name, p));
    if (ps == nullptr || ps->log_limit.blocks == 0) continue;
    if (!learned_header) fmt::print("\nlearned eth_getLogs range limits:\n");
    learned_header = true;
    fmt::print("  {}: {} blocks (stated {})\n", p.id, ps->log_limit.blocks,
               relative_time(ps->log_limit.t_ms, now));
  }
  if (options.explain) {
    fmt::print("\n");
    for (std::size_t i = 0; i < shown.size(); ++i) {
      fmt::print("{}\n", explain_candidate(plan.strategy, shown[i], i + 1, now));
    }
    for (const auto& e : plan.excluded) fmt::print("{} is excluded: {}.\n", e.provider, e.reason);
  }
  return 0;
}

}  // namespace rpcroute::cli

#include "cmd_state.hpp"

#include <fmt/format.h>

#include <memory>

#include "output.hpp"
#include "rpcroute/metrics.hpp"
#include "rpcroute/state.hpp"
#include "setup.hpp"

namespace rpcroute::cli {

void setup_state(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<StateOptions>();
  auto* sub = app.add_subcommand(
      "state", "Inspect or reset the state file (latency samples, breakers, heights)");
  sub->require_subcommand(1);
  auto add = [&](const char* name, const char* help, bool json) {
    auto* s = sub->add_subcommand(name, help);
    s->add_option("--state", opts->state,
                  "State file (default: $RPCROUTE_STATE or $XDG_STATE_HOME/rpcroute/state.json)");
    if (json) s->add_flag("--json", opts->json, "Print the state as JSON");
    s->callback([opts, &exit_code, name] {
      opts->action = name;
      exit_code = run_state(*opts);
    });
  };
  add("path", "Print the state file's path", false);
  add("show", "Show providers, breakers, rate limits, heights and samples", true);
  add("reset", "Delete everything the state file holds", false);
}

int run_state(const StateOptions& options) {
  auto path = *resolve_state_path(options.state, false);
  if (options.action == "path") {
    write_stdout(path.string() + "\n");
    return 0;
  }
  Setup setup;
  if (options.action == "reset") {
    if (auto r = setup.new_store(path).reset(); !r) {
      print_error(r.error().message);
      return static_cast<int>(r.error().exit);
    }
    fmt::print("state reset: {}\n", path.string());
    return 0;
  }
  if (!setup.open_state(path)) return code_of(ExitCode::usage);
  const auto now = setup.clock.now_ms();
  const auto& state = setup.store->state();
  if (options.json) {
    write_stdout(serialize_state(state, now));
    return 0;
  }
  fmt::print("state file: {}\n", path.string());
  if (state.providers.empty() && state.chains.empty()) {
    fmt::print("(empty)\n");
    return 0;
  }
  Table t({"PROFILE/CHAIN", "PROVIDER", "BREAKER", "FAILURES", "RATE-LIMITED", "HEIGHT", "SAMPLES",
           "P50 (5m)", "LAST USED"});
  for (const auto& [key, ps] : state.providers) {
    std::size_t samples = 0;
    std::vector<double> latencies;
    for (const auto& [method, s] : ps.methods) {
      samples += s.size();
      auto stats = summarize(&s, now, 300'000);
      if (stats.has_latency()) latencies.push_back(stats.p50_ms);
    }
    auto eff = ps.breaker.effective_state(now);
    std::string breaker(breaker_state_name(eff));
    if (eff == BreakerState::open)
      breaker += fmt::format(" ({}s)", ps.breaker.retry_in_ms(now) / 1000);
    t.add({ps.profile + "/" + ps.chain, ps.provider, breaker, std::to_string(ps.breaker.failures),
           ps.rate_limited(now) ? relative_time(ps.rate_limited_until_ms, now) : "no",
           ps.height.block > 0 ? std::to_string(ps.height.block) : "-", std::to_string(samples),
           latencies.empty() ? "-" : format_ms(quantile(latencies, 0.5)),
           relative_time(ps.last_used_ms, now)});
  }
  write_stdout(t.render());
  if (!state.chains.empty()) {
    Table c({"PROFILE/CHAIN", "HIGH-WATER", "ROUND-ROBIN CURSOR"});
    for (const auto& [key, cs] : state.chains) {
      c.add({key, cs.high_water.block > 0 ? std::to_string(cs.high_water.block) : "-",
             std::to_string(cs.rr_cursor)});
    }
    write_stdout("\n" + c.render());
  }
  if (!state.filters.empty())
    fmt::print("\n{} filter id(s) pinned to providers\n", state.filters.size());
  return 0;
}

}  // namespace rpcroute::cli

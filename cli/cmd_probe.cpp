#include "cmd_probe.hpp"

#include <memory>

#include <fmt/format.h>

#include "output.hpp"
#include "rpcroute/blocks.hpp"
#include "rpcroute/json.hpp"
#include "rpcroute/probe.hpp"
#include "rpcroute/state.hpp"

namespace rpcroute::cli {

void setup_probe(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<ProbeOptions>();
  auto* sub = app.add_subcommand(
      "probe", "Check every provider: chain id, head and lag, sync, client, archive, batch, latency (exit 3 if too few are healthy)");
  sub->add_option("--profile,-p", opts->profile, "Profile name or path (default: $RPCROUTE_PROFILE or 'public')");
  sub->add_option("--chain,-c", opts->chain, "Chain name or decimal chain id (default: the profile's first chain)");
  sub->add_option("--providers", opts->providers, "Only these provider ids, comma-separated");
  sub->add_option("--timeout,-t", opts->timeout, "Per request: 5s, 2500ms or milliseconds (default: the provider's)");
  sub->add_option("--min-healthy", opts->min_healthy, "Exit 0 only when at least N providers are healthy (default 1)")
      ->check(whole_number(0, 10'000));
  sub->add_option("--state", opts->state, "State file (default: $RPCROUTE_STATE or $XDG_STATE_HOME/rpcroute/state.json)");
  sub->add_flag("--no-state", opts->no_state, "Neither read nor write the state file");
  sub->add_flag("--json", opts->json, "Print the results as JSON");
  sub->callback([opts, &exit_code] { exit_code = run_probe(*opts); });
}

namespace {

std::string yes_no(const std::optional<bool>& v) { return v ? (*v ? "yes" : "no") : "?"; }

void optional_bool(json::Writer& w, const char* key, const std::optional<bool>& v) {
  w.key(key);
  if (v) w.value(*v); else w.null();
}

}  // namespace

int run_probe(const ProbeOptions& options) {
  auto profile = load_selected_profile(options.profile);
  if (!profile) {
    print_error(profile.error().message);
    return 2;
  }
  auto chain = select_chain(*profile, options.chain);
  if (!chain) {
    print_error(chain.error().message);
    return 2;
  }
  auto selected = select_providers(**chain, options.providers);
  if (!selected) {
    print_error(selected.error().message);
    return 2;
  }
  std::optional<std::int64_t> timeout;
  if (!options.timeout.empty()) {
    timeout = parse_duration_ms(options.timeout);
    if (!timeout || *timeout <= 0) {
      print_error(fmt::format("bad --timeout '{}' (use e.g. 2500ms or 5s)", options.timeout));
      return 2;
    }
  }

  SystemClock clock;
  Random rng;
  StateStore store(resolve_state_path(options.state, options.no_state), clock,
                   [](const std::string& m) { print_warning(m); });
  if (auto loaded = store.load(); !loaded) {
    print_error(loaded.error().message);
    return 2;
  }

  std::vector<ProbeReport> reports(selected->size());
  {
    asio::io_context io;
    Engine engine(io);
    for (std::size_t i = 0; i < selected->size(); ++i) {
      const Provider& p = *(*selected)[i];
      asio::co_spawn(io,
                     probe_provider(engine, *profile, **chain, p, &store, clock, rng, timeout.value_or(p.timeout_ms)),
                     [&reports, i](std::exception_ptr e, ProbeReport r) {
                       if (!e) reports[i] = std::move(r);
                     });
    }
    io.run();
  }
  // Lag is judged once every provider has answered, so that each is compared with all the others.
  for (const auto* p : *selected) judge_lag(store, *profile, **chain, *p, rng.uniform());
  if (auto saved = store.save(); !saved) print_warning(fmt::format("state not saved: {}", saved.error().message));

  auto verdicts = assess_probes(**chain, reports);
  int healthy = 0;
  for (const auto& v : verdicts) healthy += v.healthy ? 1 : 0;
  const int code = healthy >= options.min_healthy ? 0 : 3;

  if (options.json) {
    json::Writer w;
    w.begin_object();
    w.key("chain");
    w.value((*chain)->name);
    w.key("chain_id");
    w.value(static_cast<std::uint64_t>((*chain)->chain_id));
    w.key("healthy");
    w.value(healthy);
    w.key("min_healthy");
    w.value(options.min_healthy);
    w.key("providers");
    w.begin_array();
    for (std::size_t i = 0; i < reports.size(); ++i) {
      const auto& r = reports[i];
      w.begin_object();
      w.key("provider");
      w.value((*selected)[i]->id);
      w.key("healthy");
      w.value(verdicts[i].healthy);
      w.key("reason");
      w.value(verdicts[i].reason);
      w.key("reachable");
      w.value(r.reachable);
      w.key("chain_id");
      if (r.chain_id) w.value(static_cast<std::uint64_t>(*r.chain_id)); else w.null();
      w.key("height");
      if (r.height) w.value(static_cast<std::uint64_t>(*r.height)); else w.null();
      w.key("lag");
      w.value(static_cast<std::uint64_t>(verdicts[i].lag));
      optional_bool(w, "syncing", r.syncing);
      optional_bool(w, "archival", r.archival);
      optional_bool(w, "batch", r.batch);
      w.key("client_version");
      w.value(r.client_version);
      w.key("latency_ms");
      w.value(r.latency_ms);
      w.end_object();
    }
    w.end_array();
    w.end_object();
    write_stdout(w.take() + "\n");
    return code;
  }

  Table t({"PROVIDER", "STATUS", "CHAIN ID", "HEIGHT", "LAG", "SYNCING", "ARCHIVE", "BATCH", "LATENCY", "CLIENT", "REASON"});
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const auto& r = reports[i];
    const auto& v = verdicts[i];
    t.add({(*selected)[i]->id, v.healthy ? paint(stdout, "healthy", "32") : paint(stdout, "unhealthy", "31"),
           r.chain_id ? std::to_string(*r.chain_id) : "-", r.height ? std::to_string(*r.height) : "-",
           r.height ? std::to_string(v.lag) : "-", yes_no(r.syncing), yes_no(r.archival), yes_no(r.batch),
           r.reachable ? format_ms(r.latency_ms) : "-", r.client_version.empty() ? "-" : r.client_version, v.reason});
  }
  write_stdout(t.render());
  fmt::print("{} of {} provider(s) healthy on {} (need {})\n", healthy, reports.size(), (*chain)->name,
             options.min_healthy);
  return code;
}

}  // namespace rpcroute::cli

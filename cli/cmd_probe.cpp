#include "cmd_probe.hpp"

#include <fmt/format.h>

#include <memory>

#include "options.hpp"
#include "output.hpp"
#include "rpcroute/blocks.hpp"
#include "rpcroute/json.hpp"
#include "rpcroute/probe.hpp"
#include "rpcroute/state.hpp"
#include "setup.hpp"

namespace rpcroute::cli {

void setup_probe(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<ProbeOptions>();
  auto* sub = app.add_subcommand("probe",
                                 "Check every provider: chain id, head and lag, sync, client, "
                                 "archive, batch, latency (exit 3 if too few are healthy)");
  sub->add_option("--profile,-p", opts->profile,
                  "Profile name or path (default: $RPCROUTE_PROFILE or 'public')");
  sub->add_option("--chain,-c", opts->chain,
                  "Chain name or decimal chain id (default: the profile's first chain)");
  sub->add_option("--providers", opts->providers, "Only these provider ids, comma-separated");
  sub->add_option("--timeout,-t", opts->timeout,
                  "Per request: 5s, 2500ms or milliseconds (default: the provider's)");
  sub->add_option("--min-healthy", opts->min_healthy,
                  "Exit 0 only when at least N providers are healthy (default 1)")
      ->check(whole_number(0, 10'000));
  sub->add_option("--state", opts->state,
                  "State file (default: $RPCROUTE_STATE or $XDG_STATE_HOME/rpcroute/state.json)");
  sub->add_flag("--no-state", opts->no_state, "Neither read nor write the state file");
  sub->add_flag("--json", opts->json, "Print the results as JSON");
  sub->callback([opts, &exit_code] { exit_code = run_probe(*opts); });
}

namespace {

std::string yes_no(const std::optional<bool>& v) { return v ? (*v ? "yes" : "no") : "?"; }

void optional_bool(json::Writer& w, const char* key, const std::optional<bool>& v) {
  w.key(key);
  if (v)
    w.value(*v);
  else
    w.null();
}

/// Probes the providers at once, then judges lag once every one has answered, so that each is
/// compared with all the others. A probe that failed internally leaves an empty report.
std::vector<ProbeReport> probe_all(Setup& setup, const std::vector<const Provider*>& providers,
                                   std::optional<std::int64_t> timeout) {
  std::vector<ProbeReport> reports(providers.size());
  {
    EventLoop loop;
    for (std::size_t i = 0; i < providers.size(); ++i) {
      const Provider& p = *providers[i];
      asio::co_spawn(loop.io(),
                     probe_provider(loop.engine(), setup.profile, *setup.chain, p, &*setup.store,
                                    setup.clock, setup.rng, timeout.value_or(p.timeout_ms)),
                     [&reports, i](const std::exception_ptr& e, ProbeReport r) {
                       if (!e) reports[i] = std::move(r);
                     });
    }
    loop.io().run();
  }
  for (const auto* p : providers)
    judge_lag(*setup.store, setup.profile, *setup.chain, *p, setup.rng.uniform());
  return reports;
}

/// What a probe run found, for the output.
struct Findings {
  const Chain& chain;
  const std::vector<const Provider*>& providers;
  const std::vector<ProbeReport>& reports;
  const std::vector<ProbeVerdict>& verdicts;
  int healthy = 0;
};

void print_json(const Findings& findings, int min_healthy) {
  json::Writer w;
  w.begin_object();
  w.key("chain");
  w.value(findings.chain.name);
  w.key("chain_id");
  w.value(static_cast<std::uint64_t>(findings.chain.chain_id));
  w.key("healthy");
  w.value(findings.healthy);
  w.key("min_healthy");
  w.value(min_healthy);
  w.key("providers");
  w.begin_array();
  for (std::size_t i = 0; i < findings.reports.size(); ++i) {
    const auto& r = findings.reports[i];
    w.begin_object();
    w.key("provider");
    w.value(findings.providers[i]->id);
    w.key("healthy");
    w.value(findings.verdicts[i].healthy);
    w.key("reason");
    w.value(findings.verdicts[i].reason);
    w.key("reachable");
    w.value(r.reachable);
    w.key("chain_id");
    if (r.chain_id)
      w.value(static_cast<std::uint64_t>(*r.chain_id));
    else
      w.null();
    w.key("height");
    if (r.height)
      w.value(static_cast<std::uint64_t>(*r.height));
    else
      w.null();
    w.key("lag");
    w.value(static_cast<std::uint64_t>(findings.verdicts[i].lag));
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
}

void print_table(const Findings& findings, int min_healthy) {
  Table t({"PROVIDER", "STATUS", "CHAIN ID", "HEIGHT", "LAG", "SYNCING", "ARCHIVE", "BATCH",
           "LATENCY", "CLIENT", "REASON"});
  for (std::size_t i = 0; i < findings.reports.size(); ++i) {
    const auto& r = findings.reports[i];
    const auto& v = findings.verdicts[i];
    t.add({findings.providers[i]->id,
           v.healthy ? paint(stdout, "healthy", "32") : paint(stdout, "unhealthy", "31"),
           r.chain_id ? std::to_string(*r.chain_id) : "-",
           r.height ? std::to_string(*r.height) : "-", r.height ? std::to_string(v.lag) : "-",
           yes_no(r.syncing), yes_no(r.archival), yes_no(r.batch),
           r.reachable ? format_ms(r.latency_ms) : "-",
           r.client_version.empty() ? "-" : r.client_version, v.reason});
  }
  write_stdout(t.render());
  fmt::print("{} of {} provider(s) healthy on {} (need {})\n", findings.healthy,
             findings.reports.size(), findings.chain.name, min_healthy);
}

}  // namespace

int run_probe(const ProbeOptions& options) {
  Setup setup;
  if (!setup.select(options.profile, options.chain)) return code_of(ExitCode::usage);
  auto selected = select_providers(*setup.chain, options.providers);
  if (!selected) return usage_error(selected.error().message);
  std::optional<std::int64_t> timeout;
  if (!options.timeout.empty()) {
    timeout = parse_duration_ms(options.timeout);
    if (!timeout || *timeout <= 0) {
      return usage_error(
          fmt::format("bad --timeout '{}' (use e.g. 2500ms or 5s)", options.timeout));
    }
  }
  if (!setup.open_state(resolve_state_path(options.state, options.no_state)))
    return code_of(ExitCode::usage);
  const auto reports = probe_all(setup, *selected, timeout);
  setup.save_state();

  const auto verdicts = assess_probes(*setup.chain, reports);
  int healthy = 0;
  for (const auto& v : verdicts) healthy += v.healthy ? 1 : 0;
  const Findings findings{*setup.chain, *selected, reports, verdicts, healthy};
  if (options.json) {
    print_json(findings, options.min_healthy);
  } else {
    print_table(findings, options.min_healthy);
  }
  return healthy >= options.min_healthy ? 0 : 3;
}

}  // namespace rpcroute::cli

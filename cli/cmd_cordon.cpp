// `rpcroute cordon PROVIDER` / `rpcroute uncordon PROVIDER`: an operator takes a provider out of
// routing, and puts it back, for every process that shares the state file (the sidecar sees it
// within a second: sidecar/state_watch.cpp). The cordon is an event in the state journal like any
// other, merged by time (the newest word wins; docs/DECISIONS.md).
#include "cmd_cordon.hpp"

#include <fmt/format.h>

#include <memory>

#include "options.hpp"
#include "output.hpp"
#include "rpcroute/exclusions.hpp"
#include "rpcroute/json.hpp"
#include "setup.hpp"

namespace rpcroute::cli {

void setup_cordon(CLI::App& app, int& exit_code) {
  for (const bool on : {true, false}) {
    auto opts = std::make_shared<CordonOptions>();
    opts->on = on;
    auto* sub = app.add_subcommand(
        on ? "cordon" : "uncordon",
        on ? "Take a provider out of routing for every process sharing the state file"
           : "Put a cordoned provider back into routing");
    sub->add_option("provider", opts->provider, "Provider id (or several: a,b)")->required();
    sub->add_option("--profile,-p", opts->profile,
                    "Profile name or path (default: $RPCROUTE_PROFILE or 'public')");
    sub->add_option("--chain,-c", opts->chain,
                    "Chain name or decimal chain id (default: the profile's first chain)");
    if (on) {
      sub->add_option("--for", opts->for_text,
                      "Lift the cordon by itself after this long: 90s, 10m, 2h (default: until "
                      "uncordoned)");
      sub->add_option("--reason", opts->reason,
                      "Why, shown by rank, /status and 503 details (at most 200 bytes)");
    }
    sub->add_option("--state", opts->state,
                    "State file (default: $RPCROUTE_STATE or $XDG_STATE_HOME/rpcroute/state.json)");
    sub->add_option("--shared-state", opts->shared_state,
                    "Also tell every host on this Redis: redis://HOST:PORT/DB (default: the "
                    "profile's shared_state)");
    sub->add_flag("--json", opts->json, "Print what was recorded as JSON");
    sub->callback([opts, &exit_code] { exit_code = run_cordon(*opts); });
  }
}

namespace {

void write_cordon_json(const Setup& setup, const std::vector<const Provider*>& providers,
                       const Cordon& cordon) {
  json::Writer w;
  w.begin_object();
  w.key("profile");
  w.value(setup.profile.name);
  w.key("chain");
  w.value(setup.chain->name);
  w.key("providers");
  w.begin_array();
  for (const auto* p : providers) w.value(p->id);
  w.end_array();
  w.key("cordoned");
  w.value(cordon.on);
  w.key("t_ms");
  w.value(cordon.t_ms);
  w.key("until_ms");
  if (cordon.on && cordon.until_ms != 0)
    w.value(cordon.until_ms);
  else
    w.null();
  w.key("reason");
  w.value(cordon.reason);
  w.end_object();
  write_stdout(w.take() + "\n");
}

}  // namespace

int run_cordon(const CordonOptions& options) {
  Setup setup;
  if (!setup.select(options.profile, options.chain)) return code_of(ExitCode::usage);
  auto providers = select_providers(*setup.chain, options.provider);
  if (!providers) return usage_error(providers.error().message);
  Cordon cordon;
  cordon.on = options.on;
  cordon.t_ms = setup.clock.now_ms();
  cordon.reason = clean_cordon_reason(options.reason);
  if (!options.for_text.empty()) {
    const auto ms = parse_duration_ms(options.for_text);
    if (!ms || *ms <= 0)
      return usage_error(
          fmt::format("--for: '{}' is not a duration (90s, 10m, 2h)", options.for_text));
    cordon.until_ms = cordon.t_ms + *ms;
  }
  const auto path = resolve_state_path(options.state, false);
  if (!setup.open_state(path) || !setup.open_shared(options.shared_state))
    return code_of(ExitCode::usage);
  std::vector<bool> was;
  for (const auto* p : *providers) {
    const auto key = provider_key(setup.profile.name, setup.chain->name, *p);
    const auto* before = setup.health().provider(key);
    was.push_back(before != nullptr && before->cordon.active(cordon.t_ms));
    setup.health().record(CordonEvent{key, cordon}, setup.profile.health);
  }
  // The write is the command: unlike a call's learning, a cordon that was not saved is an error.
  if (auto saved = setup.store->append(); !saved) {
    print_error(fmt::format("not recorded: {}", saved.error().message));
    return code_of(saved.error().exit);
  }
  if (setup.shared) {
    const auto rounds = setup.shared->status().syncs;
    setup.shared->flush_now(Setup::kSharedWarmUpMs);
    if (setup.shared->status().syncs == rounds) {
      print_warning(fmt::format(
          "shared state: Redis at {} did not answer ({}); recorded in this host's state file only",
          setup.shared->status().url, setup.shared->status().last_error));
    }
  }
  if (options.json) {
    write_cordon_json(setup, *providers, cordon);
    return 0;
  }
  for (std::size_t i = 0; i < providers->size(); ++i) {
    const auto& id = (*providers)[i]->id;
    if (cordon.on) {
      fmt::print("{} on {} (profile {}): {}\n", id, setup.chain->name, setup.profile.name,
                 cordon_text(cordon, cordon.t_ms));
    } else {
      fmt::print("{} on {} (profile {}): back in routing{}\n", id, setup.chain->name,
                 setup.profile.name, was[i] ? "" : " (it was not cordoned)");
    }
  }
  return 0;
}

}  // namespace rpcroute::cli

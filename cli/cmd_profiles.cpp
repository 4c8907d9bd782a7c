#include "cmd_profiles.hpp"

#include <fmt/format.h>

#include <memory>
#include <utility>
#include <vector>

#include "output.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/json.hpp"
#include "rpcroute/methods.hpp"
#include "setup.hpp"

namespace rpcroute::cli {

void setup_profiles(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<ProfilesOptions>();
  auto* sub = app.add_subcommand("profiles", "List, show and validate profiles");
  sub->require_subcommand(1);
  auto* list =
      sub->add_subcommand("list", "List the profiles on the search path and the embedded ones");
  list->callback([opts, &exit_code] {
    opts->action = "list";
    exit_code = run_profiles(*opts);
  });
  auto* show = sub->add_subcommand("show", "Show a profile with its secrets redacted");
  show->add_option("profile", opts->target, "Profile name or path")->required();
  show->add_flag("--json", opts->json, "Print as JSON");
  show->callback([opts, &exit_code] {
    opts->action = "show";
    exit_code = run_profiles(*opts);
  });
  auto* validate =
      sub->add_subcommand("validate", "Check a profile file; errors name file, line and column");
  validate->add_option("file", opts->target, "Profile file")->required();
  validate->callback([opts, &exit_code] {
    opts->action = "validate";
    exit_code = run_profiles(*opts);
  });
}

namespace {

/// A provider with its secrets redacted: no key in the URL, header values as ***.
void write_provider_json(json::Writer& w, const Profile& p, const Provider& pr) {
  w.begin_object();
  w.key("id");
  w.value(pr.id);
  w.key("url");
  w.value(p.scrub(redact_url(pr.url)));
  if (!pr.ws_url.empty()) {
    w.key("ws_url");
    w.value(p.scrub(redact_url(pr.ws_url)));
  }
  w.key("headers");
  w.begin_object();
  for (const auto& h : pr.headers) {
    w.key(h.name);
    w.value("***");
  }
  w.end_object();
  w.key("group");
  w.value(group_name(pr.group));
  w.key("priority");
  w.value(pr.priority);
  w.key("weight");
  w.value(pr.weight);
  w.key("archival");
  if (pr.archival)
    w.value(*pr.archival);
  else
    w.null();
  w.key("timeout_ms");
  w.value(pr.timeout_ms);
  // What an attempt of each method class really gets (issue 21): the provider's timeout when set.
  w.key("effective_timeouts_ms");
  w.begin_object();
  for (auto [name, c] :
       {std::pair{"cheap", TimeoutClass::cheap}, std::pair{"standard", TimeoutClass::standard},
        std::pair{"heavy", TimeoutClass::heavy}, std::pair{"trace", TimeoutClass::trace}}) {
    w.key(name);
    w.value(pr.timeout_set ? pr.timeout_ms : timeout_class_ms(c));
  }
  w.end_object();
  if (pr.rate_limit) {
    w.key("rate_limit");
    w.begin_object();
    w.key("rps");
    w.value(pr.rate_limit->rps);
    w.key("burst");
    w.value(pr.rate_limit->burst);
    w.end_object();
  }
  w.end_object();
}

void write_overrides_json(json::Writer& w, const Profile& p) {
  w.begin_object();
  for (const auto& o : p.routing.method_overrides) {
    w.key(o.pattern);
    w.begin_object();
    if (o.policy.strategy) {
      w.key("strategy");
      w.value(strategy_name(*o.policy.strategy));
    }
    if (!o.policy.providers.empty()) {
      w.key("providers");
      w.begin_array();
      for (const auto& id : o.policy.providers) w.value(id);
      w.end_array();
    }
    if (o.policy.timeout_ms) {
      w.key("timeout_ms");
      w.value(*o.policy.timeout_ms);
    }
    if (o.policy.broadcast) {
      w.key("broadcast");
      w.value(true);
    }
    w.end_object();
  }
  w.end_object();
}

void write_profile_json(const Profile& p) {
  json::Writer w;
  w.begin_object();
  w.key("name");
  w.value(p.name);
  w.key("title");
  w.value(p.title);
  w.key("description");
  w.value(p.description);
  w.key("source");
  w.value(p.source);
  w.key("default_strategy");
  w.value(strategy_name(p.routing.default_strategy));
  w.key("timeout_ms");
  w.value(p.routing.timeout_ms);
  w.key("chains");
  w.begin_array();
  for (const auto& c : p.chains) {
    w.begin_object();
    w.key("name");
    w.value(c.name);
    w.key("chain_id");
    w.value(static_cast<std::uint64_t>(c.chain_id));
    w.key("block_time_ms");
    w.value(c.block_time_ms);
    w.key("max_lag_blocks");
    w.value(static_cast<std::uint64_t>(c.max_lag_blocks));
    w.key("providers");
    w.begin_array();
    for (const auto& pr : c.providers) write_provider_json(w, p, pr);
    w.end_array();
    w.end_object();
  }
  w.end_array();
  w.key("method_overrides");
  write_overrides_json(w, p);
  w.end_object();
  write_stdout(w.take() + "\n");
}

/// "5 s/10 s/20 s/60 s" (the method classes' defaults), or the provider's one timeout for all.
std::string effective_timeouts(const Provider& pr) {
  if (pr.timeout_set) return format_ms(static_cast<double>(pr.timeout_ms)) + " (all)";
  std::vector<std::string> each;
  for (auto c :
       {TimeoutClass::cheap, TimeoutClass::standard, TimeoutClass::heavy, TimeoutClass::trace})
    each.push_back(format_ms(static_cast<double>(timeout_class_ms(c))));
  return fmt::format("{}", fmt::join(each, "/"));
}

void write_profile_text(const Profile& p) {
  fmt::print("profile {}{}  ({})\n", p.name,
             p.title.empty() || p.title == p.name ? "" : " — " + p.title, p.source);
  if (!p.description.empty()) fmt::print("{}\n", p.description);
  fmt::print("default strategy: {}; overall timeout: {}\n",
             strategy_name(p.routing.default_strategy),
             format_ms(static_cast<double>(p.routing.timeout_ms)));
  for (const auto& c : p.chains) {
    fmt::print("\nchain {} (id {}, block time {}, max lag {} blocks)\n", c.name, c.chain_id,
               format_ms(static_cast<double>(c.block_time_ms)), c.max_lag_blocks);
    // Per attempt, as routing applies them: the provider's timeout_ms when the profile sets it,
    // else each method class's default (method overrides are listed below).
    Table t({"  ID", "URL", "GROUP", "PRIORITY", "WEIGHT", "ARCHIVAL",
             "TIMEOUT CHEAP/STD/HEAVY/TRACE", "HEADERS"});
    for (const auto& pr : c.providers) {
      std::string headers;
      for (const auto& h : pr.headers)
        headers += fmt::format("{}{}: ***", headers.empty() ? "" : ", ", h.name);
      t.add({"  " + pr.id, p.scrub(redact_url(pr.url)), std::string(group_name(pr.group)),
             std::to_string(pr.priority), fmt::format("{:g}", pr.weight),
             pr.archival ? (*pr.archival ? "yes" : "no") : "?", effective_timeouts(pr),
             headers.empty() ? "-" : headers});
    }
    write_stdout(t.render());
  }
  if (!p.routing.method_overrides.empty()) {
    fmt::print("\nmethod overrides:\n");
    for (const auto& o : p.routing.method_overrides) {
      std::string what;
      if (o.policy.strategy) what += fmt::format(" strategy={}", strategy_name(*o.policy.strategy));
      if (!o.policy.providers.empty())
        what += fmt::format(" providers={}", fmt::join(o.policy.providers, ","));
      if (o.policy.timeout_ms) what += fmt::format(" timeout={}ms", *o.policy.timeout_ms);
      if (o.policy.broadcast) what += " broadcast";
      fmt::print("  {}:{}\n", o.pattern, what);
    }
  }
}

}  // namespace

int run_profiles(const ProfilesOptions& options) {
  if (options.action == "list") {
    Table t({"NAME", "CHAINS", "SOURCE"});
    for (const auto& loc : list_profiles()) {
      auto p = find_profile(loc.source == "embedded" ? loc.name : loc.source);
      std::string chains;
      if (p) {
        for (const auto& c : p->chains)
          chains += fmt::format("{}{}", chains.empty() ? "" : ",", c.name);
      } else {
        chains = "(invalid: see 'rpcroute profiles validate')";
      }
      t.add({loc.name, chains, loc.source});
    }
    write_stdout(t.render());
    return 0;
  }
  if (options.action == "validate") {
    auto p = load_profile_file(options.target);
    if (!p) return usage_error(p.error().message);
    for (const auto& w : p->warnings()) print_warning(w);
    std::size_t providers = 0;
    for (const auto& c : p->chains) providers += c.providers.size();
    fmt::print("{}: ok ({} chain(s), {} provider(s))\n", options.target, p->chains.size(),
               providers);
    return 0;
  }
  auto p = find_profile(options.target);
  if (!p) return usage_error(p.error().message);
  if (options.json) {
    write_profile_json(*p);
  } else {
    write_profile_text(*p);
  }
  return 0;
}

}  // namespace rpcroute::cli

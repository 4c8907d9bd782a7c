// rpcroute init: a starter profile from provider URLs (issue 21). Each URL is probed (chain id,
// archive, batch) and the providers are grouped into chains by the id they answer; key material
// found in a URL is written as a ${ENV} reference, never as a literal.
#include "cmd_init.hpp"

#include <fmt/format.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string_view>

#include "output.hpp"
#include "rpcroute/probe.hpp"
#include "setup.hpp"

namespace rpcroute::cli {

void setup_init(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<InitOptions>();
  auto* sub = app.add_subcommand(
      "init",
      "Write a starter profile from provider URLs: probes each (chain id, archive, batch), names "
      "the chain, and writes keys as ${ENV} references");
  sub->add_option("urls", opts->urls, "Provider URLs (http:// or https://)")->required();
  sub->add_option("--name,-n", opts->name, "Profile name (default: mine)");
  sub->add_option("--output,-o", opts->output,
                  "Write the profile here (default: standard output); never over an existing file "
                  "unless --force");
  sub->add_flag("--force", opts->force, "Replace an existing --output file");
  sub->callback([opts, &exit_code] { exit_code = run_init(*opts); });
}

namespace {

/// A line of progress on stderr ("rpcroute: ..."), so that stdout is the profile alone.
void print_info(std::string_view message) { fmt::print(stderr, "rpcroute: {}\n", message); }

struct KnownChain {
  std::uint64_t id;
  const char* name;
  std::int64_t block_time_ms;
};
// The chains of the embedded public profile, and anvil's default.
constexpr KnownChain kKnownChains[] = {
    {1, "ethereum", 12'000}, {11155111, "sepolia", 12'000},  {17000, "holesky", 12'000},
    {8453, "base", 2'000},   {84532, "base-sepolia", 2'000}, {42161, "arbitrum", 250},
    {10, "optimism", 2'000}, {137, "polygon", 2'000},        {31337, "local", 1'000},
};

const KnownChain* known_chain(std::uint64_t id) {
  for (const auto& c : kKnownChains) {
    if (c.id == id) return &c;
  }
  return nullptr;
}

/// An id for the provider from its host: "alchemy" for eth-mainnet.g.alchemy.com, "node8545" for
/// 127.0.0.1:8545; unique among `taken`.
std::string provider_id(std::string_view url, std::set<std::string>& taken) {
  auto rest = url.substr(url.find("://") + 3);
  rest = rest.substr(0, rest.find_first_of("/?#"));
  rest = rest.substr(rest.rfind('@') == std::string_view::npos ? 0 : rest.rfind('@') + 1);
  std::string_view host = rest;
  std::string_view port;
  if (auto colon = rest.rfind(':'); colon != std::string_view::npos && rest.back() != ']') {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  std::string base;
  const bool numeric = host.find_first_not_of("0123456789.") == std::string_view::npos ||
                       host.starts_with('[') || host == "localhost";
  if (numeric) {
    base = fmt::format("node{}", port);
  } else {
    // The registrable name: the label before the last one.
    auto last = host.rfind('.');
    auto label = host.substr(0, last);
    if (auto dot = label.rfind('.'); dot != std::string_view::npos) label = label.substr(dot + 1);
    base = std::string(label);
  }
  for (auto& ch : base) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '-';
  }
  std::string id = base;
  for (int n = 2; !taken.insert(id).second; ++n) id = fmt::format("{}{}", base, n);
  return id;
}

/// The URL with each credential replaced by ${VAR}; the variables in `vars`.
std::string url_with_env(const std::string& url, const std::string& id,
                         std::vector<std::string>& vars) {
  std::string out = url;
  std::string stem = "RPCROUTE_";
  for (char ch : id) stem += std::isalnum(static_cast<unsigned char>(ch)) ? std::toupper(ch) : '_';
  stem += "_KEY";
  int n = 0;
  for (const auto& secret : url_credentials(url)) {
    const auto at = out.find(secret);
    if (at == std::string::npos) continue;  // a percent-decoded form: the raw one was replaced
    const auto var = n == 0 ? stem : fmt::format("{}{}", stem, n + 1);
    ++n;
    out.replace(at, secret.size(), "${" + var + "}");
    vars.push_back(var);
  }
  return out;
}

struct Probed {
  std::string id;
  std::string url;  // with ${VAR} references
  ProbeReport report;
};

std::vector<ProbeReport> probe_urls(const std::vector<std::string>& urls,
                                    const std::vector<std::string>& ids) {
  Profile profile;
  profile.name = "init";
  Chain chain;
  chain.name = "probe";
  for (std::size_t i = 0; i < urls.size(); ++i) {
    Provider p;
    p.id = ids[i];
    p.url = urls[i];
    p.timeout_ms = 5'000;
    chain.providers.push_back(std::move(p));
  }
  profile.secrets = {};
  for (const auto& u : urls) {
    for (auto& s : url_credentials(u)) profile.secrets.push_back(std::move(s));
  }
  std::vector<ProbeReport> reports(urls.size());
  SystemClock clock;
  Random rng;
  EventLoop loop;
  for (std::size_t i = 0; i < urls.size(); ++i) {
    asio::co_spawn(loop.io(),
                   probe_provider(loop.engine(), profile, chain, chain.providers[i], nullptr, clock,
                                  rng, 5'000),
                   [&reports, i](const std::exception_ptr& e, ProbeReport r) {
                     if (!e) reports[i] = std::move(r);
                   });
  }
  loop.io().run();
  return reports;
}

std::string render(const InitOptions& options,
                   const std::map<std::uint64_t, std::vector<Probed>>& chains,
                   const std::vector<std::string>& vars) {
  std::string y = fmt::format(
      "# Written by `rpcroute init`; check it with `rpcroute profiles validate FILE`.\n");
  if (!vars.empty()) {
    y += "# Key material is read from the environment when the profile loads; set:\n";
    for (const auto& v : vars) y += fmt::format("#   export {}=...\n", v);
  }
  y += fmt::format("name: {}\nchains:\n", options.name);
  for (const auto& [id, providers] : chains) {
    const auto* known = known_chain(id);
    y += fmt::format("  {}:\n    chain_id: {}\n", known ? known->name : fmt::format("chain{}", id),
                     id);
    if (known) y += fmt::format("    block_time_ms: {}\n", known->block_time_ms);
    y += "    providers:\n";
    for (const auto& p : providers) {
      y += fmt::format("      - id: {}\n        url: \"{}\"\n", p.id, p.url);
      if (p.report.archival)
        y += fmt::format("        archival: {}  # the probe read state at an early block: {}\n",
                         *p.report.archival ? "true" : "false", *p.report.archival ? "yes" : "no");
      if (p.report.batch && !*p.report.batch)
        y += "        limits: { max_batch: 1 }  # it refused a JSON-RPC batch\n";
    }
  }
  return y;
}

}  // namespace

int run_init(const InitOptions& options) {
  std::set<std::string> taken;
  std::vector<std::string> ids;
  std::vector<std::string> vars;
  std::vector<std::string> written;  // the URLs as written
  for (const auto& url : options.urls) {
    if (!url.starts_with("http://") && !url.starts_with("https://"))
      return usage_error(fmt::format("'{}' is not an http:// or https:// URL", redact_url(url)));
    ids.push_back(provider_id(url, taken));
    written.push_back(url_with_env(url, ids.back(), vars));
  }
  if (!options.output.empty() && !options.force && std::filesystem::exists(options.output))
    return usage_error(fmt::format("{} exists; --force replaces it", options.output));
  const auto reports = probe_urls(options.urls, ids);
  std::map<std::uint64_t, std::vector<Probed>> chains;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const auto& r = reports[i];
    if (!r.chain_id) {
      print_error(fmt::format("{} ({}): left out, no chain id: {}", ids[i],
                              redact_url(options.urls[i]),
                              r.failure.empty() ? "eth_chainId gave no answer" : r.failure));
      continue;
    }
    chains[*r.chain_id].push_back({ids[i], written[i], r});
    const auto* known = known_chain(*r.chain_id);
    print_info(fmt::format("{}: chain {} ({}), archive {}, batch {}", ids[i], *r.chain_id,
                           known ? known->name : "unknown",
                           r.archival ? (*r.archival ? "yes" : "no") : "?",
                           r.batch ? (*r.batch ? "yes" : "no") : "?"));
  }
  if (chains.empty()) {
    print_error("no provider answered eth_chainId: nothing written");
    return code_of(ExitCode::unavailable);
  }
  const auto yaml = render(options, chains, vars);
  if (options.output.empty()) {
    write_stdout(yaml);
    return 0;
  }
  std::ofstream(options.output) << yaml;
  print_info(fmt::format("wrote {}", options.output));
  return 0;
}

}  // namespace rpcroute::cli

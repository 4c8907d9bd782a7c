// rpcroute init: a starter profile from provider URLs (issue 21). Each URL is probed (chain id,
// archive, batch, WebSocket) and the providers are grouped into chains by the id they answer; key
// material found in a URL is written as a ${ENV} reference, never as a literal.
#include "cmd_init.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string_view>
#include <tl/expected.hpp>

#include "output.hpp"
#include "rpcroute/probe.hpp"
#include "setup.hpp"
#include "ws_upstream.hpp"

namespace rpcroute::cli {

void setup_init(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<InitOptions>();
  auto* sub = app.add_subcommand(
      "init",
      "Write a starter profile from provider URLs: probes each (chain id, archive, batch, "
      "WebSocket), names the chain, and writes keys as ${ENV} references");
  sub->add_option("urls", opts->urls,
                  "Provider URLs (http:// or https://), each optionally followed by its WebSocket "
                  "URL (ws:// or wss://; default: the URL as ws:// or wss://, which anvil and "
                  "geth serve)")
      ->required();
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

/// The variables written so far: their names in order, and the secret each stands for (a
/// provider's WebSocket URL reuses its http URL's variable for the same key).
struct EnvVars {
  std::vector<std::string> names;
  std::map<std::string, std::string> of_secret;
};

/// The URL with each credential replaced by ${VAR}; new variables join `vars`.
std::string url_with_env(const std::string& url, const std::string& id, EnvVars& vars) {
  std::string out = url;
  std::string stem = "RPCROUTE_";
  for (char ch : id) stem += std::isalnum(static_cast<unsigned char>(ch)) ? std::toupper(ch) : '_';
  stem += "_KEY";
  for (const auto& secret : url_credentials(url)) {
    const auto at = out.find(secret);
    if (at == std::string::npos) continue;  // a percent-decoded form: the raw one was replaced
    auto [it, added] = vars.of_secret.try_emplace(secret);
    if (added) {
      int n = 1;
      it->second = stem;
      while (std::find(vars.names.begin(), vars.names.end(), it->second) != vars.names.end())
        it->second = fmt::format("{}{}", stem, ++n);
      vars.names.push_back(it->second);
    }
    out.replace(at, secret.size(), "${" + it->second + "}");
  }
  return out;
}

/// The WebSocket URL to probe for a provider: the one given, or its URL as ws:// (http://) or
/// wss:// (https://), same host, port and path: what anvil and geth serve on their http port, and
/// many hosted providers on their https URL.
std::string ws_candidate(const std::string& url, const std::string& given) {
  if (!given.empty()) return given;
  if (url.starts_with("http://")) return "ws://" + url.substr(7);
  if (url.starts_with("https://")) return "wss://" + url.substr(8);
  return "";
}

using WsAnswer = tl::expected<std::uint64_t, std::string>;

constexpr std::int64_t kWsProbeMs = 3'000;  // connect, TLS, upgrade and answer, in all

/// Why a WebSocket gave no chain id, in the probe's words: the client's text without its lead
/// ("WebSocket to provider ID failed (connect): Connection refused" reads "connect: Connection
/// refused", "... failed (tls): TLS: host name mismatch" reads "TLS: host name mismatch"). No URL
/// in it (the client never names one: it may hold a key).
std::string ws_failure(const sidecar::WsUpstream::RawAnswer& answer) {
  if (answer.status == sidecar::WsUpstream::RawAnswer::Status::timeout)
    return fmt::format("no answer within {} ms", kWsProbeMs);
  const std::string& error = answer.error;
  const auto open = error.find(" failed (");
  const auto close = error.find("): ", open);
  if (open == std::string::npos || close == std::string::npos) return error;
  const auto from = open + std::string_view(" failed (").size();
  const std::string step = error.substr(from, close - from);
  std::string why = error.substr(close + 3);
  // "tls: TLS: host name mismatch (...)" says the step twice.
  const bool named = why.size() > step.size() && why[step.size()] == ':' &&
                     std::equal(step.begin(), step.end(), why.begin(), [](char a, char b) {
                       return std::tolower(static_cast<unsigned char>(a)) ==
                              std::tolower(static_cast<unsigned char>(b));
                     });
  return named ? why : step + ": " + why;
}

/// The chain id a provider's WebSocket answers to eth_chainId within kWsProbeMs, or why not. The
/// sidecar's own client: ws:// and wss://, a certificate checked as the sidecar checks it (the
/// system store; SSL_CERT_FILE or SSL_CERT_DIR name another).
asio::awaitable<WsAnswer> ws_chain_id(sidecar::WsUpstream& ws) {
  auto answer = co_await ws.request(
      1, R"({"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]})", kWsProbeMs, nullptr);
  ws.close();
  if (answer.status != sidecar::WsUpstream::RawAnswer::Status::ok)
    co_return tl::unexpected(ws_failure(answer));
  simdjson::dom::parser parser;
  std::string_view hex;
  if (parser.parse(answer.message)["result"].get(hex) != simdjson::SUCCESS ||
      !hex.starts_with("0x"))
    co_return tl::unexpected(std::string("eth_chainId gave no id over the WebSocket"));
  std::uint64_t id = 0;
  const auto [end, err] = std::from_chars(hex.data() + 2, hex.data() + hex.size(), id, 16);
  if (err != std::errc() || end != hex.data() + hex.size())
    co_return tl::unexpected(std::string("eth_chainId gave no id over the WebSocket"));
  co_return id;
}

struct Probed {
  std::string id;
  std::string url;     // with ${VAR} references
  std::string ws_url;  // with ${VAR} references; "" when no WebSocket answered the chain's id
  ProbeReport report;
};

std::vector<ProbeReport> probe_urls(const std::vector<std::string>& urls,
                                    const std::vector<std::string>& ids,
                                    const std::vector<std::string>& ws_urls,
                                    std::vector<WsAnswer>& ws_answers) {
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
  // The WebSockets, each a provider of its own; destroyed before the loop (their sockets close
  // while it is there).
  std::vector<Provider> ws_providers(urls.size());
  std::vector<std::unique_ptr<sidecar::WsUpstream>> sockets;
  // The loop stops when every probe has ended: a WebSocket connect that outlived its probe's
  // 3 s is not waited for.
  std::size_t running = urls.size();
  const auto ended = [&running, &loop] {
    if (--running == 0) loop.io().stop();
  };
  for (std::size_t i = 0; i < urls.size(); ++i) {
    asio::co_spawn(loop.io(),
                   probe_provider(loop.engine(), profile, chain, chain.providers[i], nullptr, clock,
                                  rng, 5'000),
                   [&reports, &ended, i](const std::exception_ptr& e, ProbeReport r) {
                     if (!e) reports[i] = std::move(r);
                     ended();
                   });
  }
  ws_answers.assign(urls.size(), tl::unexpected(std::string("no WebSocket URL to try")));
  for (std::size_t i = 0; i < urls.size(); ++i) {
    if (ws_urls[i].empty()) continue;
    ws_providers[i].id = ids[i];
    ws_providers[i].ws_url = ws_urls[i];
    ws_providers[i].timeout_ms = kWsProbeMs;
    sockets.push_back(std::make_unique<sidecar::WsUpstream>(
        loop.io().get_executor(), ws_providers[i], 64 * 1024,
        [](std::string_view, std::string_view) {}, [] {}));
    ++running;
    asio::co_spawn(loop.io(), ws_chain_id(*sockets.back()),
                   [&ws_answers, &ended, i](const std::exception_ptr& e, WsAnswer r) {
                     if (!e) ws_answers[i] = std::move(r);
                     ended();
                   });
  }
  loop.io().run();
  sockets.clear();
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
      if (!p.ws_url.empty())
        y += fmt::format("        ws_url: \"{}\"  # it answered eth_chainId over WebSocket\n",
                         p.ws_url);
      if (p.report.archival)
        y += fmt::format("        archival: {}  # the probe read state at an early block: {}\n",
                         *p.report.archival ? "true" : "false", *p.report.archival ? "yes" : "no");
      if (p.report.batch && !*p.report.batch)
        y += "        limits: { max_batch: 1 }  # it refused a JSON-RPC batch\n";
    }
  }
  return y;
}

/// What init says of a provider's WebSocket, and the ws_url to write ("" for none).
std::string ws_verdict(const std::string& ws_url, const WsAnswer& answer, std::uint64_t chain_id,
                       const std::string& written, std::string& note) {
  if (ws_url.empty()) {
    note = "WebSocket: none tried";
    return "";
  }
  if (!answer) {
    note = fmt::format("WebSocket {}: none ({})", redact_url(ws_url), answer.error());
    return "";
  }
  if (*answer != chain_id) {
    note =
        fmt::format("WebSocket {}: not written, it answers chain {}", redact_url(ws_url), *answer);
    return "";
  }
  note = fmt::format("WebSocket {}: yes", redact_url(ws_url));
  return written;
}

}  // namespace

// NOLINTNEXTLINE(readability-function-size): one pass over the arguments, then over the probes.
int run_init(const InitOptions& options) {
  std::set<std::string> taken;
  std::vector<std::string> urls;
  std::vector<std::string> given_ws;  // a ws:// URL that followed the provider's, or ""
  for (const auto& url : options.urls) {
    if (url.starts_with("ws://") || url.starts_with("wss://")) {
      if (urls.empty() || !given_ws.back().empty())
        return usage_error(
            fmt::format("'{}' follows no http:// or https:// URL of its own", redact_url(url)));
      given_ws.back() = url;
      continue;
    }
    if (!url.starts_with("http://") && !url.starts_with("https://"))
      return usage_error(fmt::format("'{}' is not an http:// or https:// URL", redact_url(url)));
    urls.push_back(url);
    given_ws.emplace_back();
  }
  std::vector<std::string> ids;
  EnvVars vars;
  std::vector<std::string> written;     // the URLs as written
  std::vector<std::string> ws_urls;     // the WebSocket URLs to probe
  std::vector<std::string> ws_written;  // ... as they would be written
  for (std::size_t i = 0; i < urls.size(); ++i) {
    ids.push_back(provider_id(urls[i], taken));
    written.push_back(url_with_env(urls[i], ids.back(), vars));
    ws_urls.push_back(ws_candidate(urls[i], given_ws[i]));
    ws_written.push_back(url_with_env(ws_urls.back(), ids.back(), vars));
  }
  if (!options.output.empty() && !options.force && std::filesystem::exists(options.output))
    return usage_error(fmt::format("{} exists; --force replaces it", options.output));
  std::vector<WsAnswer> ws_answers;
  const auto reports = probe_urls(urls, ids, ws_urls, ws_answers);
  std::map<std::uint64_t, std::vector<Probed>> chains;
  std::set<std::string> used_vars;  // only those of URLs written
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const auto& r = reports[i];
    if (!r.chain_id) {
      print_error(fmt::format("{} ({}): left out, no chain id: {}", ids[i], redact_url(urls[i]),
                              r.failure.empty() ? "eth_chainId gave no answer" : r.failure));
      continue;
    }
    std::string ws_note;
    const std::string ws =
        ws_verdict(ws_urls[i], ws_answers[i], *r.chain_id, ws_written[i], ws_note);
    chains[*r.chain_id].push_back({ids[i], written[i], ws, r});
    for (const auto& v : vars.names) {
      if (written[i].find("${" + v + "}") != std::string::npos ||
          ws.find("${" + v + "}") != std::string::npos)
        used_vars.insert(v);
    }
    const auto* known = known_chain(*r.chain_id);
    print_info(fmt::format("{}: chain {} ({}), archive {}, batch {}, {}", ids[i], *r.chain_id,
                           known ? known->name : "unknown",
                           r.archival ? (*r.archival ? "yes" : "no") : "?",
                           r.batch ? (*r.batch ? "yes" : "no") : "?", ws_note));
  }
  std::vector<std::string> listed;
  for (const auto& v : vars.names) {
    if (used_vars.contains(v)) listed.push_back(v);
  }
  if (chains.empty()) {
    print_error("no provider answered eth_chainId: nothing written");
    return code_of(ExitCode::unavailable);
  }
  const auto yaml = render(options, chains, listed);
  if (options.output.empty()) {
    write_stdout(yaml);
    return 0;
  }
  std::ofstream(options.output) << yaml;
  print_info(fmt::format("wrote {}", options.output));
  return 0;
}

}  // namespace rpcroute::cli

#include "cmd_serve.hpp"

#include <fmt/format.h>
#include <malloc.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>

#include "options.hpp"
#include "output.hpp"
#include "server.hpp"
#include "setup.hpp"

namespace rpcroute::cli {

void setup_serve(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<ServeOptions>();
  auto* sub = app.add_subcommand(
      "serve",
      "Run the localhost sidecar: point your app's RPC URL at http://127.0.0.1:8645/rpc/CHAIN");
  sub->add_option(
      "--listen,-l", opts->listen,
      "Address and port (default 127.0.0.1:8645, a port no local node uses; 0 picks one)");
  sub->add_option(
      "--profile,-p", opts->profiles,
      "Profile name or path; repeat to serve several (the first is the default; others "
      "on the search path are served under /rpc/profile/NAME/...). Reloaded on SIGHUP "
      "and when a profile file changes (a failed load keeps serving the last good set)");
  sub->add_option("--state", opts->state,
                  "State file (default: $RPCROUTE_STATE or $XDG_STATE_HOME/rpcroute/state.json)");
  sub->add_flag("--no-state", opts->no_state, "Keep state in memory only");
  sub->add_option("--shared-state", opts->shared_state,
                  "Share what is learned with other hosts through Redis: redis://HOST:PORT/DB, "
                  "or rediss:// for TLS (system CAs unless the profile's shared_state.tls) "
                  "(password: $RPCROUTE_REDIS_PASSWORD; default: the profile's shared_state)");
  sub->add_option("--strategy,-s", opts->strategy,
                  "Strategy for routes without a strategy segment (default: the profile's)");
  sub->add_option("--log-format", opts->log_format, "Request log format: text or json")
      ->check(CLI::IsMember({"text", "json"}));
  sub->add_flag("-v,--verbose", opts->verbose,
                "Log one line per request on stderr (never URLs or keys)");
  sub->add_flag("--allow-remote", opts->allow_remote,
                "Allow a non-loopback --listen address (needs a token)");
  sub->add_option("--token", opts->token,
                  "Bearer token required on every route but /healthz (default: $RPCROUTE_TOKEN)");
  sub->add_option("--allow-origin", opts->allow_origins,
                  "Extra browser origin allowed (repeatable; '*' allows any). localhost and "
                  "127.0.0.1 are always allowed");
  sub->add_option("--max-body", opts->max_body,
                  "Largest request body in bytes, 1 to 1 GiB (default 8 MiB; larger: 413)")
      ->check(whole_number(1, 1LL << 30));
  sub->add_option("--max-batch", opts->max_batch,
                  "Batch items routed, 1 to 1000000 (default 1000, viem's batch size); each item "
                  "beyond gets its own -32600")
      ->check(whole_number(1, 1'000'000));
  sub->add_option("--max-connections", opts->max_connections,
                  "Client connections open at once, 1 to 1000000 (default 1024); more are answered "
                  "503 with Retry-After")
      ->check(whole_number(1, 1'000'000));
  sub->add_option("--cache-mb", opts->cache_mb,
                  "Answer cache size in MiB, 0 to 65536 (0: off; default: the profile's "
                  "cache.max_mb, 32)")
      ->check(whole_number(0, 65'536));
  sub->add_flag("--no-cache", opts->no_cache,
                "No answer cache: every read goes to a provider (X-Rpcroute-Cache: BYPASS); "
                "identical reads in flight are still shared");
  sub->add_option("--max-inflight-mb", opts->max_inflight_mb,
                  "Request-body MiB held at once by all requests, 1 to 1048576 (default 256); a "
                  "body past it: 503 with Retry-After")
      ->check(whole_number(1, 1LL << 20));
  sub->add_option("--grace", opts->grace,
                  "At SIGINT/SIGTERM, time to finish in-flight requests (default 10s)");
  sub->add_option("--read-timeout", opts->read_timeout,
                  "Time a client has to send one request, more than 0 (default 10s)");
  sub->add_option("--idle-timeout", opts->idle_timeout,
                  "Idle keep-alive connections close after this, more than 0 (default 60s)");
  sub->add_option("--ws-ping-timeout", opts->ws_ping_timeout,
                  "A WebSocket client silent this long (a ping after half of it) is closed, more "
                  "than 0 (default 30s)");
  sub->add_option("--ws-max-buffer-kb", opts->ws_max_buffer_kb,
                  "KiB of answers queued for one WebSocket client, 1 to 1048576 (default 4096); a "
                  "client that does not read past it is closed with 1008")
      ->check(whole_number(1, 1LL << 20));
  sub->add_flag("--no-probe", opts->no_probe,
                "No background polling of providers, nor recovery probes of open breakers");
  sub->add_flag("--no-dashboard", opts->no_dashboard,
                "No live dashboard: GET / and /dashboard/* are not served");
  sub->add_option("--port-file", opts->port_file,
                  "Write the bound port to this file once listening");
  sub->callback([opts, &exit_code] { exit_code = run_serve(*opts); });
}

namespace {

/// --listen HOST:PORT ([::1]:PORT for IPv6) into the config; an error is printed.
bool parse_listen(const std::string& listen, sidecar::ServerConfig& config) {
  auto colon = listen.rfind(':');
  if (colon == std::string::npos) {
    print_error(fmt::format("bad --listen '{}' (use HOST:PORT)", listen));
    return false;
  }
  config.host = listen.substr(0, colon);
  if (config.host.size() > 2 && config.host.front() == '[' && config.host.back() == ']') {
    config.host = config.host.substr(1, config.host.size() - 2);
  }
  try {
    auto port = std::stoul(listen.substr(colon + 1));
    if (port > 65535) throw std::out_of_range("port");
    config.port = static_cast<std::uint16_t>(port);
  } catch (const std::exception&) {
    print_error(fmt::format("bad port in --listen '{}'", listen));
    return false;
  }
  return true;
}

/// The limits and timeouts; an error is printed.
bool parse_limits(const ServeOptions& options, sidecar::ServerConfig& config) {
  config.max_body = options.max_body;
  config.max_batch = options.max_batch;
  for (auto [value, name] : {std::pair{options.max_batch, "--max-batch"},
                             std::pair{options.max_connections, "--max-connections"},
                             std::pair{options.max_inflight_mb, "--max-inflight-mb"}}) {
    if (value == 0) {
      print_error(fmt::format("bad {} 0 (must be at least 1)", name));
      return false;
    }
  }
  if (options.max_inflight_mb > (SIZE_MAX >> 21)) {
    print_error(fmt::format("bad --max-inflight-mb {} (too large)", options.max_inflight_mb));
    return false;
  }
  config.max_connections = options.max_connections;
  config.cache_mb = options.no_cache ? std::optional<std::int64_t>(0) : options.cache_mb;
  config.no_cache = options.no_cache;
  config.max_inflight_bytes = options.max_inflight_mb << 20;
  config.ws_max_buffered = options.ws_max_buffer_kb << 10;
  // A grace of 0 stops at once; a zero read or idle timeout would close every connection unread.
  for (auto [text, target, name, min_ms] :
       {std::tuple{&options.grace, &config.grace_ms, "--grace", 0},
        std::tuple{&options.read_timeout, &config.read_timeout_ms, "--read-timeout", 1},
        std::tuple{&options.idle_timeout, &config.idle_timeout_ms, "--idle-timeout", 1},
        std::tuple{&options.ws_ping_timeout, &config.ws_ping_timeout_ms, "--ws-ping-timeout", 1}}) {
    auto ms = parse_duration_ms(*text);
    if (!ms || *ms < min_ms) {
      print_error(fmt::format("bad {} '{}' (use e.g. 10s or 2500ms{})", name, *text,
                              min_ms > 0 ? ", more than 0" : ""));
      return false;
    }
    *target = *ms;
  }
  return true;
}

/// The sidecar's configuration from the options; an error is printed.
std::optional<sidecar::ServerConfig> server_config(const ServeOptions& options) {
  sidecar::ServerConfig config;
  if (!parse_listen(options.listen, config)) return std::nullopt;
  config.allow_remote = options.allow_remote;
  config.token = options.token;
  if (config.token.empty()) {
    if (const char* t = std::getenv("RPCROUTE_TOKEN"); t != nullptr) config.token = t;
  }
  config.allow_origins = options.allow_origins;
  if (!parse_limits(options, config)) return std::nullopt;
  config.verbose = options.verbose;
  config.json_logs = options.log_format == "json";
  config.background_probes = !options.no_probe;
  config.dashboard = !options.no_dashboard;
  if (auto s = strategy_flag(options.strategy); !s) {
    print_error(s.error().message);
    return std::nullopt;
  } else {
    config.strategy = *s;
  }
  return config;
}

/// Each --profile (none: the default one), each name once; an error is printed.
std::optional<std::vector<Profile>> load_profiles(const std::vector<std::string>& names) {
  std::vector<Profile> profiles;
  for (const auto& name : names) {
    auto p = load_profile_flag(name);
    if (!p) return std::nullopt;
    for (const auto& q : profiles) {
      if (q.name == p->name) {
        print_error(fmt::format("profile '{}' given twice", p->name));
        return std::nullopt;
      }
    }
    profiles.push_back(std::move(*p));
  }
  return profiles;
}

/// The same profiles again for a reload (SIGHUP, an edited file), errors returned, not printed.
Result<std::vector<Profile>> reload_profiles(const std::vector<std::string>& names) {
  std::vector<Profile> profiles;
  for (const auto& name : names) {
    auto p = load_selected_profile(name);
    if (!p) return tl::unexpected(p.error());
    for (const auto& q : profiles) {
      if (q.name == p->name) return fail(fmt::format("profile '{}' given twice", p->name));
    }
    profiles.push_back(std::move(*p));
  }
  return profiles;
}

void write_port_file(const std::string& path, std::uint16_t port) {
  auto tmp = path + ".tmp";
  std::ofstream(tmp) << port << "\n";
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace

int run_serve(const ServeOptions& options) {
  auto config = server_config(options);
  if (!config) return code_of(ExitCode::usage);
  const auto names = options.profiles.empty() ? std::vector<std::string>{""} : options.profiles;
  auto profiles = load_profiles(names);
  if (!profiles) return code_of(ExitCode::usage);
  Setup setup;
  if (!setup.open_state(resolve_state_path(options.state, options.no_state)))
    return code_of(ExitCode::usage);
  StateStore& store = *setup.store;

  // Answers up to a few MiB (200 KB eth_getLogs) come from the heap and are reused: with glibc's
  // default sliding threshold each one could be a fresh mmap, ~50 page faults per 200 KB. Larger
  // ones are still mapped (and unmapped when freed); the heap is trimmed when the sidecar is idle.
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
  mallopt(M_TRIM_THRESHOLD, 16 << 20);
  // Nothing here resolves names through Asio (curl does its own): the loop's one thread is enough.
  EventLoop loop;
  asio::io_context& io = loop.io();
  auto shared = open_shared_state(io, setup, profiles->front(), options.shared_state);
  if (!shared) return code_of(ExitCode::usage);
  if (*shared) {
    for (const auto& p : *profiles) (*shared)->watch(p);
  }
  sidecar::Server server(io, *config, std::move(*profiles), loop.engine(), store, setup.clock,
                         shared->get());
  server.enable_reload([names] { return reload_profiles(names); });
  auto port = server.listen();
  if (!port) return usage_error(port.error().message);
  if (!options.port_file.empty()) write_port_file(options.port_file, *port);
  fmt::print(stderr, "rpcroute: serving on http://{}:{}/rpc/<chain> (profile {}; state {})\n",
             config->host.find(':') != std::string::npos ? "[" + config->host + "]" : config->host,
             *port, names.front().empty() ? std::string(kDefaultProfile) : names.front(),
             store.path() ? store.path()->string() : "in memory");
  if (*shared) (*shared)->start();

  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (!ec) server.shutdown();
  });
  // SIGHUP (`kill -HUP` from a supervisor, a closed terminal) reloads the profiles; it and
  // SIGUSR1/2, which would end the process by default and lose what it learned since the last
  // flush, save the state now, and serving goes on.
  asio::signal_set save_signals(io, SIGHUP, SIGUSR1, SIGUSR2);
  std::function<void(const boost::system::error_code&, int)> on_save_signal =
      [&](const boost::system::error_code& ec, int signo) {
        if (ec) return;
        if (signo == SIGHUP) server.reload("SIGHUP");
        server.save_state(fmt::format("signal {}", signo == SIGHUP    ? "SIGHUP"
                                                   : signo == SIGUSR1 ? "SIGUSR1"
                                                                      : "SIGUSR2"));
        save_signals.async_wait(on_save_signal);
      };
  save_signals.async_wait(on_save_signal);
  // Background loops and timers end with the context.
  const auto ran = loop.run(server.run(), EventLoop::Until::done, [&] {
    ignore_from_now(signals, {SIGINT, SIGTERM});
    ignore_from_now(save_signals, {SIGHUP, SIGUSR1, SIGUSR2});
  });
  if (!ran) return internal_error(ran.error());
  fmt::print(stderr, "rpcroute: stopped\n");
  return 0;
}

}  // namespace rpcroute::cli

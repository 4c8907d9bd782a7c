#include "cmd_call.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <charconv>
#include <iostream>
#include <iterator>
#include <memory>

#include "options.hpp"
#include "output.hpp"
#include "rpcroute/json.hpp"
#include "rpcroute/plan_report.hpp"
#include "rpcroute/router.hpp"
#include "setup.hpp"

namespace rpcroute::cli {

void setup_call(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<CallOptions>();
  auto* sub = app.add_subcommand(
      "call", "Send one JSON-RPC call through the router; the result is printed as JSON");
  sub->add_option("method", opts->method, "JSON-RPC method, e.g. eth_blockNumber");
  sub->add_option(
      "params", opts->params,
      "Parameters: each is taken as JSON if it parses, else as a string (latest, 0xabc...)");
  sub->add_option("--profile,-p", opts->profile,
                  "Profile name or path (default: $RPCROUTE_PROFILE or 'public')");
  sub->add_option("--chain,-c", opts->chain,
                  "Chain name or decimal chain id (default: the profile's first chain)");
  sub->add_option(
      "--strategy,-s", opts->strategy,
      "load_balanced, round_robin, random, weighted, priority, fastest or latency_weighted");
  sub->add_option("--provider", opts->provider, "Use exactly this provider id (no fallback)");
  sub->add_option("--timeout,-t", opts->timeout,
                  "Overall deadline: 30s, 2500ms or milliseconds (default: the profile's)");
  sub->add_option("--max-attempts", opts->max_attempts, "Try at most N providers (1 to 1000)")
      ->check(whole_number(1, 1000));
  sub->add_option("--state", opts->state,
                  "State file (default: $RPCROUTE_STATE or $XDG_STATE_HOME/rpcroute/state.json)");
  sub->add_flag("--no-state", opts->no_state, "Neither read nor write the state file");
  sub->add_option("--shared-state", opts->shared_state,
                  "Share what is learned through Redis: redis://HOST:PORT/DB (default: the "
                  "profile's shared_state)");
  sub->add_flag("--json", opts->json,
                "Print an envelope with result or error plus routing metadata");
  sub->add_flag("-v,--verbose", opts->verbose, "Print routing metadata on stderr");
  sub->add_flag("--raw", opts->raw,
                "Read a whole JSON-RPC request or batch from stdin and print the whole response");
  auto* hedge = sub->add_flag("--hedge", opts->hedge,
                              "Hedge replay-safe reads: ask the next provider too when the first "
                              "is slow (the profile's hedge settings, else the defaults)");
  sub->add_flag("--no-hedge", opts->no_hedge, "Never hedge, whatever the profile says")
      ->excludes(hedge);
  sub->add_option("--min-block", opts->min_block,
                  "Serve only from a provider known to be at or past block N (decimal or 0x hex): "
                  "read your own writes after a transaction was mined in N");
  sub->callback([opts, &exit_code] { exit_code = run_call(*opts); });
}

namespace {

void write_meta(json::Writer& w, const CallOutcome& o, const Chain& chain) {
  w.begin_object();
  w.key("provider");
  if (o.provider.empty())
    w.null();
  else
    w.value(o.provider);
  w.key("chain");
  w.value(chain.name);
  w.key("chain_id");
  w.value(static_cast<std::uint64_t>(chain.chain_id));
  w.key("strategy");
  w.value(strategy_name(o.strategy));
  if (o.provider_height > 0) {  // issue 19: the serving provider's known height
    w.key("block");
    w.value(o.provider_height);
  }
  w.key("upstream_latency_ms");
  w.value(o.upstream_latency_ms);
  w.key("local");
  w.value(o.status == CallOutcome::Status::local);
  if (o.raised_from) {
    w.key("raised_from");
    w.value(fmt::format("0x{:x}", *o.raised_from));
  }
  if (o.broadcast) {
    w.key("broadcast");
    w.value(true);
  }
  if (o.empty_retries > 0) {  // a null from a provider behind was asked again elsewhere
    w.key("empty_retries");
    w.value(static_cast<std::int64_t>(o.empty_retries));
  }
  if (o.hedge != CallOutcome::Hedge::none) {  // which attempt answered: first, hedge, neither
    w.key("hedge");
    w.value(hedge_name(o.hedge));
  }
  w.key("attempts");
  w.begin_array();
  for (const auto& a : o.attempts) write_attempt_json(w, a);
  w.end_array();
  w.key("excluded");
  w.begin_array();
  for (const auto& e : o.excluded) write_exclusion_json(w, e, RetryField::when_known);
  w.end_array();
  if (o.retry_after_ms >= 0) {
    w.key("retry_after_ms");
    w.value(o.retry_after_ms);
  }
  w.end_object();
}

std::string attempt_line(const AttemptRecord& a) {
  std::string line = fmt::format("  {}: {} ({})", a.provider, outcome_name(a.result.outcome),
                                 class_name(a.result.cls));
  if (a.http_status != 0 && a.http_status != 200) line += fmt::format(" HTTP {}", a.http_status);
  line += fmt::format(" after {}", format_ms(a.latency_ms));
  if (!a.result.message.empty()) line += ": " + a.result.message;
  return line;
}

void print_verbose(const CallOutcome& o, const Chain& chain) {
  if (o.status == CallOutcome::Status::local) {
    fmt::print(stderr, "rpcroute: answered locally (chain {} has id {})\n", chain.name,
               chain.chain_id);
    return;
  }
  fmt::print(stderr, "rpcroute: chain={} strategy={} provider={} attempts={} upstream={}\n",
             chain.name, strategy_name(o.strategy), o.provider.empty() ? "-" : o.provider,
             o.attempts.size(), format_ms(o.upstream_latency_ms));
  for (const auto& a : o.attempts) fmt::print(stderr, "{}\n", attempt_line(a));
  for (const auto& e : o.excluded) fmt::print(stderr, "  excluded {}: {}\n", e.provider, e.reason);
  if (o.raised_from) {
    fmt::print(stderr, "  {} answered 0x{:x}, below the high-water mark: raised to {}\n",
               o.provider, *o.raised_from, o.result);
  }
  if (o.broadcast)
    fmt::print(stderr, "  broadcast to every eligible provider; the first success was returned\n");
  if (o.hedge != CallOutcome::Hedge::none)
    fmt::print(stderr,
               "  hedged: the first attempt was slow, the next provider was asked too; "
               "answered by: {}\n",
               hedge_name(o.hedge));
}

void print_unavailable(const CallOutcome& o, std::string_view method, const Chain& chain) {
  fmt::print(stderr, "rpcroute: no provider could serve {} on {}", method, chain.name);
  // The router's reason: with no attempt it may be the deadline as well as an empty plan.
  if (!o.unavailable_reason.empty())
    fmt::print(stderr, " ({})", o.unavailable_reason);
  else if (o.attempts.empty())
    fmt::print(stderr, " (no eligible provider)");
  fmt::print(stderr, "\n");
  for (const auto& a : o.attempts) fmt::print(stderr, "{}\n", attempt_line(a));
  for (const auto& e : o.excluded) fmt::print(stderr, "  excluded {}: {}\n", e.provider, e.reason);
  if (o.retry_after_ms >= 0)
    fmt::print(stderr, "  retry after {}\n", format_ms(static_cast<double>(o.retry_after_ms)));
}

int exit_for(const std::vector<CallOutcome>& outs) {
  int code = 0;
  for (const auto& o : outs) {
    if (o.status == CallOutcome::Status::unavailable) return 3;
    // An invalid request (--raw: no method, a bad id, ...) is a usage error, like invalid JSON;
    // it outranks a node's JSON-RPC error elsewhere in the batch.
    if (o.status == CallOutcome::Status::invalid) code = 2;
    if (o.status == CallOutcome::Status::rpc_error && code == 0) code = 1;
  }
  return code;
}

/// --strategy, --provider, --timeout and --max-attempts; an error is printed.
std::optional<RouteOptions> route_options(const CallOptions& options, const Chain& chain) {
  RouteOptions route;
  if (auto s = strategy_flag(options.strategy); !s) {
    print_error(s.error().message);
    return std::nullopt;
  } else {
    route.strategy = *s;
  }
  if (!options.provider.empty()) {
    if (auto p = select_providers(chain, options.provider); !p) {
      print_error(p.error().message);
      return std::nullopt;
    }
    route.provider = options.provider;
  }
  if (!options.timeout.empty()) {
    route.timeout_ms = parse_duration_ms(options.timeout);
    if (!route.timeout_ms || *route.timeout_ms <= 0) {
      print_error(fmt::format("bad --timeout '{}' (use e.g. 2500ms or 5s)", options.timeout));
      return std::nullopt;
    }
  }
  if (options.max_attempts > 0) route.max_attempts = options.max_attempts;
  if (options.hedge) route.hedge = true;
  if (options.no_hedge) route.hedge = false;
  if (!options.min_block.empty()) {
    const std::string& m = options.min_block;
    const bool hex = m.starts_with("0x") || m.starts_with("0X");
    std::uint64_t n = 0;
    const char* first = m.data() + (hex ? 2 : 0);
    const char* last = m.data() + m.size();
    const auto [end, ec] = std::from_chars(first, last, n, hex ? 16 : 10);
    if (ec != std::errc() || end != last || first == last) {
      print_error(fmt::format("bad --min-block '{}' (a block number: 123 or 0x7b)", m));
      return std::nullopt;
    }
    route.min_block = n;
  }
  // Never a provider on another network, probe or not: its chain id is checked once, alongside the
  // first request to it, and kept in the state.
  route.verify_chain_id = true;
  return route;
}

/// The request: a whole one from stdin (--raw), else the method and params words. An error is
/// printed.
std::optional<jsonrpc::Body> read_body(const CallOptions& options) {
  if (options.raw) {
    std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    auto parsed = jsonrpc::parse_body(input);
    if (!parsed) {
      write_stdout(jsonrpc::make_error("null", parsed.error().code, parsed.error().message) + "\n");
      print_error(fmt::format("stdin is not a JSON-RPC request: {}", parsed.error().message));
      return std::nullopt;
    }
    return std::move(*parsed);
  }
  // Words from argv get the checks a body sent to the sidecar gets: a call the node would refuse
  // as unreadable (-32700) must not reach it, nor count against its breaker.
  for (std::size_t i = 0; i <= options.params.size(); ++i) {
    const std::string& word = i == 0 ? options.method : options.params[i - 1];
    if (!simdjson::validate_utf8(word.data(), word.size())) {
      print_error(i == 0 ? std::string("the method is not valid UTF-8")
                         : fmt::format("parameter {} is not valid UTF-8", i));
      return std::nullopt;
    }
  }
  auto parsed =
      jsonrpc::parse_body(jsonrpc::make_call("1", options.method, params_json(options.params)));
  if (!parsed || !parsed->calls.front().valid()) {
    print_error(fmt::format(
        "bad call: {}", parsed ? parsed->calls.front().invalid_reason : parsed.error().message));
    return std::nullopt;
  }
  return std::move(*parsed);
}

/// --raw: the whole response (a batch's answers in one array), or its envelope with --json.
void print_raw(const CallOptions& options, const jsonrpc::Body& body,
               const std::vector<CallOutcome>& outs, const Chain& chain) {
  std::string text;
  if (body.batch) {
    text = "[";
    bool first = true;
    for (const auto& o : outs) {
      if (o.response.empty()) continue;
      if (!first) text += ',';
      text += o.response;
      first = false;
    }
    text += "]";
  } else {
    text = outs.front().response;
  }
  if (options.json) {
    json::Writer w;
    w.begin_object();
    w.key("response");
    w.raw(text.empty() ? "null" : text);
    w.key("meta");
    w.begin_array();
    for (const auto& o : outs) write_meta(w, o, chain);
    w.end_array();
    w.end_object();
    text = w.take();
  }
  if (!text.empty()) write_stdout(text + "\n");
  if (options.verbose) {
    for (const auto& o : outs) print_verbose(o, chain);
  }
  for (std::size_t i = 0; i < outs.size(); ++i) {
    if (outs[i].status == CallOutcome::Status::unavailable)
      print_unavailable(outs[i], body.calls[i].method, chain);
  }
}

/// One call: its result or error as sent (or the envelope with --json), and our report on stderr.
void print_one(const CallOptions& options, const CallOutcome& o, const Chain& chain) {
  if (options.json) {
    json::Writer w;
    w.begin_object();
    if (o.status == CallOutcome::Status::result || o.status == CallOutcome::Status::local) {
      w.key("result");
      w.raw(o.result);
    } else {
      w.key("error");
      w.raw(o.error);
    }
    w.key("meta");
    write_meta(w, o, chain);
    w.end_object();
    write_stdout(w.take() + "\n");
  }
  if (options.verbose) print_verbose(o, chain);
  switch (o.status) {
    case CallOutcome::Status::result:
    case CallOutcome::Status::local:
      if (!options.json) write_stdout(o.result + "\n");
      break;
    case CallOutcome::Status::rpc_error:
    case CallOutcome::Status::invalid:
      if (!options.json) write_stdout(o.error + "\n");
      // stdout carries the node's error as sent; this line is our report of it.
      fmt::print(stderr, "rpcroute: {} answered with an error: {}\n",
                 o.provider.empty() ? "the router" : o.provider, report_text(o.error));
      break;
    case CallOutcome::Status::unavailable:
      print_unavailable(o, options.method, chain);
      break;
  }
}

}  // namespace

int run_call(const CallOptions& options) {
  if (!options.raw && options.method.empty())
    return usage_error("call needs a METHOD (or --raw with a request on stdin)");
  Setup setup;
  if (!setup.select(options.profile, options.chain)) return code_of(ExitCode::usage);
  const Chain& chain = *setup.chain;
  const auto route = route_options(options, chain);
  if (!route) return code_of(ExitCode::usage);
  const auto body = read_body(options);
  if (!body) return code_of(ExitCode::usage);
  if (!setup.open_state(resolve_state_path(options.state, options.no_state)) ||
      !setup.open_shared(options.shared_state))
    return code_of(ExitCode::usage);

  EventLoop::Completion<std::vector<CallOutcome>> outs;
  {
    EventLoop loop;
    Router router(setup.profile, loop.engine(), setup.health(), setup.clock, setup.rng);
    // Until idle: a broadcast's other sends are still recorded after the first success returned.
    outs = loop.run(router.route(chain, body->calls, *route), EventLoop::Until::idle);
  }
  if (!outs) return internal_error(outs.error());
  if (options.raw) {
    print_raw(options, *body, *outs, chain);
  } else {
    print_one(options, outs->front(), chain);
  }
  return setup.finish(exit_for(*outs));
}

}  // namespace rpcroute::cli

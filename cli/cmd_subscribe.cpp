#include "cmd_subscribe.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <simdjson.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string_view>

#include "handlers.hpp"
#include "options.hpp"
#include "output.hpp"
#include "rpcroute/health/model.hpp"
#include "rpcroute/jsonrpc.hpp"
#include "rpcroute/outcome.hpp"
#include "rpcroute/poller.hpp"
#include "rpcroute/router.hpp"
#include "setup.hpp"
#include "ws_subscriptions.hpp"

namespace rpcroute::cli {

void setup_subscribe(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<SubscribeOptions>();
  auto* sub = app.add_subcommand(
      "subscribe",
      "Subscribe over the providers' WebSockets, with failover: one JSON event per line");
  sub->add_option("kind", opts->kind, "newHeads, logs or newPendingTransactions")->required();
  sub->add_option("--address", opts->addresses,
                  "logs: only those of this contract (0x + 40 hex); repeat for any of several");
  sub->add_option("--topic", opts->topics,
                  "logs: the topic at this position (the first --topic is topic 0): 0x + 64 "
                  "hex, null for any, or T1|T2 for either");
  sub->add_option("--profile,-p", opts->profile,
                  "Profile name or path (default: $RPCROUTE_PROFILE or 'public')");
  sub->add_option("--chain,-c", opts->chain,
                  "Chain name or decimal chain id (default: the profile's first chain)");
  sub->add_option("--count,-n", opts->count, "Exit 0 after N events (1 to 1000000000)")
      ->check(whole_number(1, 1'000'000'000));
  sub->add_option("--duration,-d", opts->duration,
                  "Exit 0 after this long: 90s, 10m, 2500ms or milliseconds (default: no limit)");
  sub->add_option("--state", opts->state,
                  "State file (default: $RPCROUTE_STATE or $XDG_STATE_HOME/rpcroute/state.json)");
  sub->add_flag("--no-state", opts->no_state, "Neither read nor write the state file");
  sub->add_option("--shared-state", opts->shared_state,
                  "Share what is learned through Redis: redis://HOST:PORT/DB (default: the "
                  "profile's shared_state)");
  sub->footer(
      "Each line of stdout is one event's `result` as nodes send it in eth_subscription: a block\n"
      "header (newHeads), a log object (logs; `removed: true` for a log of a block a reorg\n"
      "replaced) or a transaction hash string (newPendingTransactions). When the provider serving\n"
      "it drops or stalls, it moves to the next one and what was missed is fetched over HTTP: no\n"
      "gap, no duplicate. Ctrl-C or SIGTERM: exit 0 after the last whole line. Exit 3 when no\n"
      "provider takes it within the chain's websocket.resubscribe_timeout_ms (30 s).");
  sub->callback([opts, &exit_code] { exit_code = run_subscribe(*opts); });
}

namespace {

bool hex_of(std::string_view s, std::size_t digits) {
  if (s.size() != digits + 2 || (s.substr(0, 2) != "0x" && s.substr(0, 2) != "0X")) return false;
  return std::all_of(s.begin() + 2, s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  });
}

/// One --topic: null, a topic, or topics joined by '|' (any of them).
Result<std::string> topic_json(std::string_view text, std::size_t position) {
  if (text == "null") return std::string("null");
  std::vector<std::string> any;
  std::size_t start = 0;
  for (;;) {
    const auto bar = text.find('|', start);
    const std::string_view one =
        text.substr(start, bar == std::string_view::npos ? std::string_view::npos : bar - start);
    if (!hex_of(one, 64)) {
      return fail(fmt::format(
          "bad --topic '{}' at position {}: a topic is 0x and 64 hex digits; null for any, "
          "T1|T2 for either",
          text, position));
    }
    any.push_back(fmt::format("\"{}\"", one));
    if (bar == std::string_view::npos) break;
    start = bar + 1;
  }
  if (any.size() == 1) return any.front();
  return fmt::format("[{}]", fmt::join(any, ","));
}

/// A JSON-RPC error object's message (the object itself when it has none).
std::string error_message(const std::string& error) {
  simdjson::dom::parser parser;
  simdjson::dom::element e;
  std::string_view message;
  if (parser.parse(error).get(e) == simdjson::SUCCESS &&
      e["message"].get_string().get(message) == simdjson::SUCCESS)
    return std::string(message);
  return error;
}

/// Watches the chain's heads on every provider (eth_blockNumber each block time, as the sidecar's
/// pollers do): the stall detector compares the silent socket's last head with these.
asio::awaitable<void> watch_heads(PollTarget target, std::shared_ptr<bool> running) {
  const std::int64_t interval = poll_interval_ms(target.chain);
  const std::int64_t timeout = poll_timeout_ms(target.provider, interval);
  asio::steady_timer pause(co_await asio::this_coro::executor);
  while (*running) {
    (void)co_await poll_head_once(target, timeout);
    pause.expires_after(std::chrono::milliseconds(interval));
    boost::system::error_code ignored;
    co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  }
}

/// The sidecar's runtime of the command's profile (its chains' state keys); the router comes
/// with the loop.
std::shared_ptr<sidecar::ProfileRuntime> runtime_of(const Profile& profile) {
  auto rt = std::make_shared<sidecar::ProfileRuntime>();
  rt->profile = profile;
  for (const auto& c : rt->profile.chains) {
    rt->chain_keys.push_back(chain_key(rt->profile.name, c));
    auto& keys = rt->provider_keys.emplace_back();
    for (const auto& p : c.providers) keys.push_back(provider_key(rt->profile.name, c.name, p));
  }
  return rt;
}

/// One subscription on the command's loop, printed until something ends it: --count, --duration,
/// a signal, a reader that went, or no provider left (`ended` says why).
class Follow {
 public:
  Follow(const SubscribeOptions& options, EventLoop& loop, Setup& setup,
         std::shared_ptr<sidecar::ProfileRuntime> rt, const Chain& chain)
      : options_(options),
        loop_(loop),
        setup_(setup),
        rt_(std::move(rt)),
        chain_(chain),
        health_(setup.health()),
        // Destroyed before the loop: its sockets close while the loop is there.
        subscriptions_(8 * 1024 * 1024, {[this]() -> const HealthView& { return health_; },
                                         {},
                                         [this]() { return setup_.clock.now_ms(); }}),
        stop_(loop.io(), asio::steady_timer::time_point::max()) {}

  asio::awaitable<void> run(std::string params, std::optional<std::int64_t> duration_ms);

  int code = 0;
  std::string ended;  // why no provider can serve it (any more)

 private:
  void finish(int with) {
    if (finished_) return;
    finished_ = true;
    code = with;
    stop_.cancel();
  }
  sidecar::WsSubscriptions::Listener listener();

  const SubscribeOptions& options_;
  EventLoop& loop_;
  Setup& setup_;
  std::shared_ptr<sidecar::ProfileRuntime> rt_;
  const Chain& chain_;
  HealthStore& health_;
  sidecar::WsSubscriptions subscriptions_;
  asio::steady_timer stop_;
  std::shared_ptr<bool> running_ = std::make_shared<bool>(true);  // the head pollers go on
  std::int64_t printed_ = 0;
  bool finished_ = false;
};

sidecar::WsSubscriptions::Listener Follow::listener() {
  sidecar::WsSubscriptions::Listener listener;
  listener.bare = true;
  listener.sink = [this](std::string result) {
    if (finished_) return;
    result += '\n';
    write_stdout(result);
    if (std::ferror(stdout)) {  // a reader that went (| head): nothing more to do
      finish(0);
      return;
    }
    if (options_.count > 0 && ++printed_ >= options_.count) finish(0);
  };
  listener.ended = [this](const std::string& reason) {
    ended = reason;
    finish(code_of(ExitCode::unavailable));
  };
  return listener;
}

asio::awaitable<void> Follow::run(std::string params, std::optional<std::int64_t> duration_ms) {
  for (const auto& provider : chain_.providers) {
    // No shared finality votes: subscribe keeps no cache, a report is judged alone.
    const PollTarget target{loop_.engine(), health_, setup_.clock, setup_.rng,
                            rt_->profile,   chain_,  provider,     nullptr};
    asio::co_spawn(loop_.io(), watch_heads(target, running_), asio::detached);
  }
  asio::signal_set signals(loop_.io(), SIGINT, SIGTERM);
  signals.async_wait([this](const boost::system::error_code& ec, int) {
    if (!ec) finish(0);
  });
  asio::steady_timer limit(loop_.io());
  if (duration_ms) {
    limit.expires_after(std::chrono::milliseconds(*duration_ms));
    limit.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) finish(0);
    });
  }
  const jsonrpc::Call call{"1", "eth_subscribe", std::move(params), {}};
  const CallOutcome answer = co_await subscriptions_.subscribe(1, rt_, chain_, call, listener());
  boost::system::error_code ignored;
  if (answer.result.empty()) {
    ended = error_message(answer.error);
    finish(code_of(ExitCode::unavailable));
  } else if (!finished_) {
    co_await stop_.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  }
  *running_ = false;
  ignore_from_now(signals, {SIGINT, SIGTERM});
  limit.cancel();
  // The provider confirms the eth_unsubscribe (within its timeout) before the sockets close.
  co_await subscriptions_.leave(1);
}

}  // namespace

Result<std::string> subscribe_params(const SubscribeOptions& options) {
  const std::string& kind = options.kind;
  if (kind != "newHeads" && kind != "logs" && kind != "newPendingTransactions") {
    return fail(fmt::format(
        "unknown subscription '{}' (expected one of: newHeads, logs, newPendingTransactions)",
        kind));
  }
  if (kind != "logs") {
    if (!options.addresses.empty() || !options.topics.empty())
      return fail("--address and --topic filter a logs subscription only");
    return fmt::format("[\"{}\"]", kind);
  }
  std::vector<std::string> fields;
  if (!options.addresses.empty()) {
    std::vector<std::string> quoted;
    for (const auto& a : options.addresses) {
      if (!hex_of(a, 40))
        return fail(fmt::format("bad --address '{}': an address is 0x and 40 hex digits", a));
      quoted.push_back(fmt::format("\"{}\"", a));
    }
    fields.push_back(fmt::format("\"address\":[{}]", fmt::join(quoted, ",")));
  }
  if (options.topics.size() > 4)
    return fail(fmt::format("{} --topic given: a log has at most 4 topics", options.topics.size()));
  if (!options.topics.empty()) {
    std::vector<std::string> topics;
    for (std::size_t i = 0; i < options.topics.size(); ++i) {
      auto t = topic_json(options.topics[i], i);
      if (!t) return tl::unexpected(t.error());
      topics.push_back(std::move(*t));
    }
    fields.push_back(fmt::format("\"topics\":[{}]", fmt::join(topics, ",")));
  }
  return fmt::format("[\"logs\",{{{}}}]", fmt::join(fields, ","));
}

int run_subscribe(const SubscribeOptions& options) {
  const auto params = subscribe_params(options);
  if (!params) return usage_error(params.error().message);
  std::optional<std::int64_t> duration_ms;
  if (!options.duration.empty()) {
    duration_ms = parse_duration_ms(options.duration);
    if (!duration_ms || *duration_ms <= 0)
      return usage_error(
          fmt::format("bad --duration '{}' (use e.g. 90s, 10m or 2500ms)", options.duration));
  }
  Setup setup;
  if (!setup.select(options.profile, options.chain)) return code_of(ExitCode::usage);
  const bool any_ws = std::any_of(setup.chain->providers.begin(), setup.chain->providers.end(),
                                  [](const Provider& p) { return !p.ws_url.empty(); });
  if (!any_ws) {
    return usage_error(fmt::format(
        "no provider of chain '{}' in profile '{}' has a ws_url: subscriptions need one",
        setup.chain->name, setup.profile.name));
  }
  if (!setup.open_state(resolve_state_path(options.state, options.no_state)) ||
      !setup.open_shared(options.shared_state))
    return code_of(ExitCode::usage);

  // The subscriptions fetch backfills through the runtime's router, as the sidecar's do.
  const auto rt = runtime_of(setup.profile);
  const Chain& chain =
      rt->profile.chains[static_cast<std::size_t>(setup.chain - setup.profile.chains.data())];
  int code = 0;
  std::string ended;
  EventLoop::Completion<void> done;
  {
    EventLoop loop;
    rt->router = std::make_unique<Router>(rt->profile, loop.engine(), setup.health(), setup.clock,
                                          setup.rng);
    {
      Follow follow(options, loop, setup, rt, chain);
      done = loop.run(follow.run(*params, duration_ms), EventLoop::Until::done);
      code = follow.code;
      ended = follow.ended;
    }
    rt->router.reset();  // it uses the loop's HTTP client
  }
  if (!done) return internal_error(done.error());
  if (!ended.empty()) {
    print_error(fmt::format("no provider can serve the {} subscription on chain '{}': {}",
                            options.kind, chain.name, report_text(ended)));
  }
  return setup.finish(code);
}

}  // namespace rpcroute::cli

#include "cmd_bench.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench_report.hpp"
#include "options.hpp"
#include "output.hpp"
#include "rpcroute/bench.hpp"
#include "rpcroute/json.hpp"
#include "rpcroute/jsonrpc.hpp"
#include "setup.hpp"

namespace rpcroute::cli {

void setup_bench(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<BenchOptions>();
  auto* sub = app.add_subcommand("bench",
                                 "Measure every provider of a chain on a set of methods, "
                                 "concurrently; seeds the latency metrics");
  sub->add_option("--profile,-p", opts->profile,
                  "Profile name or path (default: $RPCROUTE_PROFILE or 'public')");
  sub->add_option("--chain,-c", opts->chain,
                  "Chain name or decimal chain id (default: the profile's first chain)");
  sub->add_option("--providers", opts->providers,
                  "Only these provider ids, comma-separated (default: all)")
      ->delimiter(',');
  auto* methods =
      sub->add_option("--methods", opts->methods,
                      "Methods, comma-separated (default: eth_blockNumber, eth_chainId, "
                      "eth_getBlockByNumber, eth_getBalance, eth_getTransactionCount, "
                      "eth_getLogs, eth_gasPrice)")
          ->delimiter(',');
  sub->add_option("--call", opts->calls,
                  "Measure METHOD with these params: 'METHOD:PARAMS_JSON', e.g. "
                  "'eth_call:[{\"to\":\"0x…\",\"data\":\"0x…\"},\"latest\"]' (repeatable; "
                  "with --methods, both)");
  sub->add_option("--calls-file", opts->calls_file,
                  "Measure the calls of this file: a JSON-RPC request or batch, as `call --raw` "
                  "reads it (at most 256 calls)");
  sub->add_option("--requests,-n", opts->requests, "Requests per provider and method (default 20)")
      ->check(whole_number(1, 1'000'000'000));
  sub->add_option("--duration,-d", opts->duration,
                  "Run each method for this long instead of --requests: 10 (seconds), 10s, 1500ms");
  sub->add_option("--concurrency,-k", opts->concurrency,
                  "Requests in flight per provider (default 4)")
      ->check(whole_number(1, 10'000));
  sub->add_option("--timeout,-t", opts->timeout,
                  "Per request: 5s, 2500ms or milliseconds (default: the provider's timeout_ms)");
  sub->add_option("--state", opts->state,
                  "State file (default: $RPCROUTE_STATE or $XDG_STATE_HOME/rpcroute/state.json)");
  sub->add_flag("--no-state", opts->no_state,
                "Neither read nor write the state file (nothing is recorded)");
  sub->add_flag("--no-record", opts->no_record,
                "Measure only; do not record the samples in the state file");
  sub->add_flag("--json", opts->json, "Print the figures as JSON");
  sub->callback([opts, methods, &exit_code] {
    opts->methods_given = methods->count() > 0;
    exit_code = run_bench(*opts);
  });
}

namespace {

/// One line on stderr, redrawn in place; only on a terminal.
class Progress final : public bench::Observer {
 public:
  Progress() : enabled_(::isatty(::fileno(stderr)) != 0) {}
  ~Progress() override { clear(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void begin(const bench::Phase& phase) override {
    label_ = phase.method.empty()
                 ? std::string("warming up connections")
                 : fmt::format("{} ({}/{})", phase.method, phase.index + 1, phase.count);
    total_ = phase.total;
    start_us_ = phase.start_us;
    deadline_us_ = phase.deadline_us;
    last_us_ = 0;
    draw(0);
  }

  void advance(std::size_t done) override {
    if (!enabled_) return;
    // Redrawn at most 20 times a second, and once more when the last request of a count is done.
    const bool last = deadline_us_ == 0 && done == total_;
    if (!last && steady_us() - last_us_ < 50'000) return;
    draw(done);
  }

  void end() override { clear(); }

  void clear() {
    if (enabled_ && drawn_) fmt::print(stderr, "\r\x1b[K");
    drawn_ = false;
  }

 private:
  void draw(std::size_t done) {
    if (!enabled_) return;
    last_us_ = steady_us();
    constexpr std::size_t kWidth = 24;
    double fraction = 0;
    std::string count;
    if (deadline_us_ > 0) {
      const auto span = static_cast<double>(deadline_us_ - start_us_);
      const auto elapsed = static_cast<double>(std::min(last_us_, deadline_us_) - start_us_);
      fraction = span > 0 ? elapsed / span : 1;
      count = fmt::format("{:.1f}/{:.1f} s, {} requests", elapsed / 1e6, span / 1e6, done);
    } else {
      fraction = total_ > 0 ? static_cast<double>(done) / static_cast<double>(total_) : 1;
      count = fmt::format("{}/{}", done, total_);
    }
    const auto filled = static_cast<std::size_t>(std::clamp(fraction, 0.0, 1.0) * kWidth);
    fmt::print(stderr, "\r\x1b[K{} [{}{}] {}", label_, std::string(filled, '#'),
               std::string(kWidth - filled, '.'), count);
    std::fflush(stderr);
    drawn_ = true;
  }

  bool enabled_;
  bool drawn_ = false;
  std::string label_;
  std::size_t total_ = 0;
  std::int64_t start_us_ = 0;
  std::int64_t deadline_us_ = 0;
  std::int64_t last_us_ = 0;
};

/// A bare number is seconds here (--duration S); "1500ms", "10s", "1m" as elsewhere.
std::optional<std::int64_t> parse_duration_s(std::string_view text) {
  if (!text.empty() && text.find_first_not_of("0123456789.") == std::string_view::npos) {
    return parse_duration_ms(std::string(text) + "s");  // bounded there
  }
  return parse_duration_ms(text);
}

/// --providers: each id once, in the order given; none given: every provider of the chain. An
/// error is printed.
bool select_bench_providers(const BenchOptions& options, bench::Plan& plan) {
  const Chain& chain = *plan.chain;
  for (const auto& id : options.providers) {
    if (id.empty()) continue;
    const Provider* p = chain.find_provider(id);
    if (p == nullptr) {
      std::string ids;
      for (const auto& q : chain.providers)
        ids += fmt::format("{}{}", ids.empty() ? "" : ", ", q.id);
      print_error(
          fmt::format("unknown provider '{}' on chain {} (providers: {})", id, chain.name, ids));
      return false;
    }
    if (std::find(plan.providers.begin(), plan.providers.end(), p) == plan.providers.end())
      plan.providers.push_back(p);
  }
  if (options.providers.empty()) {
    for (const auto& p : chain.providers) plan.providers.push_back(&p);
  }
  if (plan.providers.empty()) {
    print_error(fmt::format("no provider to measure on chain {}", chain.name));
    return false;
  }
  return true;
}

/// A method and its params (empty: params_for's), each pair once: --call may measure one method
/// with several params.
void add_entry(bench::Plan& plan, const std::string& method, const std::string& params) {
  for (std::size_t m = 0; m < plan.methods.size(); ++m) {
    if (plan.methods[m] == method && plan.given_params(m) == params) return;
  }
  plan.methods.push_back(method);
  plan.params.resize(plan.methods.size() - 1);
  plan.params.push_back(params);
}

/// --call 'METHOD:PARAMS_JSON', checked as the sidecar checks a request.
Result<jsonrpc::Call> parse_call_flag(const std::string& flag) {
  const auto colon = flag.find(':');
  const std::string method = flag.substr(0, colon);
  const std::string params = colon == std::string::npos ? "[]" : flag.substr(colon + 1);
  json::Writer w;
  w.begin_object();
  w.key("jsonrpc");
  w.value("2.0");
  w.key("id");
  w.value(1);
  w.key("method");
  w.value(method);
  w.key("params");
  w.raw(params);
  w.end_object();
  auto body = jsonrpc::parse_body(w.str());
  if (!body) {
    return fail(
        fmt::format("bad --call '{}': the params are not JSON (use METHOD:PARAMS_JSON, "
                    "e.g. eth_getBalance:[\"0x…\",\"latest\"])",
                    flag));
  }
  if (!body->calls.front().valid())
    return fail(fmt::format("bad --call '{}': {}", flag, body->calls.front().invalid_reason));
  return std::move(body->calls.front());
}

/// --calls-file: each call of a JSON-RPC request or batch. An error is printed.
bool add_calls_file(const std::string& path, bench::Plan& plan) {
  constexpr std::size_t kMaxBytes = 1 << 20;
  constexpr std::size_t kMaxCalls = 256;
  std::ifstream in(path, std::ios::binary);
  std::string text(kMaxBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad() || (!in && in.gcount() == 0 && !in.eof())) {
    print_error(fmt::format("cannot read --calls-file {}", path));
    return false;
  }
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMaxBytes) {
    print_error(fmt::format("--calls-file {} is larger than 1 MiB", path));
    return false;
  }
  auto body = jsonrpc::parse_body(text);
  if (!body || body->calls.empty() || body->calls.size() > kMaxCalls) {
    print_error(
        fmt::format("--calls-file {}: {}", path,
                    !body ? body.error().message : fmt::format("needs 1 to {} calls", kMaxCalls)));
    return false;
  }
  for (std::size_t i = 0; i < body->calls.size(); ++i) {
    const auto& call = body->calls[i];
    if (!call.valid()) {
      print_error(fmt::format("--calls-file {}: call {}: {}", path, i + 1, call.invalid_reason));
      return false;
    }
    add_entry(plan, call.method, call.params);
  }
  return true;
}

/// --methods, --call, --calls-file: each once, in that order; none given: the default mix. An
/// error is printed.
bool select_methods(const BenchOptions& options, bench::Plan& plan) {
  if (!options.methods_given && options.calls.empty() && options.calls_file.empty()) {
    plan.methods.assign(bench::kDefaultMix.begin(), bench::kDefaultMix.end());
    return true;
  }
  for (const auto& m : options.methods) {
    if (!m.empty()) add_entry(plan, m, "");
  }
  for (const auto& flag : options.calls) {
    auto call = parse_call_flag(flag);
    if (!call) {
      print_error(call.error().message);
      return false;
    }
    add_entry(plan, call->method, call->params);
  }
  if (!options.calls_file.empty() && !add_calls_file(options.calls_file, plan)) return false;
  if (plan.methods.empty()) {
    print_error("--methods is empty (give e.g. --methods eth_blockNumber,eth_gasPrice)");
    return false;
  }
  return true;
}

/// What to measure on the set-up's profile and chain; an error is printed.
std::optional<bench::Plan> plan_of(const BenchOptions& options, const Setup& setup) {
  bench::Plan plan;
  plan.profile = &setup.profile;
  plan.chain = setup.chain;
  if (!select_bench_providers(options, plan) || !select_methods(options, plan)) return std::nullopt;
  plan.requests = options.requests;
  plan.concurrency = options.concurrency;
  if (!options.duration.empty()) {
    plan.duration_ms = parse_duration_s(options.duration);
    if (!plan.duration_ms || *plan.duration_ms <= 0) {
      print_error(
          fmt::format("bad --duration '{}' (use e.g. 10, 10s or 1500ms)", options.duration));
      return std::nullopt;
    }
  }
  if (!options.timeout.empty()) {
    plan.timeout_ms = parse_duration_ms(options.timeout);
    if (!plan.timeout_ms || *plan.timeout_ms <= 0) {
      print_error(fmt::format("bad --timeout '{}' (use e.g. 2500ms or 5s)", options.timeout));
      return std::nullopt;
    }
  }
  return plan;
}

void warn_other_chains(const bench::Plan& plan, const bench::Results& results) {
  const Chain& chain = *plan.chain;
  for (std::size_t p = 0; p < plan.providers.size(); ++p) {
    const auto& w = results.warmups[p];
    if (w.chain_id && *w.chain_id != chain.chain_id) {
      print_warning(fmt::format("{} answers chain id {}, but chain {} has id {}",
                                plan.providers[p]->id, *w.chain_id, chain.name, chain.chain_id));
    }
  }
}

}  // namespace

int run_bench(const BenchOptions& options) {
  Setup setup;
  if (!setup.select(options.profile, options.chain)) return code_of(ExitCode::usage);
  const auto plan = plan_of(options, setup);
  if (!plan) return code_of(ExitCode::usage);
  // Nothing recorded with --no-record or --no-state: no store at all.
  if (!options.no_record) {
    if (auto path = resolve_state_path(options.state, options.no_state)) {
      if (!setup.open_state(std::move(path))) return code_of(ExitCode::usage);
    }
  }

  EventLoop::Completion<bench::Results> results;
  {
    Progress progress;
    EventLoop loop;
    // Until done: the work is over; idle keep-alive connections may still be watched.
    results = loop.run(bench::run(*plan, loop.engine(), setup.clock, setup.rng,
                                  setup.store ? &*setup.store : nullptr, &progress),
                       EventLoop::Until::done);
  }
  if (!results) return internal_error(results.error());
  const std::string text = options.json
                               ? render_bench_json(*plan, *results, setup.store.has_value()) + "\n"
                               : render_bench_text(*plan, *results);
  warn_other_chains(*plan, *results);
  if (setup.store) setup.save_state(Setup::StateWrite::rewrite);
  write_stdout(text);
  if (!results->any_answer()) {
    print_error(fmt::format("no provider answered on chain {}", plan->chain->name));
    return code_of(ExitCode::unavailable);
  }
  return 0;
}

}  // namespace rpcroute::cli

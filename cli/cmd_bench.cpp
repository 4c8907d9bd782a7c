#include "cmd_bench.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "options.hpp"
#include "output.hpp"
#include "setup.hpp"
#include "rpcroute/clock.hpp"
#include "rpcroute/health/exchange.hpp"
#include "rpcroute/json.hpp"
#include "rpcroute/metrics.hpp"
#include "rpcroute/state.hpp"
#include "rpcroute/transport.hpp"

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

// An address that exists on every chain: eth_getBalance and eth_getTransactionCount ask the same
// question everywhere.
constexpr std::string_view kFixedAddress = "0x0000000000000000000000000000000000000000";

constexpr std::array<std::string_view, 7> kDefaultMix = {
    "eth_blockNumber",         "eth_chainId", "eth_getBlockByNumber", "eth_getBalance",
    "eth_getTransactionCount", "eth_getLogs", "eth_gasPrice",
};

/// Params of a method of the default mix; any other method gets none. eth_getLogs covers the last
/// four blocks below the provider's head as seen in the warm-up.
std::string method_params(std::string_view method, std::optional<std::uint64_t> head) {
  if (method == "eth_getBlockByNumber") return R"(["latest",false])";
  if (method == "eth_getBalance" || method == "eth_getTransactionCount") {
    return fmt::format(R"(["{}","latest"])", kFixedAddress);
  }
  if (method == "eth_getLogs") {
    if (!head) return R"([{"fromBlock":"latest","toBlock":"latest"}])";
    return fmt::format(R"([{{"fromBlock":"0x{:x}","toBlock":"0x{:x}"}}])",
                       *head >= 3 ? *head - 3 : 0, *head);
  }
  return "[]";
}

constexpr std::array<UpstreamCall, 1> kChainIdCall = {UpstreamCall{"eth_chainId", "[]"}};
constexpr std::array<UpstreamCall, 1> kBlockNumberCall = {UpstreamCall{"eth_blockNumber", "[]"}};

// Error classes in the order they are listed.
constexpr std::array<OutcomeClass, 5> kErrorClasses = {
    OutcomeClass::provider_failure, OutcomeClass::rate_limited, OutcomeClass::capability,
    OutcomeClass::deterministic, OutcomeClass::unknown};
constexpr std::size_t kClassCount = static_cast<std::size_t>(OutcomeClass::unknown) + 1;
constexpr std::size_t kMaxMessages = 5;

[[nodiscard]] bool is_answer(Outcome o) { return o == Outcome::success || o == Outcome::rpc_error; }

/// curl says "... after 3 ms: ..." for each failed connect; without the time, equal failures group.
[[nodiscard]] std::string without_elapsed(std::string text) {
  constexpr std::string_view kAfter = " after ";
  for (auto at = text.find(kAfter); at != std::string::npos; at = text.find(kAfter, at + 1)) {
    auto end = at + kAfter.size();
    while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
    if (end > at + kAfter.size() && text.compare(end, 3, " ms") == 0) text.erase(at, end + 3 - at);
  }
  return text;
}

[[nodiscard]] std::string message_of(const Classification& c, const Profile& profile) {
  // A provider's own error text reaches us unscrubbed and may echo the request URL with its key.
  return without_elapsed(
      profile.scrub(c.message.empty() ? std::string(outcome_name(c.outcome)) : c.message));
}

/// What one provider did on one method.
struct Tally {
  int issued = 0;
  int ok = 0;
  int answered = 0;
  int rate_limited = 0;
  std::array<int, kClassCount> errors{};
  std::vector<double> latencies_ms;                   // answered requests only
  std::vector<std::pair<std::string, int>> messages;  // the first few distinct ones, with counts
  int other_messages = 0;
  std::int64_t started_us = 0;
  std::int64_t finished_us = 0;

  void add(const Exchange& ex, const Profile& profile) {
    const auto& c = ex.per_call.front();
    if (is_answer(c.outcome)) {
      ++answered;
      latencies_ms.push_back(ex.latency_ms());
    }
    if (c.cls == OutcomeClass::success) {
      ++ok;
      return;
    }
    ++errors[static_cast<std::size_t>(c.cls)];
    if (c.cls == OutcomeClass::rate_limited) ++rate_limited;
    auto text = message_of(c, profile);
    for (auto& [m, n] : messages) {
      if (m == text) {
        ++n;
        return;
      }
    }
    if (messages.size() < kMaxMessages) {
      messages.emplace_back(std::move(text), 1);
    } else {
      ++other_messages;
    }
  }
};

struct Figures {
  bool has_latency = false;
  double p50 = 0, p90 = 0, p99 = 0, min = 0, max = 0;
  double per_s = 0;  // answered requests per second of the provider's wall time
};

[[nodiscard]] Figures figures_of(const Tally& t) {
  Figures f;
  if (!t.latencies_ms.empty()) {
    f.has_latency = true;
    f.p50 = quantile(t.latencies_ms, 0.5);
    f.p90 = quantile(t.latencies_ms, 0.9);
    f.p99 = quantile(t.latencies_ms, 0.99);
    auto [lo, hi] = std::minmax_element(t.latencies_ms.begin(), t.latencies_ms.end());
    f.min = *lo;
    f.max = *hi;
  }
  const auto wall_us = t.finished_us - t.started_us;
  if (wall_us > 0) f.per_s = static_cast<double>(t.answered) * 1e6 / static_cast<double>(wall_us);
  return f;
}

/// The cold first request to a provider, before sampling.
struct Warmup {
  bool ok = false;
  double latency_ms = 0;
  double connect_ms = 0;
  std::optional<std::uint64_t> chain_id;
  std::optional<std::uint64_t> head;
  std::string message;
};

/// Counts spawned coroutines down; wait() returns once all of them finished.
class WaitGroup {
 public:
  explicit WaitGroup(asio::io_context& io) : signal_(io, asio::steady_timer::time_point::max()) {}
  void add() { ++pending_; }
  void done() {
    if (--pending_ == 0) signal_.cancel();
  }
  asio::awaitable<void> wait() {
    while (pending_ > 0) {
      boost::system::error_code ec;
      co_await signal_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
  }

 private:
  std::size_t pending_ = 0;
  asio::steady_timer signal_;
};

/// One line on stderr, redrawn in place; only on a terminal.
class Progress {
 public:
  Progress() : enabled_(::isatty(::fileno(stderr)) != 0) {}
  ~Progress() { clear(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void begin(std::string label, std::size_t total, std::int64_t start_us,
             std::int64_t deadline_us) {
    label_ = std::move(label);
    total_ = total;
    start_us_ = start_us;
    deadline_us_ = deadline_us;
    last_us_ = 0;
    draw(0);
  }

  void tick(std::size_t done) {
    if (!enabled_) return;
    // Redrawn at most 20 times a second, and once more when the last request of a count is done.
    const bool last = deadline_us_ == 0 && done == total_;
    if (!last && steady_us() - last_us_ < 50'000) return;
    draw(done);
  }

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

/// What to measure, resolved from the options.
struct Plan {
  const Profile* profile = nullptr;
  const Chain* chain = nullptr;
  std::vector<const Provider*> providers;
  std::vector<std::string> methods;
  int requests = 20;
  std::optional<std::int64_t> duration_ms;
  int concurrency = 4;
  std::optional<std::int64_t> timeout_ms;

  [[nodiscard]] std::int64_t timeout_for(const Provider& p) const {
    return timeout_ms.value_or(p.timeout_ms);
  }
  /// Workers per provider: no more than there are requests to send.
  [[nodiscard]] int workers() const {
    return duration_ms ? concurrency : std::min(concurrency, requests);
  }
};

/// Runs the plan on one io_context and one Engine: warm-up, then each method in turn with every
/// provider at once.
class Bench {
 public:
  Bench(const Plan& plan, asio::io_context& io, Engine& engine, const Clock& clock, Random& rng,
        StateStore* store)
      : plan_(plan),
        io_(io),
        engine_(engine),
        clock_(clock),
        rng_(rng),
        store_(store),
        warmups_(plan.providers.size()),
        tallies_(plan.methods.size(), std::vector<Tally>(plan.providers.size())),
        params_(plan.methods.size(), std::vector<std::string>(plan.providers.size())),
        heights_(plan.providers.size(), 0) {
    for (const auto* p : plan.providers)
      keys_.push_back(provider_key(plan.profile->name, plan.chain->name, *p));
  }

  asio::awaitable<void> run() {
    const auto providers = plan_.providers.size();
    progress_.begin("warming up connections", providers, steady_us(), 0);
    done_ = 0;
    {
      WaitGroup group(io_);
      for (std::size_t p = 0; p < providers; ++p) spawn(warm_up(p), group);
      co_await group.wait();
    }
    if (failure_) std::rethrow_exception(failure_);

    for (std::size_t m = 0; m < plan_.methods.size(); ++m) {
      for (std::size_t p = 0; p < providers; ++p)
        params_[m][p] = method_params(plan_.methods[m], warmups_[p].head);
      const auto start = steady_us();
      const std::int64_t deadline = plan_.duration_ms ? start + *plan_.duration_ms * 1000 : 0;
      for (auto& t : tallies_[m]) t.started_us = start;
      done_ = 0;
      progress_.begin(fmt::format("{} ({}/{})", plan_.methods[m], m + 1, plan_.methods.size()),
                      static_cast<std::size_t>(plan_.requests) * providers, start, deadline);
      WaitGroup group(io_);
      for (std::size_t p = 0; p < providers; ++p) {
        for (int k = 0; k < plan_.workers(); ++k) spawn(worker(m, p, deadline), group);
      }
      co_await group.wait();
      if (failure_) std::rethrow_exception(failure_);
    }
    progress_.clear();
  }

  [[nodiscard]] const std::vector<Warmup>& warmups() const { return warmups_; }
  /// [method][provider]
  [[nodiscard]] const std::vector<std::vector<Tally>>& tallies() const { return tallies_; }

 private:
  void spawn(asio::awaitable<void> work, WaitGroup& group) {
    group.add();
    asio::co_spawn(io_, std::move(work), [this, &group](std::exception_ptr e) {
      if (e && !failure_) failure_ = e;
      group.done();
    });
  }

  asio::awaitable<void> warm_up(std::size_t p) {
    const Provider& provider = *plan_.providers[p];
    const auto timeout = plan_.timeout_for(provider);
    auto& w = warmups_[p];
    Exchange first =
        co_await send_exchange(engine_, provider, kChainIdCall, timeout, clock_, *plan_.profile);
    w.latency_ms = first.latency_ms();
    w.connect_ms = static_cast<double>(first.http.connect_us) / 1000.0;
    w.ok = first.per_call.front().cls == OutcomeClass::success;
    if (const auto* reply = first.replies.front(); w.ok && reply != nullptr && reply->result) {
      w.chain_id = jsonrpc::parse_quantity(*reply->result);
    } else {
      w.message = message_of(first.per_call.front(), *plan_.profile);
    }
    if (first.http.error == TransportError::none) {
      // The provider is there: open the other connections the workers will use, so that no sample
      // pays for a connection set-up, and learn the head for eth_getLogs.
      WaitGroup group(io_);
      spawn(learn_head(p), group);
      for (int k = 1; k < plan_.workers(); ++k) spawn(open_connection(p), group);
      co_await group.wait();
    }
    progress_.tick(++done_);
  }

  asio::awaitable<void> learn_head(std::size_t p) {
    const Provider& provider = *plan_.providers[p];
    Exchange head = co_await send_exchange(engine_, provider, kBlockNumberCall,
                                           plan_.timeout_for(provider), clock_, *plan_.profile);
    if (const auto* reply = head.replies.front(); reply != nullptr && reply->result) {
      warmups_[p].head = jsonrpc::parse_quantity(*reply->result);
    }
  }

  asio::awaitable<void> open_connection(std::size_t p) {
    const Provider& provider = *plan_.providers[p];
    Exchange ex = co_await send_exchange(engine_, provider, kChainIdCall,
                                         plan_.timeout_for(provider), clock_, *plan_.profile);
    (void)ex;
  }

  asio::awaitable<void> worker(std::size_t m, std::size_t p, std::int64_t deadline_us) {
    const Provider& provider = *plan_.providers[p];
    const auto timeout = plan_.timeout_for(provider);
    Tally& tally = tallies_[m][p];
    const std::array<UpstreamCall, 1> calls = {UpstreamCall{plan_.methods[m], params_[m][p]}};
    for (;;) {
      if (deadline_us > 0 ? steady_us() >= deadline_us : tally.issued >= plan_.requests) break;
      ++tally.issued;
      Exchange ex =
          co_await send_exchange(engine_, provider, calls, timeout, clock_, *plan_.profile);
      tally.add(ex, *plan_.profile);
      if (store_ != nullptr) record(p, calls, ex);
      progress_.tick(++done_);
    }
    tally.finished_us = std::max(tally.finished_us, steady_us());
  }

  /// Records the exchange as the router records its own.
  void record(std::size_t p, std::span<const UpstreamCall> calls, const Exchange& ex) {
    const auto now = clock_.now_ms();
    record_exchange(*store_, plan_.profile->health, keys_[p], calls, ex, now, rng_.uniform());
    if (calls.front().method == "eth_blockNumber") record_height(p, ex, now);
  }

  /// Heights are learned from eth_blockNumber as the router learns them, but only from a provider
  /// whose warm-up confirmed the chain id: a provider of another chain would otherwise raise the
  /// high-water mark and make every other provider look lagging. A height already recorded in this
  /// run adds nothing.
  void record_height(std::size_t p, const Exchange& ex, std::int64_t now) {
    if (warmups_[p].chain_id != plan_.chain->chain_id) return;
    const auto* reply = ex.replies.front();
    if (ex.per_call.front().cls != OutcomeClass::success || reply == nullptr || !reply->result)
      return;
    if (auto h = jsonrpc::parse_quantity(*reply->result); h && *h > heights_[p]) {
      heights_[p] = *h;
      const auto& health = plan_.profile->health;
      store_->record(HeightEvent{keys_[p], Height{*h, now}}, health);
      store_->record(
          HighWaterEvent{chain_key(plan_.profile->name, *plan_.chain), Height{*h, now}},
          health);
    }
  }

  const Plan& plan_;
  asio::io_context& io_;
  Engine& engine_;
  const Clock& clock_;
  Random& rng_;
  StateStore* store_;  // null: nothing is recorded
  std::vector<std::string> keys_;
  std::vector<Warmup> warmups_;
  std::vector<std::vector<Tally>> tallies_;
  std::vector<std::vector<std::string>> params_;  // [method][provider]; the calls point into it
  std::vector<std::uint64_t> heights_;
  Progress progress_;
  std::size_t done_ = 0;
  std::exception_ptr failure_;
};

/// A bare number is seconds here (--duration S); "1500ms", "10s", "1m" as elsewhere.
std::optional<std::int64_t> parse_duration_s(std::string_view text) {
  if (!text.empty() && text.find_first_not_of("0123456789.") == std::string_view::npos) {
    return parse_duration_ms(std::string(text) + "s");  // bounded there
  }
  return parse_duration_ms(text);
}

/// Providers with latency figures first, fastest p50 first; the rest in profile order.
std::vector<std::size_t> order_by_p50(const std::vector<Figures>& figures) {
  std::vector<std::size_t> order(figures.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto key = [&](std::size_t i) {
    return figures[i].has_latency ? figures[i].p50 : std::numeric_limits<double>::infinity();
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return key(a) < key(b); });
  return order;
}

std::string errors_cell(const Tally& t) {
  std::string cell;
  for (auto cls : kErrorClasses) {
    const int n = t.errors[static_cast<std::size_t>(cls)];
    if (n == 0) continue;
    if (!cell.empty()) cell += ", ";
    cell += fmt::format("{} {}", n, class_name(cls));
  }
  return cell.empty() ? "-" : cell;
}

std::string per_s_cell(double v) {
  return v >= 100 ? fmt::format("{:.0f}", v) : fmt::format("{:.1f}", v);
}

std::string method_heading(const Plan& plan, std::string_view method) {
  if (plan.duration_ms) {
    return fmt::format("{} ({} per provider, concurrency {})", method,
                       format_ms(static_cast<double>(*plan.duration_ms)), plan.concurrency);
  }
  return fmt::format("{} ({} requests per provider, concurrency {})", method, plan.requests,
                     plan.workers());
}

std::string render_text(const Plan& plan, const Bench& bench) {
  std::string out =
      fmt::format("chain {} ({}), {} provider{}\n", plan.chain->name, plan.chain->chain_id,
                  plan.providers.size(), plan.providers.size() == 1 ? "" : "s");
  const auto& tallies = bench.tallies();
  for (std::size_t m = 0; m < plan.methods.size(); ++m) {
    std::vector<Figures> figures;
    for (const auto& t : tallies[m]) figures.push_back(figures_of(t));
    Table table({"PROVIDER", "OK", "ERRORS", "P50", "P90", "P99", "MIN", "MAX", "REQ/S"});
    std::string notes;
    for (auto p : order_by_p50(figures)) {
      const auto& t = tallies[m][p];
      const auto& f = figures[p];
      auto ms = [&](double v) { return f.has_latency ? format_ms(v) : std::string("-"); };
      table.add({plan.providers[p]->id, std::to_string(t.ok), errors_cell(t), ms(f.p50), ms(f.p90),
                 ms(f.p99), ms(f.min), ms(f.max), per_s_cell(f.per_s)});
      if (t.rate_limited > 0) {
        notes += fmt::format("  {}: rate-limited {} of {} (not counted as latency)\n",
                             plan.providers[p]->id, t.rate_limited, t.issued);
      }
    }
    out += "\n" + method_heading(plan, plan.methods[m]) + "\n";
    out += table.render();
    out += notes;
  }

  out += "\nwarm-up (connect), not counted above\n";
  Table warm({"PROVIDER", "LATENCY", "CONNECT", "STATUS"});
  for (std::size_t p = 0; p < plan.providers.size(); ++p) {
    const auto& w = bench.warmups()[p];
    warm.add({plan.providers[p]->id, format_ms(w.latency_ms),
              w.connect_ms > 0 ? format_ms(w.connect_ms) : "-", w.ok ? "ok" : w.message});
  }
  out += warm.render();

  // Each distinct message once per provider, over all methods.
  struct ErrorLine {
    std::size_t provider;
    std::string message;
    int count = 0;
    std::vector<std::string_view> methods;
  };
  std::vector<ErrorLine> lines;
  auto add_line = [&](std::size_t p, std::size_t m, const std::string& message, int n) {
    auto it = std::find_if(lines.begin(), lines.end(), [&](const ErrorLine& l) {
      return l.provider == p && l.message == message;
    });
    if (it == lines.end()) it = lines.insert(lines.end(), ErrorLine{p, message, 0, {}});
    it->count += n;
    if (it->methods.empty() || it->methods.back() != plan.methods[m])
      it->methods.push_back(plan.methods[m]);
  };
  for (std::size_t p = 0; p < plan.providers.size(); ++p) {
    for (std::size_t m = 0; m < plan.methods.size(); ++m) {
      const auto& t = tallies[m][p];
      for (const auto& [message, n] : t.messages) add_line(p, m, message, n);
      if (t.other_messages > 0) add_line(p, m, "other errors", t.other_messages);
    }
  }
  std::string errors;
  for (const auto& l : lines) {
    std::string where;
    if (plan.methods.size() == 1) {
      where = "";
    } else if (l.methods.size() == plan.methods.size()) {
      where = " (every method)";
    } else {
      for (auto m : l.methods) where += fmt::format("{}{}", where.empty() ? " (" : ", ", m);
      where += ")";
    }
    errors +=
        fmt::format("  {}: {} ×{}{}\n", plan.providers[l.provider]->id, l.message, l.count, where);
  }
  if (!errors.empty()) out += "\nerrors\n" + errors;
  return out;
}

std::string render_json(const Plan& plan, const Bench& bench, bool recorded) {
  json::Writer w;
  w.begin_object();
  w.key("chain");
  w.value(plan.chain->name);
  w.key("chain_id");
  w.value(static_cast<std::uint64_t>(plan.chain->chain_id));
  w.key("requests_per_method");
  if (plan.duration_ms)
    w.null();
  else
    w.value(plan.requests);
  w.key("duration_s");
  if (plan.duration_ms)
    w.value(static_cast<double>(*plan.duration_ms) / 1000.0);
  else
    w.null();
  w.key("concurrency");
  w.value(plan.concurrency);
  w.key("recorded");
  w.value(recorded);
  w.key("warmup");
  w.begin_array();
  for (std::size_t p = 0; p < plan.providers.size(); ++p) {
    const auto& wu = bench.warmups()[p];
    w.begin_object();
    w.key("provider");
    w.value(plan.providers[p]->id);
    w.key("latency_ms");
    w.value(wu.latency_ms);
    w.key("connect_ms");
    w.value(wu.connect_ms);
    w.key("ok");
    w.value(wu.ok);
    w.key("chain_id");
    if (wu.chain_id)
      w.value(*wu.chain_id);
    else
      w.null();
    if (!wu.ok) {
      w.key("message");
      w.value(wu.message);
    }
    w.end_object();
  }
  w.end_array();
  w.key("methods");
  w.begin_array();
  const auto& tallies = bench.tallies();
  for (std::size_t m = 0; m < plan.methods.size(); ++m) {
    std::vector<Figures> figures;
    for (const auto& t : tallies[m]) figures.push_back(figures_of(t));
    w.begin_object();
    w.key("method");
    w.value(plan.methods[m]);
    w.key("providers");
    w.begin_array();
    for (auto p : order_by_p50(figures)) {
      const auto& t = tallies[m][p];
      const auto& f = figures[p];
      w.begin_object();
      w.key("provider");
      w.value(plan.providers[p]->id);
      w.key("requests");
      w.value(t.issued);
      w.key("ok");
      w.value(t.ok);
      w.key("errors");
      w.begin_object();
      for (auto cls : kErrorClasses) {
        if (const int n = t.errors[static_cast<std::size_t>(cls)]; n > 0) {
          w.key(class_name(cls));
          w.value(n);
        }
      }
      w.end_object();
      w.key("rate_limited");
      w.value(t.rate_limited);
      auto ms = [&](const char* key, double v) {
        w.key(key);
        if (f.has_latency)
          w.value(v);
        else
          w.null();
      };
      ms("p50_ms", f.p50);
      ms("p90_ms", f.p90);
      ms("p99_ms", f.p99);
      ms("min_ms", f.min);
      ms("max_ms", f.max);
      w.key("requests_per_s");
      w.value(f.per_s, 1);
      w.key("messages");
      w.begin_array();
      for (const auto& [message, n] : t.messages) w.value(message);
      w.end_array();
      w.end_object();
    }
    w.end_array();
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return w.take();
}

}  // namespace

int run_bench(const BenchOptions& options) {
  auto profile = load_selected_profile(options.profile);
  if (!profile) {
    print_error(profile.error().message);
    return 2;
  }
  Plan plan;
  plan.profile = &*profile;
  plan.chain =
      options.chain.empty() ? &profile->chains.front() : profile->find_chain(options.chain);
  if (plan.chain == nullptr) {
    std::string names;
    for (const auto& c : profile->chains)
      names += fmt::format("{}{} ({})", names.empty() ? "" : ", ", c.name, c.chain_id);
    print_error(fmt::format("unknown chain '{}' in profile '{}' (chains: {})", options.chain,
                            profile->name, names));
    return 2;
  }
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
      return 2;
    }
    if (std::find(plan.providers.begin(), plan.providers.end(), p) == plan.providers.end())
      plan.providers.push_back(p);
  }
  if (options.providers.empty()) {
    for (const auto& p : chain.providers) plan.providers.push_back(&p);
  }
  if (plan.providers.empty()) {
    print_error(fmt::format("no provider to measure on chain {}", chain.name));
    return 2;
  }
  if (options.methods_given) {
    for (const auto& m : options.methods) {
      if (!m.empty() &&
          std::find(plan.methods.begin(), plan.methods.end(), m) == plan.methods.end()) {
        plan.methods.push_back(m);
      }
    }
    if (plan.methods.empty()) {
      print_error("--methods is empty (give e.g. --methods eth_blockNumber,eth_gasPrice)");
      return 2;
    }
  } else {
    plan.methods.assign(kDefaultMix.begin(), kDefaultMix.end());
  }
  plan.requests = options.requests;
  plan.concurrency = options.concurrency;
  if (!options.duration.empty()) {
    plan.duration_ms = parse_duration_s(options.duration);
    if (!plan.duration_ms || *plan.duration_ms <= 0) {
      print_error(
          fmt::format("bad --duration '{}' (use e.g. 10, 10s or 1500ms)", options.duration));
      return 2;
    }
  }
  if (!options.timeout.empty()) {
    plan.timeout_ms = parse_duration_ms(options.timeout);
    if (!plan.timeout_ms || *plan.timeout_ms <= 0) {
      print_error(fmt::format("bad --timeout '{}' (use e.g. 2500ms or 5s)", options.timeout));
      return 2;
    }
  }

  SystemClock clock;
  Random rng;
  std::optional<StateStore> store;
  if (!options.no_record) {
    if (auto path = resolve_state_path(options.state, options.no_state)) {
      store.emplace(std::move(path), clock, [](const std::string& m) { print_warning(m); });
      if (auto loaded = store->load(); !loaded) {
        print_error(loaded.error().message);
        return 2;
      }
    }
  }

  std::exception_ptr failure;
  std::string text;
  bool any_answer = false;
  {
    asio::io_context io(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE);  // one thread, no locks
    Engine engine(io);
    Bench bench(plan, io, engine, clock, rng, store ? &*store : nullptr);
    asio::co_spawn(io, bench.run(), [&](std::exception_ptr e) {
      failure = e;
      // The work is done; idle keep-alive connections may still be watched.
      io.stop();
    });
    io.run();
    if (!failure) {
      text = options.json ? render_json(plan, bench, store.has_value()) + "\n"
                          : render_text(plan, bench);
      for (std::size_t p = 0; p < plan.providers.size(); ++p) {
        const auto& w = bench.warmups()[p];
        if (w.chain_id && *w.chain_id != chain.chain_id) {
          print_warning(fmt::format("{} answers chain id {}, but chain {} has id {}",
                                    plan.providers[p]->id, *w.chain_id, chain.name,
                                    chain.chain_id));
        }
      }
      for (const auto& per_method : bench.tallies()) {
        for (const auto& t : per_method) any_answer |= t.answered > 0;
      }
    }
  }
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      print_error(fmt::format("internal error: {}", e.what()));
    }
    return 4;
  }
  if (store) {
    if (auto saved = store->save(); !saved)
      print_warning(fmt::format("state not saved: {}", saved.error().message));
  }
  write_stdout(text);
  if (!any_answer) {
    print_error(fmt::format("no provider answered on chain {}", chain.name));
    return 3;
  }
  return 0;
}

}  // namespace rpcroute::cli

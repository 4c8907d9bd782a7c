#pragma once
// The bench engine: load on every provider of a chain, method by method, and what each provider
// did. `rpcroute bench` renders the results; the sidecar or a test can run it the same way.
//
//   bench::Plan plan{.profile = &profile, .chain = &chain, .providers = {...}, .methods = {...}};
//   bench::Results r = co_await bench::run(plan, engine, clock, rng, &store);  // store: any
//   HealthSink
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rpcroute/asio_compat.hpp"
#include "rpcroute/clock.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/health/exchange.hpp"
#include "rpcroute/health/store.hpp"
#include "rpcroute/outcome.hpp"
#include "rpcroute/transport.hpp"

namespace rpcroute::bench {

/// The methods measured when none are given: reads every node serves, asked the same way on every
/// chain.
inline constexpr std::array<std::string_view, 7> kDefaultMix = {
    "eth_blockNumber",         "eth_chainId", "eth_getBlockByNumber", "eth_getBalance",
    "eth_getTransactionCount", "eth_getLogs", "eth_gasPrice",
};

/// Params of a method of the default mix; any other method gets none. eth_getLogs covers the last
/// four blocks up to `head` (the provider's head as the warm-up saw it), else the latest block.
[[nodiscard]] std::string params_for(std::string_view method, std::optional<std::uint64_t> head);

/// What to measure. The profile, chain and providers must outlive run().
struct Plan {
  const Profile* profile = nullptr;
  const Chain* chain = nullptr;
  std::vector<const Provider*> providers;
  std::vector<std::string> methods;
  /// [method]: the params given for it (`bench --call`, a file of requests); empty: params_for().
  std::vector<std::string> params;
  int requests = 20;                        // per provider and method, unless duration_ms is set
  std::optional<std::int64_t> duration_ms;  // each method runs this long
  int concurrency = 4;                      // requests in flight per provider
  std::optional<std::int64_t> timeout_ms;   // per request; default the provider's timeout_ms

  [[nodiscard]] std::int64_t timeout_for(const Provider& p) const {
    return timeout_ms.value_or(p.timeout_ms);
  }
  /// Workers per provider: no more than there are requests to send.
  [[nodiscard]] int workers() const {
    return duration_ms ? concurrency : std::min(concurrency, requests);
  }
  /// The params given for method m, or empty.
  [[nodiscard]] std::string_view given_params(std::size_t m) const {
    return m < params.size() ? std::string_view(params[m]) : std::string_view();
  }
};

/// The cold first request to a provider, before sampling.
struct Warmup {
  bool ok = false;
  double latency_ms = 0;
  double connect_ms = 0;
  std::optional<std::uint64_t> chain_id;
  std::optional<std::uint64_t> head;
  std::string message;  // why not ok
};

/// Error classes in the order they are listed.
inline constexpr std::array<OutcomeClass, 5> kErrorClasses = {
    OutcomeClass::provider_failure, OutcomeClass::rate_limited, OutcomeClass::capability,
    OutcomeClass::deterministic, OutcomeClass::unknown};
inline constexpr std::size_t kClassCount = static_cast<std::size_t>(OutcomeClass::unknown) + 1;
/// Distinct error messages kept per provider and method; more are counted as other_messages.
inline constexpr std::size_t kMaxMessages = 5;

/// curl says "... after 3 ms: ..." for each failed connect; without the time, equal failures group.
[[nodiscard]] std::string without_elapsed(std::string text);
/// The text an error is grouped by: the provider's message (else the outcome's name), scrubbed of
/// the profile's secrets (a provider may echo the request URL with its key), without elapsed times.
[[nodiscard]] std::string message_of(const Classification& c, const Profile& profile);

/// What one provider did on one method.
struct Tally {
  int issued = 0;
  int ok = 0;
  int answered = 0;  // success or a JSON-RPC error: the provider answered (errors: answered - ok)
  int rate_limited = 0;
  std::array<int, kClassCount> errors{};              // by OutcomeClass
  std::vector<double> latencies_ms;                   // successes only: an error is no latency
  std::vector<std::pair<std::string, int>> messages;  // the first few distinct ones, with counts
  int other_messages = 0;
  std::int64_t started_us = 0;  // Clock::mono_us()
  std::int64_t finished_us = 0;

  /// Most answers were JSON-RPC errors (issue 21: eth_call without params measured only
  /// -32602): the method was not measured, and the report says so loudly.
  [[nodiscard]] bool mostly_errors() const {
    return answered > 0 && 2 * (answered - ok) > answered;
  }

  /// Counts one exchange of one call.
  void add(const Exchange& ex, const Profile& profile);
  /// The same from its parts: `latency_ms` counts only for a success.
  void add(const Classification& c, double latency_ms, const Profile& profile);
};

/// A tally's latency figures.
struct Figures {
  bool has_latency = false;
  double p50 = 0, p90 = 0, p99 = 0, min = 0, max = 0;
  double per_s = 0;  // successful requests per second of the provider's wall time
};
[[nodiscard]] Figures figures_of(const Tally& t);

/// Indexes of `figures`: those with latency first, fastest p50 first; the rest in their order.
[[nodiscard]] std::vector<std::size_t> order_by_p50(const std::vector<Figures>& figures);

struct Results {
  std::vector<Warmup> warmups;              // [provider]
  std::vector<std::vector<Tally>> tallies;  // [method][provider]

  /// Whether any provider answered any request (a JSON-RPC error is an answer).
  [[nodiscard]] bool any_answer() const;
  /// The figures of every provider on method m, in provider order.
  [[nodiscard]] std::vector<Figures> figures(std::size_t m) const;
};

/// One distinct error message of one provider, over all methods: how often, and on which methods
/// (views into the plan's methods, in plan order).
struct ErrorLine {
  std::size_t provider = 0;  // index into the plan's providers
  std::string message;       // "other errors" for those past kMaxMessages
  int count = 0;
  std::vector<std::string_view> methods;
};
/// The error lines of a run, provider by provider, each message in the order first seen.
[[nodiscard]] std::vector<ErrorLine> error_lines(const Plan& plan, const Results& results);

/// One phase of a run: the warm-up (`method` empty, `total` the providers), or method `index` of
/// `count`, `total` requests over all providers, or until `deadline_us` (Clock::mono_us(); 0:
/// none).
struct Phase {
  std::string_view method;
  std::size_t index = 0;
  std::size_t count = 0;
  std::size_t total = 0;
  std::int64_t start_us = 0;
  std::int64_t deadline_us = 0;
};

/// Told how a run advances (a progress bar), on the loop's thread.
class Observer {
 public:
  virtual ~Observer() = default;
  virtual void begin(const Phase& phase) = 0;
  /// `done` requests (warm-ups) of the phase have finished.
  virtual void advance(std::size_t done) = 0;
  /// The last phase has finished.
  virtual void end() = 0;
};

/// Runs the plan on the calling coroutine's executor: a warm-up of each provider (the cold first
/// request, the head for eth_getLogs, the workers' connections opened), then each method in turn
/// with every provider at once, `plan.workers()` requests in flight per provider. With a sink,
/// every exchange is recorded as the router records its own, and heights are learned from
/// eth_blockNumber of providers whose warm-up confirmed the chain id. An exception from any request
/// ends the run with it, once the phase's requests are done. Timed runs and requests per second
/// follow clock.mono_us().
[[nodiscard]] asio::awaitable<Results> run(const Plan& plan, Transport& transport,
                                           const Clock& clock, Random& rng, HealthSink* sink,
                                           Observer* observer = nullptr);

}  // namespace rpcroute::bench

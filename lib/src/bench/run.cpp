// The load half of the bench engine: the warm-up, the workers, and recording what they saw.
#include <algorithm>
#include <array>
#include <exception>
#include <span>

#include "rpcroute/bench.hpp"
#include "rpcroute/jsonrpc.hpp"

namespace rpcroute::bench {

namespace {

constexpr std::array<UpstreamCall, 1> kChainIdCall = {UpstreamCall{"eth_chainId", "[]"}};
constexpr std::array<UpstreamCall, 1> kBlockNumberCall = {UpstreamCall{"eth_blockNumber", "[]"}};

/// Counts spawned coroutines down; wait() returns once all of them finished.
class WaitGroup {
 public:
  explicit WaitGroup(const asio::any_io_executor& ex)
      : signal_(ex, asio::steady_timer::time_point::max()) {}
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

/// Runs one plan on one executor: warm-up, then each method in turn with every provider at once.
class Runner {
 public:
  Runner(const Plan& plan, asio::any_io_executor ex, Transport& transport, const Clock& clock,
         Random& rng, HealthSink* sink, Observer* observer)
      : plan_(plan),
        ex_(std::move(ex)),
        transport_(transport),
        clock_(clock),
        rng_(rng),
        sink_(sink),
        observer_(observer),
        params_(plan.methods.size(), std::vector<std::string>(plan.providers.size())),
        heights_(plan.providers.size(), 0) {
    results_.warmups.resize(plan.providers.size());
    results_.tallies.assign(plan.methods.size(), std::vector<Tally>(plan.providers.size()));
    for (const auto* p : plan.providers)
      keys_.push_back(provider_key(plan.profile->name, plan.chain->name, *p));
  }

  asio::awaitable<void> run() {
    const auto providers = plan_.providers.size();
    Phase warm_up_phase;  // no method: the warm-up
    warm_up_phase.total = providers;
    warm_up_phase.start_us = clock_.mono_us();
    begin(warm_up_phase);
    {
      WaitGroup group(ex_);
      for (std::size_t p = 0; p < providers; ++p) spawn(warm_up(p), group);
      co_await group.wait();
    }
    if (failure_) std::rethrow_exception(failure_);
    for (std::size_t m = 0; m < plan_.methods.size(); ++m) {
      co_await measure(m);
      if (failure_) std::rethrow_exception(failure_);
    }
    if (observer_ != nullptr) observer_->end();
  }

  [[nodiscard]] Results take_results() { return std::move(results_); }

 private:
  void begin(const Phase& phase) {
    done_ = 0;
    if (observer_ != nullptr) observer_->begin(phase);
  }
  void advance() {
    ++done_;
    if (observer_ != nullptr) observer_->advance(done_);
  }

  void spawn(asio::awaitable<void> work, WaitGroup& group) {
    group.add();
    asio::co_spawn(ex_, std::move(work), [this, &group](const std::exception_ptr& e) {
      if (e && !failure_) failure_ = e;
      group.done();
    });
  }

  /// Method m on every provider at once, plan_.workers() requests in flight on each.
  asio::awaitable<void> measure(std::size_t m) {
    const auto providers = plan_.providers.size();
    for (std::size_t p = 0; p < providers; ++p) {
      const auto given = plan_.given_params(m);
      params_[m][p] = given.empty() ? params_for(plan_.methods[m], results_.warmups[p].head)
                                    : std::string(given);
    }
    const auto start = clock_.mono_us();
    const std::int64_t deadline = plan_.duration_ms ? start + *plan_.duration_ms * 1000 : 0;
    for (auto& t : results_.tallies[m]) t.started_us = start;
    begin(Phase{plan_.methods[m], m, plan_.methods.size(),
                static_cast<std::size_t>(plan_.requests) * providers, start, deadline});
    WaitGroup group(ex_);
    for (std::size_t p = 0; p < providers; ++p) {
      for (int k = 0; k < plan_.workers(); ++k) spawn(worker(m, p, deadline), group);
    }
    co_await group.wait();
  }

  asio::awaitable<void> warm_up(std::size_t p) {
    auto& w = results_.warmups[p];
    Exchange first = co_await send(p, kChainIdCall);
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
      WaitGroup group(ex_);
      spawn(learn_head(p), group);
      for (int k = 1; k < plan_.workers(); ++k) spawn(open_connection(p), group);
      co_await group.wait();
    }
    advance();
  }

  asio::awaitable<void> learn_head(std::size_t p) {
    Exchange head = co_await send(p, kBlockNumberCall);
    if (const auto* reply = head.replies.front(); reply != nullptr && reply->result) {
      results_.warmups[p].head = jsonrpc::parse_quantity(*reply->result);
    }
  }

  asio::awaitable<void> open_connection(std::size_t p) { (void)co_await send(p, kChainIdCall); }

  /// Not a coroutine of its own: no frame per request beyond send_exchange's.
  [[nodiscard]] asio::awaitable<Exchange> send(std::size_t p, std::span<const UpstreamCall> calls) {
    const Provider& provider = *plan_.providers[p];
    return send_exchange(transport_, provider, calls, plan_.timeout_for(provider), clock_,
                         *plan_.profile);
  }

  asio::awaitable<void> worker(std::size_t m, std::size_t p, std::int64_t deadline_us) {
    Tally& tally = results_.tallies[m][p];
    const std::array<UpstreamCall, 1> calls = {UpstreamCall{plan_.methods[m], params_[m][p]}};
    for (;;) {
      if (deadline_us > 0 ? clock_.mono_us() >= deadline_us : tally.issued >= plan_.requests) break;
      ++tally.issued;
      Exchange ex = co_await send(p, calls);
      tally.add(ex, *plan_.profile);
      if (sink_ != nullptr) record(p, calls, ex);
      advance();
    }
    tally.finished_us = std::max(tally.finished_us, clock_.mono_us());
  }

  /// Records the exchange as the router records its own, but an error answer as no latency
  /// sample (issue 21): a bench of a call every node refuses (-32602) would make them all look
  /// fast. Its attempt still counts for health.
  void record(std::size_t p, std::span<const UpstreamCall> calls, const Exchange& ex) {
    const auto now = clock_.now_ms();
    const bool error_answer = ex.per_call.front().outcome == Outcome::rpc_error;
    record_exchange(*sink_, plan_.profile->health, keys_[p],
                    error_answer ? std::span<const UpstreamCall>() : calls, ex, now,
                    rng_.uniform());
    if (calls.front().method == "eth_blockNumber") record_height(p, ex, now);
  }

  /// Heights are learned from eth_blockNumber as the router learns them, but only from a provider
  /// whose warm-up confirmed the chain id: a provider of another chain would otherwise raise the
  /// high-water mark and make every other provider look lagging. A height already recorded in this
  /// run adds nothing.
  void record_height(std::size_t p, const Exchange& ex, std::int64_t now) {
    if (results_.warmups[p].chain_id != plan_.chain->chain_id) return;
    const auto* reply = ex.replies.front();
    if (ex.per_call.front().cls != OutcomeClass::success || reply == nullptr || !reply->result)
      return;
    if (auto h = jsonrpc::parse_quantity(*reply->result); h && *h > heights_[p]) {
      heights_[p] = *h;
      const auto& health = plan_.profile->health;
      sink_->record(HeightEvent{keys_[p], Height{*h, now}}, health);
      sink_->record(HighWaterEvent{chain_key(plan_.profile->name, *plan_.chain), Height{*h, now}},
                    health);
    }
  }

  const Plan& plan_;
  asio::any_io_executor ex_;
  Transport& transport_;
  const Clock& clock_;
  Random& rng_;
  HealthSink* sink_;    // null: nothing is recorded
  Observer* observer_;  // may be null
  std::vector<std::string> keys_;
  std::vector<std::vector<std::string>> params_;  // [method][provider]; the calls point into it
  std::vector<std::uint64_t> heights_;
  Results results_;
  std::size_t done_ = 0;
  std::exception_ptr failure_;
};

}  // namespace

asio::awaitable<Results> run(const Plan& plan, Transport& transport, const Clock& clock,
                             Random& rng, HealthSink* sink, Observer* observer) {
  Runner runner(plan, co_await asio::this_coro::executor, transport, clock, rng, sink, observer);
  co_await runner.run();
  co_return runner.take_results();
}

}  // namespace rpcroute::bench

// Hedged reads (issue 19): when to hedge, and the race of a call's first attempt against a second
// one on the next candidate. Only reached when the profile or the caller asks for hedging: the
// default path of the executor pays one test of a flag.
#include "rpcroute/hedge.hpp"

#include <array>
#include <chrono>
#include <cmath>
#include <memory>
#include <vector>

#include "executor_parts.hpp"
#include "rpcroute/methods.hpp"
#include "rpcroute/metrics.hpp"

namespace rpcroute {

bool hedgeable(std::string_view method) {
  const MethodInfo& info = method_info(method);
  return !info.name.empty() && !info.replay_unsafe && info.filter == FilterRole::none;
}

const HedgeConfig* hedge_config(const Chain& chain, const MethodPolicy& policy,
                                std::optional<bool> requested) {
  static const HedgeConfig kDefaults;
  if (requested == false) return nullptr;
  const HedgeConfig* config = policy.hedge            ? &*policy.hedge
                              : chain.hedge           ? &*chain.hedge
                              : requested.has_value() ? &kDefaults
                                                      : nullptr;
  // --hedge over a profile that turned it off for this method or chain: the caller's word wins.
  if (config != nullptr && !config->enabled) return requested == true ? &kDefaults : nullptr;
  return config;
}

bool profile_hedges(const Profile& profile) {
  for (const auto& c : profile.chains) {
    if (c.hedge && c.hedge->enabled) return true;
  }
  for (const auto& o : profile.routing.method_overrides) {
    if (o.policy.hedge && o.policy.hedge->enabled) return true;
  }
  return false;
}

std::int64_t hedge_delay_ms(const HedgeConfig& config, const std::deque<Sample>* samples,
                            std::int64_t now_ms, std::int64_t window_ms) {
  if (samples == nullptr) return config.max_ms;
  thread_local std::vector<double> latencies;  // hedged calls only; no allocation once grown
  latencies.clear();
  for (auto it = samples->rbegin(); it != samples->rend(); ++it) {
    if (it->t_ms < now_ms - window_ms) break;  // time-ordered, newest last
    if (it->outcome == Outcome::success || it->outcome == Outcome::rpc_error)
      latencies.push_back(static_cast<double>(it->latency_us) / 1000.0);
  }
  if (latencies.empty()) return config.max_ms;
  const auto q =
      static_cast<std::int64_t>(std::ceil(quantile_in_place(latencies, config.quantile)));
  return std::clamp(q, config.min_ms, config.max_ms);
}

std::string_view hedge_name(CallOutcome::Hedge h) {
  switch (h) {
    case CallOutcome::Hedge::first_won:
      return "first";
    case CallOutcome::Hedge::hedge_won:
      return "hedge";
    case CallOutcome::Hedge::neither:
      return "neither";
    case CallOutcome::Hedge::none:
      break;
  }
  return "";
}

namespace {

using SteadyClock = std::chrono::steady_clock;

/// The two attempts of one call in flight: their answers as they come, and a timer that wakes the
/// executor when one does. Shared with the attempts' coroutines, which the executor waits for.
struct Race {
  explicit Race(const asio::any_io_executor& ex) : wake(ex) {}
  asio::steady_timer wake;
  std::array<Cancellation, 2> cancel;
  std::array<std::optional<HttpResponse>, 2> answer;
  int first = -1;  // the attempt that ended first

  [[nodiscard]] bool done(int slot) const {
    return slot < 0 ? first >= 0 : answer[static_cast<std::size_t>(slot)].has_value();
  }
  HttpResponse take(int slot) { return std::move(*answer[static_cast<std::size_t>(slot)]); }
};

asio::awaitable<void> run_attempt(Transport& transport, std::shared_ptr<Race> race, int slot,
                                  HttpRequest request) {
  HttpResponse r;
  // Cancelled before it started (the other attempt won within the same turn of the loop): the
  // transports only look at a cancellation requested while they run.
  if (race->cancel[static_cast<std::size_t>(slot)].requested()) {
    r.error = TransportError::cancelled;
  } else {
    r = co_await transport.perform(std::move(request));
  }
  race->answer[static_cast<std::size_t>(slot)] = std::move(r);
  if (race->first < 0) race->first = slot;
  race->wake.cancel();
}

void start_attempt(Transport& transport, const std::shared_ptr<Race>& race, int slot,
                   HttpRequest request) {
  request.cancel = &race->cancel[static_cast<std::size_t>(slot)];
  asio::co_spawn(race->wake.get_executor(), run_attempt(transport, race, slot, std::move(request)),
                 asio::detached);
}

/// Until attempt `slot` (-1: either) has ended, or `until`. Every attempt ends by its own timeout.
asio::awaitable<void> wait_for(Race& race, int slot, SteadyClock::time_point until) {
  while (!race.done(slot) && SteadyClock::now() < until) {
    race.wake.expires_at(until);
    boost::system::error_code ec;
    co_await race.wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

SteadyClock::time_point forever() { return SteadyClock::now() + std::chrono::hours(24); }

/// Stops attempt `slot` and waits until its coroutine is over (the transport answers a cancelled
/// transfer at once).
asio::awaitable<void> cancel_and_wait(Race& race, int slot) {
  race.cancel[static_cast<std::size_t>(slot)].request();
  co_await wait_for(race, slot, forever());
}

/// An answer that ends the call: a result, or an error the node would give anywhere.
bool settles_call(const Exchange& ex) {
  const OutcomeClass cls = ex.per_call.front().cls;
  return cls == OutcomeClass::success || cls == OutcomeClass::deterministic;
}

/// The latency samples of the round's provider for its method, or null.
const std::deque<Sample>* samples_of(const HealthStore& store, const Executor::Round& round) {
  const ProviderState* ps = store.provider(round.cand.key);
  if (ps == nullptr) return nullptr;
  const std::string method = sample_method(round.leader->call->method, round.cand.transport);
  auto m = ps->methods.find(method_slot(ps->methods, method));
  return m == ps->methods.end() ? nullptr : &m->second;
}

/// The hedge of `item`: its next candidate, as a round of its own.
void hedge_round_for(Executor::Item& item, std::int64_t remaining_ms, Executor::Round& second) {
  second.leader = &item;
  second.cand = item.plan.candidates[item.next + 1];
  second.group.push_back(&item);
  second.full_timeout =
      attempt_timeout_ms(item.call->method, *second.cand.provider, item.plan.policy);
  second.attempt_timeout = std::min<std::int64_t>(second.full_timeout, remaining_ms);
}

}  // namespace

const HedgeConfig* Executor::hedge_for(const Run& run, const Round& round) const {
  if (!run.hedging || round.group.size() != 1) return nullptr;
  const Item& item = *round.leader;
  if (!hedgeable(item.call->method)) return nullptr;
  const HedgeConfig* config = hedge_config(run.chain, item.plan.policy, run.options.hedge);
  if (config == nullptr) return nullptr;
  // Room for a second attempt: another candidate, within the attempt limit, and not a breaker
  // trial (a half-open provider's one trial is not spent on a hedge).
  const std::size_t next = item.next + 1;
  if (next >= item.plan.candidates.size()) return nullptr;
  if (static_cast<std::int64_t>(item.out.attempts.size()) + 2 > run.max_attempts) return nullptr;
  if (item.plan.candidates[next].breaker != BreakerState::closed) return nullptr;
  // `call`'s chain id check asks a hedge's provider in its batch, which it must take.
  if (run.options.verify_chain_id && chain_unknown(item.plan.candidates[next]) &&
      !asks_in_batch(item.plan.candidates[next]))
    return nullptr;
  return config;
}

asio::awaitable<void> Executor::hedged_round(const Run& run, Round& first, HttpRequest request,
                                             const HedgeConfig& config) {
  Item& item = *first.leader;
  auto race = std::make_shared<Race>(co_await asio::this_coro::executor);
  // The client leaving stops both attempts (each has its own Cancellation, the transport's hook).
  Cancellation* client = run.options.cancel;
  if (client != nullptr) {
    client->on_request([r = race.get()] {
      r->cancel[0].request();
      r->cancel[1].request();
    });
  }
  start_attempt(transport_, race, 0, std::move(request));

  HedgeBudget& budget = hedge_budgets_[HedgeKey{&run.chain, config.quantile, config.min_ms,
                                                config.max_ms, config.max_extra}];
  budget.earn(config.max_extra);
  const auto delay = hedge_delay_ms(config, samples_of(store_, first), clock_.now_ms(),
                                    profile_.strategies.fastest.window_ms);
  co_await wait_for(*race, 0, SteadyClock::now() + std::chrono::milliseconds(delay));

  const auto remaining_ms = (run.deadline_us - clock_.mono_us()) / 1000;
  const bool client_left = client != nullptr && client->requested();
  if (race->done(0) || client_left || remaining_ms <= 0 || !budget.spend()) {
    co_await wait_for(*race, 0, forever());
    if (client != nullptr) client->clear_hook();
    settle_round(run, first, race->take(0));
    co_return;
  }

  // The hedge: the same call on the next candidate, as a round of its own.
  Round second;
  hedge_round_for(item, remaining_ms, second);
  second.chain_check = run.options.verify_chain_id && chain_unknown(second.cand);
  start_attempt(transport_, race, 1, start_round(run, second));
  co_await wait_for(*race, -1, forever());

  // The loser is cancelled and waited for; its answer is neither judged nor recorded.
  if (client != nullptr && client->requested()) {  // next_round ends the call
    co_await wait_for(*race, 1 - race->first, forever());
    forget_round(first);
    forget_round(second);
  } else if (race->first == 0) {
    settle_round(run, first, race->take(0));
    if (item.done) {
      co_await cancel_and_wait(*race, 1);
      forget_round(second);
    } else {  // the first failed: the hedge is the next attempt
      co_await wait_for(*race, 1, forever());
      settle_round(run, second, race->take(1));
    }
  } else {
    HttpResponse answer = race->take(1);
    Exchange ex;
    const bool cancelled = answer.error == TransportError::cancelled;
    if (!cancelled) ex = classify_round(run, second, std::move(answer));
    // `call`'s chain id check: a hedge answered from another chain settles nothing.
    const bool elsewhere = !cancelled && second.chain_check && other_chain(run, second, ex);
    if (!cancelled && !elsewhere && settles_call(ex)) {
      ++item.next;  // judged as the next candidate's answer
      settle_exchange(run, second, ex, true);
      co_await cancel_and_wait(*race, 0);
      forget_round(first);
    } else {  // the hedge failed: the first attempt decides, the hedge's answer comes after it
      co_await wait_for(*race, 0, forever());
      settle_round(run, first, race->take(0));
      if (cancelled) {
        forget_round(second);
      } else if (elsewhere) {  // if the first failed, the next round skips it (check_chain)
        settle_other_chain(second, ex);
      } else {
        settle_exchange(run, second, ex, !item.done);
      }
    }
  }
  if (client != nullptr) client->clear_hook();
  const std::string& by = item.out.provider;
  item.out.hedge = !item.done || by.empty()         ? CallOutcome::Hedge::neither
                   : by == second.cand.provider->id ? CallOutcome::Hedge::hedge_won
                   : by == first.cand.provider->id  ? CallOutcome::Hedge::first_won
                                                    : CallOutcome::Hedge::neither;
}

}  // namespace rpcroute

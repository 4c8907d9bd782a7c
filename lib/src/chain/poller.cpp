#include "rpcroute/poller.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "rpcroute/blocks.hpp"
#include "rpcroute/jsonrpc.hpp"
#include "rpcroute/probe.hpp"

namespace rpcroute {

std::int64_t poll_interval_ms(const Chain& chain) {
  return std::clamp<std::int64_t>(chain.block_time_ms, 1'000, 30'000);
}

std::int64_t poll_timeout_ms(const Provider& provider, std::int64_t interval_ms) {
  return std::min<std::int64_t>(
      {provider.timeout_ms, 5'000, std::max<std::int64_t>(interval_ms, 2'000)});
}

std::int64_t poll_backoff_ms(std::int64_t wait_ms, std::int64_t interval_ms,
                             const HealthConfig& health) {
  const auto cap =
      std::clamp<std::int64_t>(health.circuit_breaker.recovery_timeout_ms, interval_ms, 60'000);
  return std::min<std::int64_t>(wait_ms * 2, cap);
}

std::int64_t recovery_backoff_ms(std::int64_t wait_ms) {
  return std::min(wait_ms * 2, kRecoveryMaxMs);
}

std::int64_t liveness_window_ms(const Chain& chain, const Provider& provider) {
  const auto interval = poll_interval_ms(chain);
  return 3 * interval + poll_timeout_ms(provider, interval);
}

std::string liveness_problem(const ProviderState* state, const Chain& chain,
                             const Provider& provider, std::int64_t now_ms, bool fresh) {
  if (state == nullptr || state->last_ok_ms == 0) return "has not answered yet";
  const auto breaker = state->breaker.effective_state(now_ms);
  if (breaker == BreakerState::open) {
    return fmt::format("breaker open ({}), half-opens in {} ms", state->breaker.reason,
                       state->breaker.retry_in_ms(now_ms));
  }
  if (breaker == BreakerState::half_open)
    return fmt::format("breaker half-open ({}): not up until a probe succeeds",
                       state->breaker.reason);
  if (state->last_failed_ms > state->last_ok_ms)
    return fmt::format("its last exchange failed ({}), {} ms ago", state->breaker.reason,
                       std::max<std::int64_t>(0, now_ms - state->last_failed_ms));
  const auto window = liveness_window_ms(chain, provider);
  if (fresh && now_ms - state->last_ok_ms > window)
    return fmt::format("no answer for {} ms (more than {} ms)", now_ms - state->last_ok_ms, window);
  return {};
}

std::string wrong_chain_warning(const HealthView& view, const Profile& profile,
                                const Chain& chain) {
  std::vector<std::string> seen;
  for (const auto& p : chain.providers) {
    const ProviderState* ps = view.provider(provider_key(profile.name, chain.name, p));
    if (ps == nullptr || ps->probe.chain_id == 0 || ps->probe.chain_id == chain.chain_id) return {};
    seen.push_back(fmt::format("{} is on {}", p.id, ps->probe.chain_id));
  }
  if (seen.empty()) return {};
  return fmt::format(
      "every provider of chain '{}' is on another chain than the profile's {} ({}): its requests "
      "will be refused and /healthz is 503 until the profile or the providers are fixed",
      chain.name, chain.chain_id, fmt::join(seen, ", "));
}

bool chain_id_confirmed(const HealthView& view, const Profile& profile, const Chain& chain) {
  return std::any_of(chain.providers.begin(), chain.providers.end(), [&](const Provider& p) {
    const ProviderState* ps = view.provider(provider_key(profile.name, chain.name, p));
    return ps != nullptr && ps->probe.chain_id == chain.chain_id;
  });
}

bool no_provider_usable(const HealthView& view, const Profile& profile, const Chain& chain,
                        std::int64_t now_ms) {
  return std::all_of(chain.providers.begin(), chain.providers.end(), [&](const Provider& p) {
    const ProviderState* state = view.provider(provider_key(profile.name, chain.name, p));
    return state != nullptr && state->breaker.effective_state(now_ms) == BreakerState::open;
  });
}

asio::awaitable<bool> poll_head_once(const PollTarget& t, std::int64_t timeout_ms,
                                     RecordOptions options) {
  static constexpr std::string_view kParams = "[]";
  const std::vector<UpstreamCall> calls{{"eth_blockNumber", kParams}};
  Exchange ex =
      co_await send_exchange(t.transport, t.provider, calls, timeout_ms, t.clock, t.profile);
  const auto now = t.clock.now_ms();
  const auto key = provider_key(t.profile.name, t.chain.name, t.provider);
  record_exchange(t.store, t.profile.health, key, calls, ex, now, t.rng.uniform(), options);
  if (ex.per_call[0].cls != OutcomeClass::success) co_return false;
  if (auto h = jsonrpc::parse_quantity(*ex.replies[0]->result)) {
    observe_height(t.store, t.profile, t.chain, t.provider, Height{*h, now}, t.rng.uniform());
    // A height the chain has reached raises the never-backwards mark, as an answer to a client
    // does, when the head rule believes it.
    (void)raise_mark(t.store, t.profile, t.chain, t.provider, Height{*h, now});
  }
  co_return true;
}

std::optional<std::uint64_t> block_object_number(std::string_view block_json) {
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(block_json.data(), block_json.size(), true).get(root)) return std::nullopt;
  simdjson::dom::element number;
  if (root.at_key("number").get(number)) return std::nullopt;  // null, or not a block
  std::string_view s;
  if (number.get_string().get(s) || s.size() > 20) return std::nullopt;
  char quoted[24];
  quoted[0] = '"';
  std::memcpy(quoted + 1, s.data(), s.size());
  quoted[s.size() + 1] = '"';
  return jsonrpc::parse_quantity(std::string_view(quoted, s.size() + 2));
}

bool FinalityPace::due(std::uint64_t head) const {
  if (!asked) return true;
  const auto wait = kFinalityEveryPolls << std::min(misses, 3);
  return (misses == 0 && head >= last_head + kFinalityStepBlocks) || polls >= wait;
}

void FinalityPace::done(std::uint64_t head, bool answered) {
  asked = true;
  last_head = head;
  polls = 0;
  misses = answered ? 0 : misses + 1;
}

asio::awaitable<bool> poll_finality_once(const PollTarget& t, std::int64_t timeout_ms) {
  // Two single calls, not a batch: not every provider takes batches. Not recorded as traffic: the
  // head poll already judges the provider, and a node that does not know a tag is not failing.
  static constexpr std::string_view kSafe = R"(["safe",false])";
  static constexpr std::string_view kFinalized = R"(["finalized",false])";
  Height safe;
  Height finalized;
  bool any = false;
  for (auto [params, mark] : {std::pair{kSafe, &safe}, {kFinalized, &finalized}}) {
    const std::array calls{UpstreamCall{"eth_getBlockByNumber", params}};
    Exchange ex =
        co_await send_exchange(t.transport, t.provider, calls, timeout_ms, t.clock, t.profile);
    if (ex.per_call[0].cls != OutcomeClass::success || !ex.replies[0]->result) continue;
    if (auto n = block_object_number(*ex.replies[0]->result)) {
      *mark = Height{*n, t.clock.now_ms()};
      any = true;
    }
  }
  // Believed only as far as the provider's head is, judged when it is recorded (the head rule).
  if (!any) co_return false;
  if (auto event = judge_finality(t.store, t.profile, t.chain, t.provider, safe, finalized, t.votes,
                                  t.clock.now_ms()))
    t.store.record(std::move(*event), t.profile.health);
  co_return true;
}

namespace {
asio::awaitable<void> sleep_ms(asio::steady_timer& timer, std::int64_t ms) {
  timer.expires_after(std::chrono::milliseconds(ms));
  boost::system::error_code ec;
  co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
}

// Sleeps `ms`, in slices of kWatchSliceMs when `watch`: wakes early once traffic saw the provider
// fail after `since_ms` (its last poll), so that the failure is confirmed or cleared at once.
asio::awaitable<void> sleep_watching(asio::steady_timer& timer, std::int64_t ms, bool watch,
                                     const HealthView& view, const std::string& key,
                                     std::int64_t since_ms, const bool& stop) {
  if (!watch) {
    co_await sleep_ms(timer, ms);
    co_return;
  }
  for (std::int64_t left = ms; left > 0 && !stop; left -= kWatchSliceMs) {
    co_await sleep_ms(timer, std::min(left, kWatchSliceMs));
    const ProviderState* state = view.provider(key);
    if (state != nullptr && state->last_failed_ms > since_ms) co_return;
  }
}
}  // namespace

asio::awaitable<void> poll_provider(PollTarget t, const bool& stop) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  const auto interval = poll_interval_ms(t.chain);
  const auto timeout = poll_timeout_ms(t.provider, interval);
  ProbeReport first = co_await probe_provider(t.transport, t.profile, t.chain, t.provider, &t.store,
                                              t.clock, t.rng, timeout);
  // The full probe is what learns the chain id: until one has (a provider down or slow at start,
  // a busy machine), each poll is a full probe again — else a provider that comes up on the wrong
  // chain would never be excluded.
  bool chain_known = first.chain_id.has_value();
  bool was_up = first.reachable;
  FinalityPace finality;
  std::int64_t wait = first.reachable ? interval : interval * 2;
  const auto key = provider_key(t.profile.name, t.chain.name, t.provider);
  std::int64_t polled_ms = t.clock.now_ms();
  while (!stop) {
    co_await sleep_watching(timer, wait, was_up, t.store, key, polled_ms, stop);
    if (stop) break;
    bool answered = false;
    if (chain_known) {
      answered = co_await poll_head_once(t, timeout);
      ++finality.polls;
      const ProviderState* ps = t.store.provider(key);
      const std::uint64_t head = ps != nullptr ? ps->height.block : 0;
      if (answered && finality.due(head) && !stop)
        finality.done(head, co_await poll_finality_once(t, timeout));
    } else {
      const ProbeReport again = co_await probe_provider(t.transport, t.profile, t.chain, t.provider,
                                                        &t.store, t.clock, t.rng, timeout);
      chain_known = again.chain_id.has_value();
      answered = again.reachable;
    }
    polled_ms = t.clock.now_ms();
    // Probe on failure: a provider that was up and failed is asked again soon, not after a whole
    // interval; one that stays down backs off.
    if (answered)
      wait = interval;
    else
      wait = was_up ? kWatchSliceMs : poll_backoff_ms(wait, interval, t.profile.health);
    was_up = answered;
  }
}

asio::awaitable<void> recover_provider(PollTarget t, const bool& stop) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  const auto timeout = std::min<std::int64_t>(t.provider.timeout_ms, 2'000);
  std::int64_t wait = kRecoveryFirstMs;
  while (!stop) {
    co_await sleep_ms(timer, wait);
    if (stop) break;
    if (!no_provider_usable(t.store, t.profile, t.chain, t.clock.now_ms())) {
      wait = kRecoveryFirstMs;  // the poller and half-open trials take care of it
      continue;
    }
    const bool answered = co_await poll_head_once(t, timeout, {.trial = true});
    wait = answered ? kRecoveryFirstMs : recovery_backoff_ms(wait);
  }
}

}  // namespace rpcroute

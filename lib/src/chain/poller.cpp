#include "rpcroute/poller.hpp"

#include <algorithm>
#include <chrono>
#include <string_view>
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
  }
  co_return true;
}

namespace {
asio::awaitable<void> sleep_ms(asio::steady_timer& timer, std::int64_t ms) {
  timer.expires_after(std::chrono::milliseconds(ms));
  boost::system::error_code ec;
  co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
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
  std::int64_t wait = first.reachable ? interval : interval * 2;
  while (!stop) {
    co_await sleep_ms(timer, wait);
    if (stop) break;
    bool answered = false;
    if (chain_known) {
      answered = co_await poll_head_once(t, timeout);
    } else {
      const ProbeReport again = co_await probe_provider(t.transport, t.profile, t.chain, t.provider,
                                                        &t.store, t.clock, t.rng, timeout);
      chain_known = again.chain_id.has_value();
      answered = again.reachable;
    }
    wait = answered ? interval : poll_backoff_ms(wait, interval, t.profile.health);
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

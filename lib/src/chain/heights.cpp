#include <fmt/format.h>

#include "rpcroute/blocks.hpp"

namespace rpcroute {

void observe_height(StateStore& store, const Profile& profile, const Chain& chain, const Provider& provider,
                    const Height& height, double jitter, std::string_view key) {
  std::string computed;
  if (key.empty()) key = computed = provider_key(profile.name, chain.name, provider);
  store.record(HeightEvent{std::string(key), height}, profile.health);
  judge_lag(store, profile, chain, provider, jitter, key);
}

void judge_lag(StateStore& store, const Profile& profile, const Chain& chain, const Provider& provider, double jitter,
               std::string_view key) {
  std::string computed;
  if (key.empty()) key = computed = provider_key(profile.name, chain.name, provider);
  const auto& state = store.state();
  auto it = state.providers.find(key);
  if (it == state.providers.end() || it->second.height.t_ms == 0) return;
  const auto& ps = it->second;
  const Height height = ps.height;
  if (ps.lag.t_ms > height.t_ms) return;  // judged on a newer observation already
  const auto head = best_known_height(state, profile, chain, height.t_ms);
  const bool behind = head > height.block + chain.max_lag_blocks;
  if (!behind) {
    if (ps.lag.behind_since_ms != 0) store.record(LagEvent{std::string(key), LagMark{0, height.t_ms}}, profile.health);
    return;
  }
  const auto since = ps.lag.behind_since_ms != 0 ? ps.lag.behind_since_ms : height.t_ms;
  store.record(LagEvent{std::string(key), LagMark{since, height.t_ms}}, profile.health);
  const auto behind_for = height.t_ms - since;
  if (behind_for < chain.lag_trip_ms) return;
  if (ps.breaker.effective_state(height.t_ms) == BreakerState::open) return;
  AttemptEvent trip;
  trip.key.assign(key);
  trip.t_ms = height.t_ms;
  trip.cls = OutcomeClass::provider_failure;
  trip.reason = fmt::format("lag: {} blocks behind for {:.1f}s (max_lag_blocks {}, lag_trip_ms {})", head - height.block,
                            static_cast<double>(behind_for) / 1000.0, chain.max_lag_blocks, chain.lag_trip_ms);
  trip.jitter = jitter;
  trip.trip = true;
  store.record(std::move(trip), profile.health);
}

}  // namespace rpcroute

// A process's pending changes (PendingEvents): how events are compacted while they wait for a save,
// and how they are replayed onto whatever the state file holds by then — the same replay for a
// journal record.
#include <algorithm>

#include "rpcroute/state.hpp"

namespace rpcroute {

namespace {

/// Attempts kept per provider between saves: more than any breaker needs to replay its
/// transitions (thresholds are small), far fewer than a busy sidecar makes in a few seconds.
constexpr std::size_t kPendingAttempts = 64;

}  // namespace

// One branch per event kind, each a few lines keeping its event as the journal replays it (like
// apply_event); split by kind, it would be a dozen one-use functions.
// NOLINTNEXTLINE(readability-function-size)
void PendingEvents::add(Event event, const HealthConfig& health) {
  ++count;
  std::visit(
      [&](auto&& e) {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, AttemptEvent>) {
          auto& pp = providers[e.key];
          pp.health = health;
          pp.attempts.push_back(std::forward<decltype(e)>(e));
          if (pp.attempts.size() > kPendingAttempts) pp.attempts.pop_front();
        } else if constexpr (std::is_same_v<T, SampleEvent>) {
          auto& pp = providers[e.key];
          pp.health = health;
          const auto slot = method_slot(pp.samples, e.method);
          auto m = pp.samples.find(slot);
          if (m == pp.samples.end())
            m = pp.samples.emplace(std::string(slot), std::deque<Sample>{}).first;
          auto& samples = m->second;
          samples.push_back(e.sample);
          if (samples.size() > kMaxSamplesPerMethod) samples.pop_front();
        } else if constexpr (std::is_same_v<T, HeightEvent>) {
          auto& pp = providers[e.key];
          pp.health = health;
          if (!pp.height || e.height.t_ms >= pp.height->t_ms) pp.height = e.height;
        } else if constexpr (std::is_same_v<T, ProbeEvent>) {
          auto& pp = providers[e.key];
          pp.health = health;
          pp.probe = e.findings;
        } else if constexpr (std::is_same_v<T, QuotaEvent>) {
          auto& pp = providers[e.key];
          pp.health = health;
          if (pp.quota) {
            pp.quota->taken += e.taken;
            pp.quota->t_ms = std::max(pp.quota->t_ms, e.t_ms);
            pp.quota->quota = e.quota;
          } else {
            pp.quota = e;
          }
        } else if constexpr (std::is_same_v<T, LagEvent>) {
          auto& pp = providers[e.key];
          pp.health = health;
          if (!pp.lag || e.mark.t_ms >= pp.lag->t_ms) pp.lag = e.mark;
        } else if constexpr (std::is_same_v<T, ArchivalEvent>) {
          auto& pp = providers[e.key];
          pp.health = health;
          if (!pp.archival || e.seen.t_ms >= pp.archival->t_ms) pp.archival = e.seen;
        } else if constexpr (std::is_same_v<T, LogLimitEvent>) {
          auto& pp = providers[e.key];
          pp.health = health;
          if (!pp.log_limit || e.limit.t_ms >= pp.log_limit->t_ms) pp.log_limit = e.limit;
        } else if constexpr (std::is_same_v<T, CordonEvent>) {
          auto& pp = providers[e.key];
          pp.health = health;
          if (!pp.cordon || newer_cordon(e.cordon, *pp.cordon)) pp.cordon = e.cordon;
        } else if constexpr (std::is_same_v<T, HighWaterEvent>) {
          auto [it, fresh] = high_water.try_emplace(e.chain_key, e);
          auto& hw = it->second;
          if (!fresh) {
            if (e.reset) {
              hw = e;
            } else if (e.height.block > hw.height.block ||
                       (e.height.block == hw.height.block && e.height.t_ms > hw.height.t_ms)) {
              hw.height = e.height;
            }
          }
        } else if constexpr (std::is_same_v<T, FinalityEvent>) {
          auto [it, fresh] = finality.try_emplace(e.chain_key, e);
          auto& f = it->second;
          if (!fresh) {
            if (e.safe.block >= f.safe.block && e.safe.t_ms > 0) f.safe = e.safe;
            if (e.finalized.block >= f.finalized.block && e.finalized.t_ms > 0)
              f.finalized = e.finalized;
            f.head = std::max(f.head, e.head);
          }
        } else if constexpr (std::is_same_v<T, CursorEvent>) {
          cursors[e.chain_key] += e.advance;
        } else if constexpr (std::is_same_v<T, FilterEvent>) {
          if (!storable_filter_key(e.key)) return;
          if (filters.size() >= kMaxFilters && filters.find(e.key) == filters.end()) {
            filters.erase(std::min_element(
                filters.begin(), filters.end(),
                [](const auto& a, const auto& b) { return a.second.t_ms < b.second.t_ms; }));
          }
          filters[e.key] = e.pin;
        }
      },
      std::move(event));
}

void PendingEvents::replay(State& onto) const {
  for (const auto& [key, pp] : providers) {
    for (const auto& a : pp.attempts) apply_event(onto, a, pp.health);
    for (const auto& [method, samples] : pp.samples) {
      for (const auto& sample : samples)
        apply_event(onto, SampleEvent{key, method, sample}, pp.health);
    }
    if (pp.height) apply_event(onto, HeightEvent{key, *pp.height}, pp.health);
    if (pp.probe) apply_event(onto, ProbeEvent{key, *pp.probe}, pp.health);
    if (pp.quota) apply_event(onto, *pp.quota, pp.health);
    if (pp.lag) apply_event(onto, LagEvent{key, *pp.lag}, pp.health);
    if (pp.archival) apply_event(onto, ArchivalEvent{key, *pp.archival}, pp.health);
    if (pp.cordon) apply_event(onto, CordonEvent{key, *pp.cordon}, pp.health);
    if (pp.log_limit) apply_event(onto, LogLimitEvent{key, *pp.log_limit}, pp.health);
  }
  const HealthConfig none;
  for (const auto& [key, hw] : high_water) apply_event(onto, hw, none);
  for (const auto& [key, f] : finality) apply_event(onto, f, none);
  for (const auto& [key, n] : cursors) apply_event(onto, CursorEvent{key, n}, none);
  for (const auto& [key, pin] : filters) apply_event(onto, FilterEvent{key, pin}, none);
}

}  // namespace rpcroute

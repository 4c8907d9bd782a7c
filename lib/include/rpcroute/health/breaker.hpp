#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "rpcroute/config.hpp"
#include "rpcroute/outcome.hpp"

namespace rpcroute {

enum class BreakerState { closed, open, half_open };
[[nodiscard]] std::string_view breaker_state_name(BreakerState s);

/// Circuit breaker of DESIGN.md section 6, stored as data so that other processes can continue it.
struct Breaker {
  BreakerState state = BreakerState::closed;  // as last written; see effective_state()
  int failures = 0;                           // consecutive provider-health failures while closed
  int successes = 0;                          // consecutive successes while half-open
  int reopens = 0;  // how often it reopened from half-open (doubles the recovery timeout)
  std::int64_t opened_ms = 0;
  std::int64_t recovery_ms = 0;  // with jitter, fixed when it opened
  std::string reason;            // last failure that counted

  /// Open turns half-open once the recovery timeout has passed.
  [[nodiscard]] BreakerState effective_state(std::int64_t now_ms) const;
  /// Milliseconds until an open breaker half-opens (0 when not open).
  [[nodiscard]] std::int64_t retry_in_ms(std::int64_t now_ms) const;
};

/// The breaker transition for one exchange (pure; unit-tested without a state file).
void breaker_on_outcome(Breaker& b, OutcomeClass cls, std::int64_t t_ms, std::string_view reason,
                        const BreakerConfig& cfg, double jitter);

/// Opens the breaker at once (a provider lagging longer than lag_trip_ms); reopens a half-open one.
void breaker_trip(Breaker& b, std::int64_t t_ms, std::string_view reason, const BreakerConfig& cfg,
                  double jitter);

/// The outcome of an exchange sent while the breaker was open (the sidecar's recovery probe, or a
/// request let through because no provider was usable): a success closes the breaker at once; a
/// failure leaves it open as it was (no doubling, no new recovery time).
void breaker_on_trial(Breaker& b, OutcomeClass cls, std::int64_t t_ms, std::string_view reason,
                      const BreakerConfig& cfg, double jitter);

/// Failures that open the breaker at once instead of counting toward failure_threshold: a timeout
/// already cost a client the whole attempt timeout, and a hung node costs that on every request.
[[nodiscard]] constexpr bool trips_at_once(Outcome o) { return o == Outcome::timeout; }

}  // namespace rpcroute

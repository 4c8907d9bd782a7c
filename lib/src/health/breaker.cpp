#include "rpcroute/health/breaker.hpp"

#include <algorithm>
#include <cmath>

namespace rpcroute {

std::string_view breaker_state_name(BreakerState s) {
  switch (s) {
    case BreakerState::closed:
      return "closed";
    case BreakerState::open:
      return "open";
    case BreakerState::half_open:
      return "half_open";
  }
  return "?";
}

BreakerState Breaker::effective_state(std::int64_t now_ms) const {
  if (state == BreakerState::open && now_ms >= opened_ms + recovery_ms)
    return BreakerState::half_open;
  return state;
}

std::int64_t Breaker::retry_in_ms(std::int64_t now_ms) const {
  if (state != BreakerState::open) return 0;
  return std::max<std::int64_t>(0, opened_ms + recovery_ms - now_ms);
}

namespace {

std::int64_t recovery_for(const BreakerConfig& cfg, int reopens, double jitter) {
  double base = static_cast<double>(cfg.recovery_timeout_ms) * std::pow(2.0, std::min(reopens, 30));
  base *= 1.0 + cfg.jitter * jitter;
  return static_cast<std::int64_t>(
      std::min(base, static_cast<double>(cfg.max_recovery_timeout_ms)));
}

}  // namespace

void breaker_trip(Breaker& b, std::int64_t t_ms, std::string_view reason, const BreakerConfig& cfg,
                  double jitter) {
  const BreakerState now = b.effective_state(t_ms);
  if (now == BreakerState::open) return;
  b.reopens = now == BreakerState::half_open ? b.reopens + 1 : 0;
  b.state = BreakerState::open;
  b.opened_ms = t_ms;
  b.recovery_ms = recovery_for(cfg, b.reopens, jitter);
  b.successes = 0;
  b.failures = 0;
  b.reason.assign(reason);
}

void breaker_on_outcome(Breaker& b, OutcomeClass cls, std::int64_t t_ms, std::string_view reason,
                        const BreakerConfig& cfg, double jitter) {
  BreakerState now = b.effective_state(t_ms);
  if (now == BreakerState::half_open && b.state == BreakerState::open) {
    b.state = BreakerState::half_open;
    b.successes = 0;
  }
  if (cls == OutcomeClass::provider_failure) {
    b.reason.assign(reason);
    if (b.state == BreakerState::half_open) {
      b.state = BreakerState::open;
      ++b.reopens;
      b.opened_ms = t_ms;
      b.recovery_ms = recovery_for(cfg, b.reopens, jitter);
      b.successes = 0;
    } else if (b.state == BreakerState::closed) {
      if (++b.failures >= cfg.failure_threshold) {
        b.state = BreakerState::open;
        b.reopens = 0;
        b.opened_ms = t_ms;
        b.recovery_ms = recovery_for(cfg, 0, jitter);
      }
    }
    return;
  }
  if (cls != OutcomeClass::success) return;  // rate limits and user errors never touch the breaker
  if (b.state == BreakerState::half_open) {
    if (++b.successes >= cfg.success_threshold) {
      b = Breaker{};
    }
  } else if (b.state == BreakerState::closed) {
    b.failures = 0;
  }
}

void breaker_on_trial(Breaker& b, OutcomeClass cls, std::int64_t t_ms, std::string_view reason,
                      const BreakerConfig& cfg, double jitter) {
  if (b.effective_state(t_ms) != BreakerState::open) {
    // It half-opened (or closed) while the trial was in flight: the usual rules apply.
    breaker_on_outcome(b, cls, t_ms, reason, cfg, jitter);
    return;
  }
  if (cls == OutcomeClass::success) {
    b = Breaker{};
  } else if (cls == OutcomeClass::provider_failure) {
    b.reason.assign(reason);
  }
}

}  // namespace rpcroute

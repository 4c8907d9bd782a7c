#pragma once
// Hedged reads (issue 19): which calls may be hedged, after how long, and how many extra requests
// a process may spend on them. The race itself is the executor's (executor_hedge.cpp).
#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <string_view>

#include "rpcroute/config.hpp"
#include "rpcroute/health/model.hpp"

namespace rpcroute {

/// Whether `method` may be sent to a second provider while the first is still working on it: a
/// read the catalogue knows, that neither sends nor touches a filter. Methods outside the
/// catalogue are never hedged (an unknown method may act).
[[nodiscard]] bool hedgeable(std::string_view method);

/// The hedge settings for one call: the caller's --no-hedge turns it off, a method override's
/// `hedge` wins over the chain's, and --hedge alone hedges with the defaults. Null: no hedging.
[[nodiscard]] const HedgeConfig* hedge_config(const Chain& chain, const MethodPolicy& policy,
                                              std::optional<bool> requested);

/// Whether any chain or method override of `profile` hedges: when none does and the caller did
/// not ask, the executor does not look further (nothing per request on the default path).
[[nodiscard]] bool profile_hedges(const Profile& profile);

/// How long to wait for the first attempt before hedging: the `quantile` of the answered samples
/// of the window (a provider's latency for the method), clamped to [min_ms, max_ms]; max_ms
/// without samples (no evidence that the first attempt is slow).
[[nodiscard]] std::int64_t hedge_delay_ms(const HedgeConfig& config,
                                          const std::deque<Sample>* samples, std::int64_t now_ms,
                                          std::int64_t window_ms);

/// What bounds the extra requests: every hedgeable call earns `max_extra` of a token, a hedge
/// spends one; at most kHedgeBurst are saved, and a process starts with them (so a one-shot
/// `call --hedge` may hedge). Over time, hedges stay below max_extra of the hedgeable calls plus
/// the burst.
inline constexpr double kHedgeBurst = 10;

class HedgeBudget {
 public:
  void earn(double max_extra) { tokens_ = std::min(kHedgeBurst, tokens_ + max_extra); }
  /// Takes a token when there is one.
  [[nodiscard]] bool spend() {
    if (tokens_ < 1) return false;
    tokens_ -= 1;
    return true;
  }
  [[nodiscard]] double tokens() const { return tokens_; }

 private:
  double tokens_ = kHedgeBurst;
};

}  // namespace rpcroute

#pragma once
// One chain as the dashboard page and `rpcroute top` show it: the plan as `rank --json --explain`
// writes it (candidates, exclusions with the same reasons: plan_report.cpp), then one row per
// provider in profile order (tier, breaker and time to half-open, rate limit, height and lag,
// success, p50, probability of being tried first and share of first attempts), then the latency
// series. The sidecar writes it from its live store; `top` without a sidecar from the state file.

#include <cstdint>
#include <optional>

#include "dashboard.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/health/store.hpp"
#include "rpcroute/json.hpp"
#include "rpcroute/router.hpp"

namespace rpcroute::sidecar {

/// `dash`: the sidecar's traffic and series (null from a state file: those members are left out).
void write_chain_view(json::Writer& w, Router& router, const Chain& chain, const HealthView& view,
                      std::optional<Strategy> strategy, std::int64_t now_ms, const Dashboard* dash);

}  // namespace rpcroute::sidecar

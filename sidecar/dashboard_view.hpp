#pragma once
// One chain as the dashboard page and `rpcroute top` show it: the plan as `rank --json --explain`
// writes it (candidates, exclusions with the same reasons: plan_report.cpp), then one row per
// provider in profile order (tier, breaker and time to half-open, rate limit, height and lag,
// success, p50, probability of being tried first and share of first attempts), then the latency
// series. The sidecar writes it from its live store; `top` without a sidecar from the state file.

#include <cstdint>
#include <optional>

#include "cache.hpp"
#include "dashboard.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/health/store.hpp"
#include "rpcroute/json.hpp"
#include "rpcroute/router.hpp"

namespace rpcroute::sidecar {

/// The sidecar's counts of one chain beyond routing: its cache use and hedges (ChainActivity),
/// and the bytes of its profile's answer cache (one cache per profile; null: the cache is off).
struct ChainCounters {
  ChainActivity activity;
  const CacheStats* cache = nullptr;
};

/// `dash`: the sidecar's traffic and series; `counters`: its cache and hedge counts (both null
/// from a state file: those members are left out).
void write_chain_view(json::Writer& w, Router& router, const Chain& chain, const HealthView& view,
                      std::optional<Strategy> strategy, std::int64_t now_ms, const Dashboard* dash,
                      const ChainCounters* counters = nullptr);

}  // namespace rpcroute::sidecar

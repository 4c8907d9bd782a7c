#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "rpcroute/json.hpp"
#include "rpcroute/router.hpp"

namespace rpcroute {

/// One plain sentence saying why a candidate is where it is (`rank --explain`).
[[nodiscard]] std::string explain_candidate(Strategy strategy, const Candidate& c, std::size_t position,
                                            std::int64_t now_ms);

/// The plan as `rank --json` and the sidecar's /status show it: candidates in order with tier,
/// metric and probability of being tried first, then the exclusions with their reasons.
void write_plan_json(json::Writer& w, const Profile& profile, const Chain& chain, std::string_view method,
                     const Plan& plan, std::int64_t now_ms, bool explain);

}  // namespace rpcroute

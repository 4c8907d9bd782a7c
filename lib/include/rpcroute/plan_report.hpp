#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "rpcroute/executor.hpp"
#include "rpcroute/json.hpp"
#include "rpcroute/planner.hpp"

namespace rpcroute {

/// One plain sentence saying why a candidate is where it is (`rank --explain`).
[[nodiscard]] std::string explain_candidate(Strategy strategy, const Candidate& c,
                                            std::size_t position, std::int64_t now_ms);

/// The plan as `rank --json` and the sidecar's /status show it: candidates in order with tier,
/// metric and probability of being tried first, then the exclusions with their reasons.
void write_plan_json(json::Writer& w, const Profile& profile, const Chain& chain,
                     std::string_view method, const Plan& plan, std::int64_t now_ms, bool explain);
/// The same members without the enclosing object, for a caller that adds members of its own.
void write_plan_members(json::Writer& w, const Profile& profile, const Chain& chain,
                        std::string_view method, const Plan& plan, std::int64_t now_ms,
                        bool explain);

/// How an exclusion's retry_in_ms is written: left out (503 details), only when known (`call
/// --json`), or always, null when unknown (`rank --json`, /status).
enum class RetryField { omit, when_known, always };

/// One exclusion as a JSON object: provider, kind, reason (and retry_in_ms by `retry`). The one
/// place exclusions are written, so that rank, call and a 503 say the same thing.
void write_exclusion_json(json::Writer& w, const Exclusion& e, RetryField retry);

/// One attempt as a JSON object: provider, outcome, class, http_status, latency_ms, message.
void write_attempt_json(json::Writer& w, const AttemptRecord& a);

}  // namespace rpcroute

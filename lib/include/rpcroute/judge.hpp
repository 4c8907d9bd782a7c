#pragma once
#include <cstddef>
#include <cstdint>

#include "rpcroute/outcome.hpp"

namespace rpcroute {

/// What the executor does with one call after an attempt (DESIGN.md section 5, failover).
enum class Action : std::uint8_t {
  deliver,       // a result: the call is answered
  return_error,  // this provider's error answer is the answer: every node would say the same
  return_held,   // stop with the error answer held (from this attempt or an earlier one)
  give_up,       // stop unavailable, for the reason in Decision::why
  try_next,      // go on to the next candidate
};

/// Why a call ends unavailable.
enum class GiveUp : std::uint8_t {
  none,
  maybe_sent,     // a transaction send failed after it may have reached the provider: no resend
  attempt_limit,  // max_attempts reached with candidates left
  exhausted,      // every candidate failed
};

/// What the call allows.
struct FailoverPolicy {
  bool replay_unsafe = false;  // MethodInfo::replay_unsafe: a second provider could act twice
  int max_attempts = 0;        // RouteOptions / profile
};

/// Where the call stands after this attempt.
struct Progress {
  int attempts = 0;               // made so far, this one included
  std::size_t candidate = 0;      // index of the candidate just tried
  std::size_t candidates = 0;     // in the plan
  bool unknown_spent = false;     // an unknown error already bought one more provider
  bool holding_error = false;     // an error answer from an earlier attempt is held
  bool answer_has_error = false;  // this attempt's answer is a JSON-RPC error object
};

struct Decision {
  Action action = Action::try_next;
  GiveUp why = GiveUp::none;
  bool hold = false;           // keep this attempt's error answer, to return if nobody does better
  bool spend_unknown = false;  // this attempt uses the one more provider an unknown error gets
};

/// The failover decision, pure: an unknown error gets one more provider, then is returned; a
/// transaction send is never resent once it may have left; capability and unknown error answers
/// are held and returned when the candidates run out.
///
///   Decision d = judge(c, {.replay_unsafe = info.replay_unsafe, .max_attempts = 3}, progress);
[[nodiscard]] Decision judge(const Classification& c, const FailoverPolicy& policy,
                             const Progress& progress);

}  // namespace rpcroute

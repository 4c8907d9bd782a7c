#include "rpcroute/judge.hpp"

namespace rpcroute {

Decision judge(const Classification& c, const FailoverPolicy& policy, const Progress& progress) {
  Decision d;
  if (c.cls == OutcomeClass::success) return {Action::deliver};
  if (c.cls == OutcomeClass::deterministic) return {Action::return_error};
  d.hold = progress.answer_has_error &&
           (c.cls == OutcomeClass::capability || c.cls == OutcomeClass::unknown);
  const bool holding = progress.holding_error || d.hold;
  const bool more =
      progress.candidate + 1 < progress.candidates && progress.attempts < policy.max_attempts;
  if (c.cls == OutcomeClass::unknown) {
    if (progress.unknown_spent || !more) {
      d.action = Action::return_held;
      return d;
    }
    d.spend_unknown = true;
  }
  // A send that may have reached the node is not sent again: a capability answer says it did not
  // take it; anything else (a timeout, a reset) leaves it maybe in a mempool.
  if (policy.replay_unsafe && !c.never_sent() && c.cls != OutcomeClass::capability) {
    d.action =
        holding ? Action::return_held : Action::give_up;  // the node answered: its word, not ours
    if (!holding) d.why = GiveUp::maybe_sent;
    return d;
  }
  if (!more) {
    d.action = holding ? Action::return_held : Action::give_up;
    if (!holding)
      d.why =
          progress.candidate + 1 < progress.candidates ? GiveUp::attempt_limit : GiveUp::exhausted;
    return d;
  }
  d.action = Action::try_next;
  return d;
}

}  // namespace rpcroute

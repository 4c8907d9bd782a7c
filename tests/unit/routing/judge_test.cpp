// The failover decision as one pure function (issue 16): every class, the transaction-send rule,
// the unknown-error allowance and the end of the candidates.
#include <catch2/catch.hpp>

#include "rpcroute/judge.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_judge_test {

using namespace rpcroute;

namespace {

Classification of(OutcomeClass cls, Outcome outcome = Outcome::rpc_error) {
  Classification c;
  c.cls = cls;
  c.outcome = outcome;
  return c;
}

constexpr FailoverPolicy kRead{.replay_unsafe = false, .max_attempts = 10};
constexpr FailoverPolicy kSend{.replay_unsafe = true, .max_attempts = 10};

// The first of three candidates just answered.
Progress first_of_three(bool error_answer = true) {
  return Progress{.attempts = 1, .candidate = 0, .candidates = 3, .answer_has_error = error_answer};
}

}  // namespace

TEST_CASE("judge: a result is delivered, a deterministic error returned at once", "[judge]") {
  CHECK(judge(of(OutcomeClass::success, Outcome::success), kRead, first_of_three(false)).action == Action::deliver);
  auto d = judge(of(OutcomeClass::deterministic), kRead, first_of_three());
  CHECK(d.action == Action::return_error);
  CHECK_FALSE(d.hold);
  // Even for a send: execution reverted is the answer.
  CHECK(judge(of(OutcomeClass::deterministic), kSend, first_of_three()).action == Action::return_error);
}

TEST_CASE("judge: provider failures and rate limits fail over while candidates remain", "[judge]") {
  for (auto outcome : {Outcome::timeout, Outcome::http_error, Outcome::connect_failed, Outcome::bad_response}) {
    auto d = judge(of(OutcomeClass::provider_failure, outcome), kRead, first_of_three(false));
    CHECK(d.action == Action::try_next);
    CHECK_FALSE(d.hold);
  }
  CHECK(judge(of(OutcomeClass::rate_limited, Outcome::rate_limited), kRead, first_of_three(false)).action ==
        Action::try_next);
}

TEST_CASE("judge: a capability error is held and the next provider tried", "[judge]") {
  auto d = judge(of(OutcomeClass::capability), kRead, first_of_three());
  CHECK(d.action == Action::try_next);
  CHECK(d.hold);
  // The last candidate: the held answer is returned rather than 503.
  auto last = judge(of(OutcomeClass::capability), kRead, Progress{.attempts = 3, .candidate = 2, .candidates = 3,
                                                                   .answer_has_error = true});
  CHECK(last.action == Action::return_held);
}

TEST_CASE("judge: an unknown error buys one more provider, then is returned", "[judge]") {
  auto d = judge(of(OutcomeClass::unknown), kRead, first_of_three());
  CHECK(d.action == Action::try_next);
  CHECK(d.spend_unknown);
  CHECK(d.hold);
  auto second = first_of_three();
  second.unknown_spent = true;
  second.holding_error = true;
  second.candidate = 1;
  second.attempts = 2;
  CHECK(judge(of(OutcomeClass::unknown), kRead, second).action == Action::return_held);
  // Alone: nothing more to try.
  CHECK(judge(of(OutcomeClass::unknown), kRead, Progress{.attempts = 1, .candidate = 0, .candidates = 1,
                                                         .answer_has_error = true})
            .action == Action::return_held);
}

TEST_CASE("judge: a send that may have left is never resent", "[judge]") {
  for (auto outcome : {Outcome::timeout, Outcome::transport_error, Outcome::http_error, Outcome::bad_response}) {
    auto d = judge(of(OutcomeClass::provider_failure, outcome), kSend, first_of_three(false));
    CHECK(d.action == Action::give_up);
    CHECK(d.why == GiveUp::maybe_sent);
  }
  CHECK(judge(of(OutcomeClass::rate_limited, Outcome::rate_limited), kSend, first_of_three(false)).action ==
        Action::give_up);
  // An unknown error answer from the node is its word: returned, not resent.
  CHECK(judge(of(OutcomeClass::unknown), kSend, first_of_three()).action == Action::return_held);
}

TEST_CASE("judge: a send that provably never left, or was refused as unsupported, fails over", "[judge]") {
  CHECK(judge(of(OutcomeClass::provider_failure, Outcome::connect_failed), kSend, first_of_three(false)).action ==
        Action::try_next);
  CHECK(judge(of(OutcomeClass::provider_failure, Outcome::dns_failed), kSend, first_of_three(false)).action ==
        Action::try_next);
  CHECK(judge(of(OutcomeClass::capability), kSend, first_of_three()).action == Action::try_next);
}

TEST_CASE("judge: the end of the candidates or of the attempts", "[judge]") {
  auto last = Progress{.attempts = 3, .candidate = 2, .candidates = 3};
  auto d = judge(of(OutcomeClass::provider_failure, Outcome::timeout), kRead, last);
  CHECK(d.action == Action::give_up);
  CHECK(d.why == GiveUp::exhausted);
  auto limited = judge(of(OutcomeClass::provider_failure, Outcome::timeout), {.max_attempts = 1}, first_of_three(false));
  CHECK(limited.action == Action::give_up);
  CHECK(limited.why == GiveUp::attempt_limit);
  last.holding_error = true;  // a capability answer came earlier
  CHECK(judge(of(OutcomeClass::provider_failure, Outcome::timeout), kRead, last).action == Action::return_held);
}

}  // namespace unit_judge_test

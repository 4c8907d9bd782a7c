#include <catch2/catch.hpp>

#include "rpcroute/clock.hpp"
#include "rpcroute/state.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_breaker_test {

using namespace rpcroute;

namespace {

BreakerConfig test_config() {
  BreakerConfig cfg;
  cfg.failure_threshold = 3;
  cfg.recovery_timeout_ms = 1'000;
  cfg.max_recovery_timeout_ms = 4'000;
  cfg.success_threshold = 2;
  cfg.jitter = 0;
  return cfg;
}

struct Fixture {
  BreakerConfig cfg = test_config();
  FakeClock clock;
  Breaker b;

  void on(OutcomeClass cls, std::string_view reason = "HTTP 502") {
    breaker_on_outcome(b, cls, clock.now_ms(), reason, cfg, 0.0);
  }
  void fail(int n = 1) {
    for (int i = 0; i < n; ++i) on(OutcomeClass::provider_failure);
  }
  void succeed(int n = 1) {
    for (int i = 0; i < n; ++i) on(OutcomeClass::success);
  }
  BreakerState state() const { return b.effective_state(clock.now_ms()); }

  /// Opens the breaker from closed, at the current time.
  void open() {
    fail(cfg.failure_threshold);
    REQUIRE(b.state == BreakerState::open);
  }
};

}  // namespace

TEST_CASE("breaker opens after failure_threshold consecutive provider failures", "[breaker]") {
  Fixture f;
  f.fail(2);
  CHECK(f.state() == BreakerState::closed);
  CHECK(f.b.failures == 2);
  auto opened_at = f.clock.now_ms();
  f.on(OutcomeClass::provider_failure, "timeout");
  CHECK(f.b.state == BreakerState::open);
  CHECK(f.state() == BreakerState::open);
  CHECK(f.b.opened_ms == opened_at);
  CHECK(f.b.recovery_ms == 1'000);
  CHECK(f.b.reason == "timeout");
  CHECK(f.b.reopens == 0);
}

TEST_CASE("a success in between resets the failure count", "[breaker]") {
  Fixture f;
  f.fail(2);
  f.succeed();
  CHECK(f.b.failures == 0);
  f.fail(2);
  CHECK(f.state() == BreakerState::closed);
  f.fail();
  CHECK(f.state() == BreakerState::open);
}

TEST_CASE("rate limits, deterministic, capability and unknown answers never touch the breaker",
          "[breaker]") {
  const OutcomeClass neutral[] = {OutcomeClass::rate_limited, OutcomeClass::deterministic,
                                  OutcomeClass::capability, OutcomeClass::unknown};
  SECTION("closed: neither counted nor resetting") {
    Fixture f;
    f.fail(2);
    for (auto cls : neutral) {
      for (int i = 0; i < 10; ++i) f.on(cls, "neutral");
    }
    CHECK(f.b.state == BreakerState::closed);
    CHECK(f.b.failures == 2);
    CHECK(f.b.reason == "HTTP 502");
    f.fail();
    CHECK(f.b.state == BreakerState::open);  // the two earlier failures still count
  }
  SECTION("open: stays open with the same deadline") {
    Fixture f;
    f.open();
    auto before = f.b;
    f.clock.advance(500);
    for (auto cls : neutral) f.on(cls);
    CHECK(f.b.state == BreakerState::open);
    CHECK(f.b.opened_ms == before.opened_ms);
    CHECK(f.b.recovery_ms == before.recovery_ms);
  }
  SECTION("half-open: neither a success nor a failure") {
    Fixture f;
    f.open();
    f.clock.advance(1'000);
    for (auto cls : neutral) {
      for (int i = 0; i < 3; ++i) f.on(cls);
    }
    CHECK(f.state() == BreakerState::half_open);
    CHECK(f.b.successes == 0);
    CHECK(f.b.reopens == 0);
  }
}

TEST_CASE("an open breaker half-opens after the recovery time", "[breaker]") {
  Fixture f;
  f.open();
  auto opened = f.clock.now_ms();
  CHECK(f.b.retry_in_ms(opened) == 1'000);
  f.clock.advance(400);
  CHECK(f.state() == BreakerState::open);
  CHECK(f.b.retry_in_ms(f.clock.now_ms()) == 600);
  f.clock.set(opened + 999);
  CHECK(f.state() == BreakerState::open);
  CHECK(f.b.retry_in_ms(f.clock.now_ms()) == 1);
  f.clock.set(opened + 1'000);
  CHECK(f.state() == BreakerState::half_open);
  CHECK(f.b.retry_in_ms(f.clock.now_ms()) == 0);
  f.clock.advance(10'000);
  CHECK(f.state() == BreakerState::half_open);
  CHECK(f.b.retry_in_ms(f.clock.now_ms()) == 0);
  CHECK(f.b.state == BreakerState::open);  // as last written: effective_state does not mutate
}

TEST_CASE("failures while open do not extend the recovery", "[breaker]") {
  Fixture f;
  f.open();
  auto opened = f.b.opened_ms;
  f.clock.advance(900);
  f.fail(5);  // late answers from requests sent before it opened
  CHECK(f.b.opened_ms == opened);
  CHECK(f.b.recovery_ms == 1'000);
  f.clock.advance(100);
  CHECK(f.state() == BreakerState::half_open);
}

TEST_CASE("a half-open failure reopens with doubled recovery, capped at the maximum", "[breaker]") {
  Fixture f;
  f.open();
  const std::int64_t expected[] = {2'000, 4'000, 4'000, 4'000};
  std::int64_t recovery = 1'000;
  for (int round = 0; round < 4; ++round) {
    INFO("reopen " << round + 1);
    f.clock.advance(recovery);
    REQUIRE(f.state() == BreakerState::half_open);
    auto now = f.clock.now_ms();
    f.fail();
    CHECK(f.b.state == BreakerState::open);
    CHECK(f.b.reopens == round + 1);
    CHECK(f.b.opened_ms == now);
    CHECK(f.b.recovery_ms == expected[round]);
    CHECK(f.b.retry_in_ms(now) == expected[round]);
    recovery = f.b.recovery_ms;
    f.clock.advance(recovery - 1);
    CHECK(f.state() == BreakerState::open);
    f.clock.advance(-(recovery - 1));
  }
}

TEST_CASE("success_threshold half-open successes close the breaker", "[breaker]") {
  Fixture f;
  f.open();
  f.clock.advance(1'000);
  f.succeed();
  CHECK(f.b.state == BreakerState::half_open);
  CHECK(f.b.successes == 1);
  f.succeed();
  CHECK(f.b.state == BreakerState::closed);
  CHECK(f.state() == BreakerState::closed);
  CHECK(f.b.failures == 0);
  CHECK(f.b.successes == 0);
  CHECK(f.b.reopens == 0);
  CHECK(f.b.retry_in_ms(f.clock.now_ms()) == 0);
  // Closed again: it takes a full threshold to reopen, with the base recovery.
  f.fail(2);
  CHECK(f.state() == BreakerState::closed);
  f.fail();
  CHECK(f.b.state == BreakerState::open);
  CHECK(f.b.recovery_ms == 1'000);
}

TEST_CASE("a failure after one half-open success reopens it", "[breaker]") {
  Fixture f;
  f.open();
  f.clock.advance(1'000);
  f.succeed();
  f.fail();
  CHECK(f.b.state == BreakerState::open);
  CHECK(f.b.successes == 0);
  CHECK(f.b.recovery_ms == 2'000);
  // The next half-open needs two fresh successes.
  f.clock.advance(2'000);
  f.succeed();
  CHECK(f.state() == BreakerState::half_open);
  f.succeed();
  CHECK(f.state() == BreakerState::closed);
}

TEST_CASE("a reopen after closing again starts from the base recovery", "[breaker]") {
  Fixture f;
  f.open();
  f.clock.advance(1'000);
  f.fail();  // reopens: 2000
  f.clock.advance(2'000);
  f.succeed(2);
  REQUIRE(f.state() == BreakerState::closed);
  f.open();
  CHECK(f.b.recovery_ms == 1'000);
  CHECK(f.b.reopens == 0);
}

TEST_CASE("jitter lengthens the recovery by at most the configured fraction", "[breaker]") {
  BreakerConfig cfg = test_config();
  cfg.jitter = 0.1;
  for (double j : {0.0, 0.5, 0.999}) {
    Breaker b;
    for (int i = 0; i < 3; ++i)
      breaker_on_outcome(b, OutcomeClass::provider_failure, 0, "x", cfg, j);
    REQUIRE(b.state == BreakerState::open);
    CHECK(b.recovery_ms == static_cast<std::int64_t>(1'000 * (1.0 + 0.1 * j)));
    CHECK(b.recovery_ms >= 1'000);
    CHECK(b.recovery_ms <= 1'100);
  }
}

TEST_CASE("breaker_state_name", "[breaker]") {
  CHECK(breaker_state_name(BreakerState::closed) == "closed");
  CHECK(breaker_state_name(BreakerState::open) == "open");
  CHECK(breaker_state_name(BreakerState::half_open) == "half_open");
}

TEST_CASE("a trial that succeeds while the breaker is open closes it at once", "[breaker]") {
  Fixture f;
  f.open();
  f.clock.advance(300);  // long before the recovery time
  breaker_on_trial(f.b, OutcomeClass::success, f.clock.now_ms(), "success", f.cfg, 0.0);
  CHECK(f.state() == BreakerState::closed);
  CHECK(f.b.failures == 0);
  CHECK(f.b.reopens == 0);
}

TEST_CASE("a trial that fails leaves the breaker open as it was", "[breaker]") {
  Fixture f;
  f.open();
  auto before = f.b;
  f.clock.advance(300);
  breaker_on_trial(f.b, OutcomeClass::provider_failure, f.clock.now_ms(), "connect_failed", f.cfg, 0.0);
  CHECK(f.b.state == BreakerState::open);
  CHECK(f.b.opened_ms == before.opened_ms);
  CHECK(f.b.recovery_ms == before.recovery_ms);
  CHECK(f.b.reopens == 0);
  CHECK(f.b.reason == "connect_failed");
  // Rate limits and user errors neither close nor touch it.
  breaker_on_trial(f.b, OutcomeClass::rate_limited, f.clock.now_ms(), "rate_limited", f.cfg, 0.0);
  CHECK(f.b.state == BreakerState::open);
}

TEST_CASE("a trial answered after the breaker half-opened follows the half-open rules", "[breaker]") {
  Fixture f;
  f.open();
  f.clock.advance(1'000);
  breaker_on_trial(f.b, OutcomeClass::success, f.clock.now_ms(), "success", f.cfg, 0.0);
  CHECK(f.state() == BreakerState::half_open);  // one success of success_threshold 2
  breaker_on_trial(f.b, OutcomeClass::provider_failure, f.clock.now_ms(), "timeout", f.cfg, 0.0);
  CHECK(f.state() == BreakerState::open);
  CHECK(f.b.reopens == 1);
}

TEST_CASE("a timeout opens the breaker at once; other failures count to the threshold", "[breaker]") {
  CHECK(trips_at_once(Outcome::timeout));
  for (auto o : {Outcome::connect_failed, Outcome::dns_failed, Outcome::tls_failed, Outcome::transport_error,
                 Outcome::http_error, Outcome::bad_response, Outcome::wrong_id, Outcome::rpc_error,
                 Outcome::rate_limited, Outcome::success}) {
    INFO(outcome_name(o));
    CHECK_FALSE(trips_at_once(o));
  }
}

}  // namespace unit_breaker_test

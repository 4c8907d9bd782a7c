#include <catch2/catch.hpp>

#include "rpcroute/state.hpp"
#include "../support/temp_dir.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_pending_test {

using namespace rpcroute;

TEST_CASE("StateStore keeps bounded pending changes and saves what the file would keep", "[state]") {
  test::TempDir dir;
  FakeClock clock;
  HealthConfig health;
  health.circuit_breaker.failure_threshold = 3;
  health.circuit_breaker.jitter = 0;
  StateStore store(dir / "state.json", clock, [](const std::string&) {});
  const std::string key = "p/c/a#f";
  for (int i = 0; i < 10'000; ++i) {
    clock.advance(1);
    store.record(SampleEvent{key, "eth_blockNumber", Sample{clock.now_ms(), i, Outcome::success}}, health);
    store.record(AttemptEvent{key, clock.now_ms(), OutcomeClass::success, "success", -1, 0.0}, health);
    store.record(CursorEvent{"p/c", 1}, health);
  }
  // The last three attempts fail: the replayed breaker must end open, as the live one did.
  for (int i = 0; i < 3; ++i) {
    clock.advance(1);
    store.record(AttemptEvent{key, clock.now_ms(), OutcomeClass::provider_failure, "timeout", -1, 0.0}, health);
  }
  REQUIRE(store.state().providers.at(key).breaker.state == BreakerState::open);
  REQUIRE(store.dirty());
  REQUIRE(store.save());
  CHECK_FALSE(store.dirty());

  StateStore reader(dir / "state.json", clock, [](const std::string&) {});
  reader.load();
  const auto& ps = reader.state().providers.at(key);
  CHECK(ps.methods.at("eth_blockNumber").size() == kMaxSamplesPerMethod);
  CHECK(ps.methods.at("eth_blockNumber").back().latency_us == 9'999);  // the newest are kept
  CHECK(ps.breaker.state == BreakerState::open);
  CHECK(reader.state().chains.at("p/c").rr_cursor == 10'000);
}

}  // namespace unit_pending_test

#include <catch2/catch.hpp>

#include "rpcroute/router.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_plan_test {

using namespace rpcroute;

namespace {

constexpr const char* kProfile = R"(
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - { id: a, url: "http://127.0.0.1:1", priority: 1 }
      - { id: b, url: "http://127.0.0.1:2", priority: 2, methods: { deny: ["debug_*"] } }
      - { id: c, url: "http://127.0.0.1:3", priority: 3 }
routing:
  default_strategy: priority
  method_overrides:
    eth_call: { providers: [b, c] }
    eth_getLogs: { strategy: fastest }
health:
  circuit_breaker: { failure_threshold: 1, recovery_timeout_ms: 10000, jitter: 0 }
)";

struct Fixture {
  Profile profile = *load_profile_text(kProfile, "test.yaml");
  FakeClock clock;
  Random rng{7};
  asio::io_context io;
  Engine engine{io};
  StateStore store{std::nullopt, clock, [](const std::string&) {}};
  Router router{profile, engine, store, clock, rng};
  const Chain& chain = profile.chains.front();

  std::string key(const std::string& id) { return provider_key(profile.name, chain.name, *chain.find_provider(id)); }

  std::vector<std::string> order(const Plan& plan) {
    std::vector<std::string> ids;
    for (const auto& c : plan.candidates) ids.push_back(c.provider->id);
    return ids;
  }

  const Exclusion* excluded(const Plan& plan, const std::string& id) {
    for (const auto& e : plan.excluded) {
      if (e.provider == id) return &e;
    }
    return nullptr;
  }
};

}  // namespace

TEST_CASE("plan: the profile's default strategy and the method overrides", "[plan]") {
  Fixture f;
  auto plan = f.router.plan(f.chain, "eth_blockNumber", "[]", {});
  CHECK(plan.strategy == Strategy::priority);
  CHECK(f.order(plan) == std::vector<std::string>{"a", "b", "c"});
  auto logs = f.router.plan(f.chain, "eth_getLogs", "[]", {});
  CHECK(logs.strategy == Strategy::fastest);
  RouteOptions forced;
  forced.strategy = Strategy::round_robin;
  CHECK(f.router.plan(f.chain, "eth_getLogs", "[]", forced).strategy == Strategy::round_robin);
}

TEST_CASE("plan: method policies, deny lists and --provider exclude with reasons", "[plan]") {
  Fixture f;
  auto call = f.router.plan(f.chain, "eth_call", "[]", {});
  CHECK(f.order(call) == std::vector<std::string>{"b", "c"});
  REQUIRE(f.excluded(call, "a") != nullptr);
  CHECK_THAT(f.excluded(call, "a")->reason, Catch::Contains("method policy"));

  auto debug = f.router.plan(f.chain, "debug_traceTransaction", "[]", {});
  REQUIRE(f.excluded(debug, "b") != nullptr);
  CHECK_THAT(f.excluded(debug, "b")->reason, Catch::Contains("denied"));

  RouteOptions only_c;
  only_c.provider = "c";
  auto one = f.router.plan(f.chain, "eth_blockNumber", "[]", only_c);
  CHECK(f.order(one) == std::vector<std::string>{"c"});
  CHECK(one.excluded.size() == 2);
}

TEST_CASE("plan: an open breaker excludes with the time until half-open, then the provider returns in tier 3",
          "[plan]") {
  Fixture f;
  f.store.record(AttemptEvent{f.key("a"), f.clock.now_ms(), OutcomeClass::provider_failure, "timeout", -1, 0.0},
                 f.profile.health);
  auto plan = f.router.plan(f.chain, "eth_blockNumber", "[]", {});
  CHECK(f.order(plan) == std::vector<std::string>{"b", "c"});
  REQUIRE(f.excluded(plan, "a") != nullptr);
  CHECK(f.excluded(plan, "a")->retry_in_ms == 10000);
  CHECK_THAT(f.excluded(plan, "a")->reason, Catch::Contains("circuit breaker open"));

  f.clock.advance(10'000);
  auto later = f.router.plan(f.chain, "eth_blockNumber", "[]", {});
  CHECK(f.order(later) == std::vector<std::string>{"b", "c", "a"});
  CHECK(later.candidates.back().tier == Tier::half_open);
}

TEST_CASE("plan: a rate-limited provider drops to tier 2 until its deadline", "[plan]") {
  Fixture f;
  f.store.record(AttemptEvent{f.key("a"), f.clock.now_ms(), OutcomeClass::rate_limited, "rate_limited", 5000, 0.0},
                 f.profile.health);
  auto plan = f.router.plan(f.chain, "eth_blockNumber", "[]", {});
  CHECK(f.order(plan) == std::vector<std::string>{"b", "c", "a"});
  CHECK(plan.candidates.back().tier == Tier::rate_limited);
  CHECK(plan.candidates.front().first_probability == 1.0);
  f.clock.advance(5001);
  CHECK(f.order(f.router.plan(f.chain, "eth_blockNumber", "[]", {})) == std::vector<std::string>{"a", "b", "c"});
}

TEST_CASE("plan: a wrong chain id seen by probe excludes until a later probe shows it fixed", "[plan]") {
  Fixture f;
  ProbeFindings wrong;
  wrong.t_ms = f.clock.now_ms();
  wrong.chain_id = 5;
  f.store.record(ProbeEvent{f.key("b"), wrong}, f.profile.health);
  auto plan = f.router.plan(f.chain, "eth_blockNumber", "[]", {});
  REQUIRE(f.excluded(plan, "b") != nullptr);
  CHECK_THAT(f.excluded(plan, "b")->reason, Catch::Contains("wrong chain id 5"));

  f.clock.advance(1000);
  ProbeFindings fixed = wrong;
  fixed.t_ms = f.clock.now_ms();
  fixed.chain_id = 31337;
  f.store.record(ProbeEvent{f.key("b"), fixed}, f.profile.health);
  CHECK(f.excluded(f.router.plan(f.chain, "eth_blockNumber", "[]", {}), "b") == nullptr);
}

TEST_CASE("plan: a provider more than max_lag_blocks behind is excluded while its height is fresh", "[plan]") {
  Fixture f;
  auto now = f.clock.now_ms();
  f.store.record(HeightEvent{f.key("a"), Height{100, now}}, f.profile.health);
  f.store.record(HeightEvent{f.key("b"), Height{100, now}}, f.profile.health);
  f.store.record(HeightEvent{f.key("c"), Height{97, now}}, f.profile.health);
  auto plan = f.router.plan(f.chain, "eth_blockNumber", "[]", {});
  REQUIRE(f.excluded(plan, "c") != nullptr);
  CHECK_THAT(f.excluded(plan, "c")->reason, Catch::Contains("lagging 3 blocks"));

  // Within tolerance (2 blocks) it stays.
  f.store.record(HeightEvent{f.key("c"), Height{98, now + 1}}, f.profile.health);
  CHECK(f.excluded(f.router.plan(f.chain, "eth_blockNumber", "[]", {}), "c") == nullptr);

  // An old height proves nothing: past the horizon (60 s here) the lag no longer excludes.
  f.store.record(HeightEvent{f.key("c"), Height{90, now + 2}}, f.profile.health);
  f.clock.advance(61'000);
  CHECK(f.excluded(f.router.plan(f.chain, "eth_blockNumber", "[]", {}), "c") == nullptr);
}

TEST_CASE("plan: filter-method calls go only to the provider that created the filter", "[plan]") {
  Fixture f;
  f.store.record(FilterEvent{filter_key(f.profile.name, f.chain, "0xAB"), FilterPin{"c", f.clock.now_ms()}},
                 f.profile.health);
  auto plan = f.router.plan(f.chain, "eth_getFilterChanges", R"(["0xab"])", {});
  CHECK(f.order(plan) == std::vector<std::string>{"c"});
  REQUIRE(f.excluded(plan, "a") != nullptr);
  CHECK_THAT(f.excluded(plan, "a")->reason, Catch::Contains("filter lives on c"));
  // An unknown filter id routes normally.
  CHECK(f.router.plan(f.chain, "eth_getFilterChanges", R"(["0x99"])", {}).candidates.size() == 3);
}

TEST_CASE("plan: when every breaker is open, the open ones are candidates as trials, one in flight each",
          "[plan][breaker]") {
  Fixture f;
  for (const char* id : {"a", "b", "c"}) {
    f.store.record(AttemptEvent{f.key(id), f.clock.now_ms(), OutcomeClass::provider_failure, "connect_failed", -1, 0.0},
                   f.profile.health);
  }
  f.clock.advance(100);  // long before they half-open (10 s)
  auto plan = f.router.plan(f.chain, "eth_blockNumber", "[]", {});
  CHECK(plan.breaker_trial);
  CHECK(f.order(plan) == std::vector<std::string>{"a", "b", "c"});
  for (const auto& c : plan.candidates) {
    CHECK(c.breaker == BreakerState::open);
    CHECK(c.tier == Tier::half_open);
  }
  CHECK(plan.excluded.empty());

  SECTION("while one usable provider remains, open breakers stay excluded") {
    f.store.record(AttemptEvent{f.key("b"), f.clock.now_ms(), OutcomeClass::success, "success", -1, 0.0, false, true},
                   f.profile.health);
    auto usable = f.router.plan(f.chain, "eth_blockNumber", "[]", {});
    CHECK_FALSE(usable.breaker_trial);
    CHECK(f.order(usable) == std::vector<std::string>{"b"});
    REQUIRE(f.excluded(usable, "a") != nullptr);
    CHECK(f.excluded(usable, "a")->kind == ExclusionKind::breaker);
  }
  SECTION("other exclusions still apply to trials") {
    RouteOptions only_c;
    only_c.provider = "c";
    auto one = f.router.plan(f.chain, "eth_blockNumber", "[]", only_c);
    CHECK(one.breaker_trial);
    CHECK(f.order(one) == std::vector<std::string>{"c"});
    CHECK(one.excluded.size() == 2);
  }
}

TEST_CASE("plan: a provider with an attempt in flight far beyond its usual latency drops to the last tier",
          "[plan]") {
  Fixture f;
  const Provider* a = f.chain.find_provider("a");
  // a's usual eth_blockNumber latency: 20 ms.
  for (int i = 0; i < 5; ++i) {
    f.store.record(SampleEvent{f.key("a"), "eth_blockNumber", Sample{f.clock.now_ms(), 20'000, Outcome::success}},
                   f.profile.health);
  }
  const auto start = f.clock.now_ms();
  f.router.attempts_in_flight().start(a, "eth_blockNumber", start);
  f.clock.advance(150);  // under the 250 ms floor
  CHECK(f.order(f.router.plan(f.chain, "eth_blockNumber", "[]", {})) == std::vector<std::string>{"a", "b", "c"});
  f.clock.advance(150);  // 300 ms: 15 times its median
  auto plan = f.router.plan(f.chain, "eth_blockNumber", "[]", {});
  CHECK(f.order(plan) == std::vector<std::string>{"b", "c", "a"});
  CHECK(plan.candidates.back().tier == Tier::stalled);
  CHECK(plan.candidates.front().first_probability == 1.0);
  // While it lasts: once the attempt ends, a ranks first again.
  f.router.attempts_in_flight().finish(a, start);
  CHECK(f.order(f.router.plan(f.chain, "eth_blockNumber", "[]", {})) == std::vector<std::string>{"a", "b", "c"});
}

TEST_CASE("attempt_stalled: ten times the median, at least 250 ms, 1 s without data", "[plan]") {
  CHECK_FALSE(attempt_stalled(249, 1.0));
  CHECK(attempt_stalled(250, 1.0));
  CHECK_FALSE(attempt_stalled(999, 100.0));
  CHECK(attempt_stalled(1'000, 100.0));
  CHECK_FALSE(attempt_stalled(999, 0));
  CHECK(attempt_stalled(1'000, 0));
}

}  // namespace unit_plan_test

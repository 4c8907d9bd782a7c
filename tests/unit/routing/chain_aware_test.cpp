// Chain-aware filtering (DESIGN.md sections 6 and 8): lag against estimated heights, archive
// routing, blocks above a provider's height, eth_getLogs range limits, quotas, lag trips.
#include <catch2/catch.hpp>

#include "rpcroute/router.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_chain_aware_test {

using namespace rpcroute;

namespace {

constexpr const char* kProfile = R"(
chains:
  local:
    chain_id: 31337
    block_time_ms: 2000
    max_lag_blocks: 2
    archival_threshold: 10
    lag_trip_ms: 5000
    providers:
      - { id: full, url: "http://127.0.0.1:1", archival: false, limits: { max_block_range: 10000 } }
      - { id: archive, url: "http://127.0.0.1:2", archival: true }
      - { id: quota, url: "http://127.0.0.1:3", rate_limit: { rps: 5, burst: 5 } }
routing:
  default_strategy: priority
health:
  circuit_breaker: { failure_threshold: 3, recovery_timeout_ms: 10000, jitter: 0 }
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

  const Provider& provider(const std::string& id) { return *chain.find_provider(id); }
  std::string key(const std::string& id) { return provider_key(profile.name, chain.name, provider(id)); }
  void height(const std::string& id, std::uint64_t block) {
    store.record(HeightEvent{key(id), Height{block, clock.now_ms()}}, profile.health);
  }
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

const std::string kAddr = "\"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266\"";

}  // namespace

TEST_CASE("chain-aware: lag compares estimated heights, not raw observations", "[plan][chain]") {
  Fixture f;
  f.height("full", 90);  // seen 20 s ago: ~10 blocks made since (2 s blocks)
  f.clock.advance(20'000);
  f.height("archive", 100);
  f.height("quota", 100);
  auto plan = f.router.plan(f.chain, "eth_blockNumber", "[]", {});
  CHECK(f.excluded(plan, "full") == nullptr);  // ~100 now, within tolerance

  f.height("full", 90);  // seen now at 90: 10 behind
  plan = f.router.plan(f.chain, "eth_blockNumber", "[]", {});
  REQUIRE(f.excluded(plan, "full") != nullptr);
  CHECK(f.excluded(plan, "full")->kind == ExclusionKind::lag);
  CHECK_THAT(f.excluded(plan, "full")->reason, Catch::Contains("lagging 10 blocks"));
}

TEST_CASE("chain-aware: a provider whose breaker is open does not make the others look behind", "[plan][chain]") {
  Fixture f;
  f.height("full", 200);
  f.height("archive", 150);
  f.height("quota", 150);
  for (int i = 0; i < 3; ++i) {
    f.store.record(AttemptEvent{f.key("full"), f.clock.now_ms(), OutcomeClass::provider_failure, "refused"},
                   f.profile.health);
  }
  auto plan = f.router.plan(f.chain, "eth_blockNumber", "[]", {});
  CHECK(f.order(plan) == std::vector<std::string>{"archive", "quota"});
  CHECK(f.excluded(plan, "full")->kind == ExclusionKind::breaker);
}

TEST_CASE("chain-aware: old state goes to archival providers only; latest to any", "[plan][chain]") {
  Fixture f;
  f.height("archive", 100);
  auto old = f.router.plan(f.chain, "eth_getBalance", "[" + kAddr + ",\"0x1\"]", {});
  CHECK(old.needs_archive);
  CHECK(f.order(old) == std::vector<std::string>{"archive", "quota"});  // quota: unknown, so able
  REQUIRE(f.excluded(old, "full") != nullptr);
  CHECK(f.excluded(old, "full")->kind == ExclusionKind::archive);
  CHECK_THAT(f.excluded(old, "full")->reason, Catch::Contains("archival: false") && Catch::Contains("block 1"));

  auto latest = f.router.plan(f.chain, "eth_getBalance", "[" + kAddr + ",\"latest\"]", {});
  CHECK_FALSE(latest.needs_archive);
  CHECK(latest.candidates.size() == 3);
  // Within archival_threshold (10) of the head: any provider.
  CHECK_FALSE(f.router.plan(f.chain, "eth_getBalance", "[" + kAddr + ",\"0x5a\"]", {}).needs_archive);
  // `earliest` needs an archive even without a known head.
  Fixture g;
  CHECK(g.router.plan(g.chain, "eth_getCode", "[" + kAddr + ",\"earliest\"]", {}).needs_archive);
}

TEST_CASE("chain-aware: probe findings and answers teach which providers are archival", "[plan][chain]") {
  Fixture f;
  f.height("archive", 100);
  const std::string params = "[" + kAddr + ",\"0x1\"]";
  ProbeFindings found;
  found.t_ms = f.clock.now_ms();
  found.archival = false;
  f.store.record(ProbeEvent{f.key("quota"), found}, f.profile.health);
  auto plan = f.router.plan(f.chain, "eth_getBalance", params, {});
  REQUIRE(f.excluded(plan, "quota") != nullptr);
  CHECK_THAT(f.excluded(plan, "quota")->reason, Catch::Contains("probe"));

  // A later answer that read old state wins over the older probe.
  f.clock.advance(1'000);
  f.store.record(ArchivalEvent{f.key("quota"), ArchivalSeen{true, f.clock.now_ms()}}, f.profile.health);
  CHECK(f.excluded(f.router.plan(f.chain, "eth_getBalance", params, {}), "quota") == nullptr);
  f.store.record(ArchivalEvent{f.key("quota"), ArchivalSeen{false, f.clock.now_ms() + 1}}, f.profile.health);
  plan = f.router.plan(f.chain, "eth_getBalance", params, {});
  REQUIRE(f.excluded(plan, "quota") != nullptr);
  CHECK_THAT(f.excluded(plan, "quota")->reason, Catch::Contains("missing state"));
}

TEST_CASE("chain-aware: a block above a provider's height skips it while another has it", "[plan][chain]") {
  Fixture f;
  f.height("full", 100);
  f.height("archive", 102);
  f.height("quota", 102);
  auto plan = f.router.plan(f.chain, "eth_getBlockByNumber", R"(["0x66", false])", {});
  REQUIRE(f.excluded(plan, "full") != nullptr);
  CHECK(f.excluded(plan, "full")->kind == ExclusionKind::height);
  CHECK_THAT(f.excluded(plan, "full")->reason, Catch::Contains("block 102 is above its height"));
  // A block nobody has yet (the future) goes to everyone: they answer for themselves.
  CHECK(f.router.plan(f.chain, "eth_getBlockByNumber", R"(["0x1000", false])", {}).candidates.size() == 3);
}

TEST_CASE("chain-aware: eth_getLogs over more than max_block_range skips the provider", "[plan][chain]") {
  Fixture f;
  auto wide = f.router.plan(f.chain, "eth_getLogs", R"([{"fromBlock":"0x1","toBlock":"0x4e20"}])", {});
  REQUIRE(f.excluded(wide, "full") != nullptr);
  CHECK(f.excluded(wide, "full")->kind == ExclusionKind::limit);
  CHECK_THAT(f.excluded(wide, "full")->reason, Catch::Contains("20000 blocks") && Catch::Contains("10000"));
  auto narrow = f.router.plan(f.chain, "eth_getLogs", R"([{"fromBlock":"0x1","toBlock":"0x2710"}])", {});
  CHECK(f.excluded(narrow, "full") == nullptr);
}

TEST_CASE("chain-aware: an empty token bucket skips the provider until it refills", "[plan][chain]") {
  Fixture f;
  const Quota q{5, 5};
  for (int i = 0; i < 5; ++i) {
    CHECK(f.excluded(f.router.plan(f.chain, "eth_blockNumber", "[]", {}), "quota") == nullptr);
    f.store.record(QuotaEvent{f.key("quota"), f.clock.now_ms(), 1, q}, f.profile.health);
  }
  auto plan = f.router.plan(f.chain, "eth_blockNumber", "[]", {});
  REQUIRE(f.excluded(plan, "quota") != nullptr);
  CHECK(f.excluded(plan, "quota")->kind == ExclusionKind::quota);
  CHECK(f.excluded(plan, "quota")->retry_in_ms == 200);  // 5 tokens per second
  f.clock.advance(200);
  CHECK(f.excluded(f.router.plan(f.chain, "eth_blockNumber", "[]", {}), "quota") == nullptr);
}

TEST_CASE("chain-aware: staying behind longer than lag_trip_ms trips the breaker with reason lag", "[chain]") {
  Fixture f;
  auto observe = [&](const std::string& id, std::uint64_t block) {
    observe_height(f.store, f.profile, f.chain, f.provider(id), Height{block, f.clock.now_ms()}, 0.0);
  };
  auto& providers = f.store.state().providers;
  observe("archive", 100);
  observe("full", 80);
  CHECK(providers.at(f.key("full")).lag.behind_since_ms == f.clock.now_ms());
  f.clock.advance(4'000);
  observe("archive", 102);
  observe("full", 82);
  CHECK(providers.at(f.key("full")).breaker.state == BreakerState::closed);
  f.clock.advance(2'000);
  observe("archive", 103);
  observe("full", 83);  // 6 s behind > lag_trip_ms 5 s
  const auto& b = providers.at(f.key("full")).breaker;
  CHECK(b.state == BreakerState::open);
  CHECK_THAT(b.reason, Catch::StartsWith("lag: 20 blocks behind"));
  auto plan = f.router.plan(f.chain, "eth_blockNumber", "[]", {});
  CHECK(f.excluded(plan, "full")->kind == ExclusionKind::breaker);
  CHECK_THAT(f.excluded(plan, "full")->reason, Catch::Contains("lag"));

  // Catching up clears the mark; nothing trips without a new lag.
  Fixture g;
  auto observe_g = [&](const std::string& id, std::uint64_t block) {
    observe_height(g.store, g.profile, g.chain, g.provider(id), Height{block, g.clock.now_ms()}, 0.0);
  };
  observe_g("archive", 100);
  observe_g("full", 80);
  g.clock.advance(3'000);
  observe_g("full", 101);
  CHECK(g.store.state().providers.at(g.key("full")).lag.behind_since_ms == 0);
  g.clock.advance(3'000);
  observe_g("full", 80);
  CHECK(g.store.state().providers.at(g.key("full")).breaker.state == BreakerState::closed);
}

TEST_CASE("chain-aware: a lag exclusion lasts while both heights are fresh, then goes with them", "[plan][chain]") {
  Fixture f;  // block_time_ms 2000: horizon 60 s
  f.height("archive", 100);
  f.height("quota", 100);
  f.height("full", 90);  // seen together: 10 behind
  for (int i = 0; i < 6; ++i) {  // 0 .. 50 s later: the same judgement, as probe left it
    auto plan = f.router.plan(f.chain, "eth_blockNumber", "[]", {});
    REQUIRE(f.excluded(plan, "full") != nullptr);
    CHECK(f.excluded(plan, "full")->kind == ExclusionKind::lag);
    CHECK_THAT(f.excluded(plan, "full")->reason, Catch::Contains("lagging 10 blocks"));
    f.clock.advance(10'000);
  }
  f.clock.advance(11'000);  // 61 s: nothing fresh says anything about now
  CHECK(f.excluded(f.router.plan(f.chain, "eth_blockNumber", "[]", {}), "full") == nullptr);
}

TEST_CASE("chain-aware: lag is never measured against the high-water mark alone (a restarted chain)",
          "[plan][chain]") {
  Fixture f;
  // The chain was at 20 (the mark), then every node restarted from 0.
  f.store.record(HighWaterEvent{chain_key(f.profile.name, f.chain), Height{20, f.clock.now_ms()}, false},
                 f.profile.health);
  f.clock.advance(1'000);
  for (const char* id : {"full", "archive", "quota"}) f.height(id, 0);
  auto plan = f.router.plan(f.chain, "eth_blockNumber", "[]", {});
  CHECK(plan.excluded.empty());
  CHECK_FALSE(plan.lag_fallback);
  CHECK(plan.head == 0);
  // A block the new chain may have mined since is not "above its height (~0; head ~20)".
  auto block = f.router.plan(f.chain, "eth_getBlockByNumber", R"(["0x5", false])", {});
  CHECK(block.excluded.empty());
}

TEST_CASE("chain-aware: one provider over-reporting is quarantined; the honest ones are not lagging", "[plan][chain]") {
  Fixture f;
  f.height("full", 100);
  f.height("archive", 99);
  f.height("quota", 20'000'000);
  auto plan = f.router.plan(f.chain, "eth_blockNumber", "[]", {});
  CHECK(f.order(plan) == std::vector<std::string>{"full", "archive"});
  REQUIRE(f.excluded(plan, "quota") != nullptr);
  CHECK(f.excluded(plan, "quota")->kind == ExclusionKind::quarantine);
  CHECK_THAT(f.excluded(plan, "quota")->reason, Catch::Contains("height 20000000 is not believed"));
  CHECK(plan.head == 100);
  // Lag judgements agree: nobody is behind the liar.
  observe_height(f.store, f.profile, f.chain, f.provider("quota"), Height{20'000'001, f.clock.now_ms()}, 0.0);
  observe_height(f.store, f.profile, f.chain, f.provider("archive"), Height{99, f.clock.now_ms()}, 0.0);
  CHECK(f.store.state().providers.at(f.key("archive")).lag.behind_since_ms == 0);
  // 0x7fffffffffffffff alone: no chain is that long; still tried when nothing else is left.
  Fixture g;
  g.height("quota", 0x7fffffffffffffffULL);
  RouteOptions just_quota;
  just_quota.provider = "quota";
  auto only = g.router.plan(g.chain, "eth_blockNumber", "[]", just_quota);
  CHECK(only.lag_fallback);
  CHECK(g.order(only) == std::vector<std::string>{"quota"});
}

TEST_CASE("chain-aware: a lag judged when the heights were seen stands while its height is fresh", "[plan][chain]") {
  Fixture f;  // block_time_ms 2000
  auto observe = [&](const std::string& id, std::uint64_t block) {
    observe_height(f.store, f.profile, f.chain, f.provider(id), Height{block, f.clock.now_ms()}, 0.0);
  };
  observe("archive", 100);
  observe("full", 90);
  // 30 s later the others are seen again, still at 100 (an idle chain): moved forward, full's old
  // 90 would pass for ~105. The judgement made on like observations stands.
  f.clock.advance(30'000);
  observe("archive", 100);
  auto plan = f.router.plan(f.chain, "eth_blockNumber", "[]", {});
  REQUIRE(f.excluded(plan, "full") != nullptr);
  CHECK(f.excluded(plan, "full")->kind == ExclusionKind::lag);
  CHECK_THAT(f.excluded(plan, "full")->reason, Catch::Contains("lagging 10 blocks behind (height 90 seen 30.0s ago"));
  // Its own newer height is judged afresh.
  observe("full", 100);
  CHECK(f.excluded(f.router.plan(f.chain, "eth_blockNumber", "[]", {}), "full") == nullptr);
  // And the judgement goes with its height's freshness.
  f.clock.advance(1'000);
  observe("full", 90);
  CHECK(f.excluded(f.router.plan(f.chain, "eth_blockNumber", "[]", {}), "full") != nullptr);
  f.clock.advance(61'000);
  CHECK(f.excluded(f.router.plan(f.chain, "eth_blockNumber", "[]", {}), "full") == nullptr);
}

}  // namespace unit_chain_aware_test

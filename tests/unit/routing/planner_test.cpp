// The planner on its own (issue 16): a health view and a clock, no transport, no router.
#include <catch2/catch.hpp>
#include <map>

#include "rpcroute/planner.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_planner_test {

using namespace rpcroute;

namespace {

constexpr const char* kProfile = R"(
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - { id: a, url: "http://127.0.0.1:1", priority: 1 }
      - { id: b, url: "http://127.0.0.1:2", priority: 2 }
routing:
  default_strategy: priority
)";

}  // namespace

TEST_CASE("planner: plans from a health view of a hand-made state, without a transport", "[planner]") {
  Profile profile = *load_profile_text(kProfile, "test.yaml");
  const Chain& chain = profile.chains.front();
  FakeClock clock;
  Random rng{1};
  State state;
  ProviderState wrong;
  wrong.probe.chain_id = 1;  // probe saw mainnet behind a
  wrong.probe.t_ms = clock.now_ms();
  state.providers[provider_key(profile.name, chain.name, chain.providers[0])] = wrong;
  StateView view(state);
  Planner planner(profile, view, clock, rng);
  Plan plan = planner.plan(chain, "eth_blockNumber", "[]", {});
  REQUIRE(plan.candidates.size() == 1);
  CHECK(plan.candidates[0].provider->id == "b");
  REQUIRE(plan.excluded.size() == 1);
  CHECK(plan.excluded[0].kind == ExclusionKind::chain_id);
}

TEST_CASE("planner: a sender's calls stay with the provider its last call used", "[planner]") {
  Profile profile = *load_profile_text(kProfile, "test.yaml");
  const Chain& chain = profile.chains.front();
  FakeClock clock;
  Random rng{1};
  State state;
  StateView view(state);
  LocalTraffic traffic;
  Planner planner(profile, view, clock, rng, traffic);
  const std::string params = R"(["0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266","pending"])";
  CHECK(planner.plan(chain, "eth_getTransactionCount", params, {}).candidates[0].provider->id == "a");
  traffic.sticky.stick(chain.name, sticky_key("eth_getTransactionCount", params), "b", clock.now_ms());
  auto plan = planner.plan(chain, "eth_getTransactionCount", params, {});
  CHECK(plan.candidates[0].provider->id == "b");
  CHECK(plan.candidates[0].first_probability == 1.0);
}

TEST_CASE("planner: backups get no first attempt while a primary is usable, all of them when none is",
          "[planner][groups]") {
  Profile profile = *load_profile_text(R"(
chains:
  local:
    chain_id: 31337
    providers:
      - { id: p1, url: "http://127.0.0.1:1" }
      - { id: b1, url: "http://127.0.0.1:2", group: backup }
      - { id: p2, url: "http://127.0.0.1:3", group: primary }
      - { id: b2, url: "http://127.0.0.1:4", group: backup }
)",
                                       "groups.yaml");
  const Chain& chain = profile.chains.front();
  REQUIRE(chain.providers[1].group == ProviderGroup::backup);
  REQUIRE(chain.providers[2].group == ProviderGroup::primary);
  FakeClock clock;
  Random rng{7};
  State state;
  StateView view(state);
  Planner planner(profile, view, clock, rng);
  std::map<std::string, int> firsts;
  for (int i = 0; i < 400; ++i) {
    auto plan = planner.plan(chain, "eth_blockNumber", "[]", {});
    REQUIRE(plan.candidates.size() == 4);
    ++firsts[plan.candidates[0].provider->id];
    CHECK(plan.candidates[2].provider->group == ProviderGroup::backup);
    CHECK(plan.candidates[3].provider->group == ProviderGroup::backup);
  }
  CHECK(firsts["b1"] + firsts["b2"] == 0);
  CHECK(firsts["p1"] > 120);  // load_balanced: balanced among the primaries
  CHECK(firsts["p2"] > 120);

  // Every primary's breaker open: the backups serve, balanced, and the primaries are not tried.
  for (std::size_t i : {0U, 2U}) {
    ProviderState open;
    open.breaker.state = BreakerState::open;
    open.breaker.opened_ms = clock.now_ms();
    open.breaker.recovery_ms = 30'000;
    state.providers[provider_key(profile.name, chain.name, chain.providers[i])] = open;
  }
  firsts.clear();
  for (int i = 0; i < 400; ++i) {
    auto plan = planner.plan(chain, "eth_blockNumber", "[]", {});
    REQUIRE(plan.candidates.size() == 2);
    ++firsts[plan.candidates[0].provider->id];
  }
  CHECK(firsts["b1"] > 120);
  CHECK(firsts["b2"] > 120);
}

TEST_CASE("profile: group is primary or backup, primary by default", "[planner][groups]") {
  auto bad = load_profile_text(R"(
chains:
  local:
    chain_id: 1
    providers:
      - { id: a, url: "http://127.0.0.1:1", group: standby }
)",
                               "bad.yaml");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::Contains("'group' must be primary or backup, not 'standby'"));
  auto good = load_profile_text(kProfile, "test.yaml");
  REQUIRE(good);
  CHECK(good->chains[0].providers[0].group == ProviderGroup::primary);
}

}  // namespace unit_planner_test

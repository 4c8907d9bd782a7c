// The planner on its own (issue 16): a health view and a clock, no transport, no router.
#include <catch2/catch.hpp>

#include "rpcroute/planner.hpp"

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

#include <catch2/catch.hpp>

#include "rpcroute/probe.hpp"
#include "rpcroute/state.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_probe_test {

using namespace rpcroute;

namespace {

ProbeReport report(std::optional<std::uint64_t> chain_id, std::optional<std::uint64_t> height, bool reachable = true) {
  ProbeReport r;
  r.reachable = reachable;
  r.chain_id = chain_id;
  r.height = height;
  r.syncing = false;
  return r;
}

}  // namespace

TEST_CASE("assess_probes: healthy, lagging, wrong chain, syncing and unreachable", "[probe]") {
  Chain chain;
  chain.chain_id = 31337;
  chain.max_lag_blocks = 2;
  std::vector<ProbeReport> reports{report(31337, 100), report(31337, 98), report(31337, 90), report(5, 500),
                                   report(std::nullopt, std::nullopt, false), report(31337, 100)};
  reports.back().syncing = true;
  reports[4].failure = "eth_chainId connect_failed";
  auto v = assess_probes(chain, reports);
  REQUIRE(v.size() == 6);
  CHECK(v[0].healthy);
  CHECK(v[1].healthy);  // 2 behind is within max_lag_blocks
  CHECK(v[1].lag == 2);
  CHECK_FALSE(v[2].healthy);
  CHECK(v[2].lag == 10);
  CHECK_THAT(v[2].reason, Catch::Contains("lagging 10 blocks"));
  CHECK_FALSE(v[3].healthy);  // its height (500) does not count as the best: wrong chain
  CHECK_THAT(v[3].reason, Catch::Contains("wrong chain id 5"));
  CHECK_FALSE(v[4].healthy);
  CHECK_THAT(v[4].reason, Catch::Contains("connect_failed"));
  CHECK_FALSE(v[5].healthy);
  CHECK(v[5].reason == "syncing");
}

TEST_CASE("ProbeReport::findings keeps what the probe learned", "[probe]") {
  auto r = report(31337, 7);
  r.archival = false;
  r.batch = true;
  r.client_version = "anvil/v1.7.1";
  r.t_ms = 123;
  auto f = r.findings();
  CHECK(f.chain_id == 31337);
  CHECK(f.archival == std::optional<bool>(false));
  CHECK(f.batch == std::optional<bool>(true));
  CHECK(f.client_version == "anvil/v1.7.1");
  CHECK(f.t_ms == 123);
}

TEST_CASE("probe findings survive the state file round trip", "[probe][state]") {
  State s;
  ProbeFindings f;
  f.t_ms = 5;
  f.chain_id = 10;
  f.archival = true;
  f.syncing = false;
  f.client_version = "geth/1.14";
  apply_event(s, ProbeEvent{"p/c/x#f", f}, HealthConfig{});
  auto back = parse_state(serialize_state(s, 6));
  REQUIRE(back);
  const auto& g = back->providers.at("p/c/x#f").probe;
  CHECK(g.chain_id == 10);
  CHECK(g.archival == std::optional<bool>(true));
  CHECK_FALSE(g.batch.has_value());
  CHECK(g.syncing == std::optional<bool>(false));
  CHECK(g.client_version == "geth/1.14");
}

}  // namespace unit_probe_test

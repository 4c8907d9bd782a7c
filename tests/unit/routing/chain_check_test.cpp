// `call`'s chain id check (issue 21, chain_check.cpp): asked alongside the first request to a
// provider whose chain id the state does not hold, remembered, and a provider on another chain
// left out like the probe's exclusion; nothing extra once the state knows.
#include <catch2/catch.hpp>

#include "../support/fake_transport.hpp"
#include "rpcroute/executor.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_chain_check_test {

using namespace rpcroute;
using test::FakeTransport;

namespace {

constexpr const char* kProfile = R"(
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - { id: a, url: "http://a.test", priority: 1 }
      - { id: b, url: "http://b.test", priority: 2 }
routing:
  default_strategy: priority
)";

/// A node of chain `chain_id`: eth_chainId answered with it, every other call with "0x10".
FakeTransport::Handler node(std::uint64_t chain_id) {
  return [chain_id](const HttpRequest&, const std::vector<FakeTransport::Call>& calls) {
    return FakeTransport::reply(calls, [&](const FakeTransport::Call& c) {
      return c.method == "eth_chainId" ? fmt::format(R"("result":"0x{:x}")", chain_id)
                                       : std::string(R"("result":"0x10")");
    });
  };
}

struct Fixture {
  Profile profile = *load_profile_text(kProfile, "test.yaml");
  FakeClock clock;
  Random rng{7};
  asio::io_context io;
  FakeTransport transport{io, &clock};
  StateStore store{std::nullopt, clock, [](const std::string&) {}};
  LocalTraffic traffic;
  Planner planner{profile, store, clock, rng, traffic};
  Executor executor{profile, planner, transport, store, clock, rng, traffic};
  const Chain& chain = profile.chains.front();

  CallOutcome route_one(std::string method, bool verify = true) {
    jsonrpc::Call c;
    c.id = "1";
    c.method = std::move(method);
    c.params = "[]";
    std::vector<jsonrpc::Call> calls{c};
    RouteOptions options;
    options.verify_chain_id = verify;
    std::vector<CallOutcome> out;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> { out = co_await executor.route(chain, calls, options); },
        asio::detached);
    io.run();
    io.restart();
    REQUIRE(out.size() == 1);
    return out[0];
  }
  const ProviderState* state(std::string_view id) {
    return store.provider(provider_key(profile.name, chain.name, *chain.find_provider(id)));
  }
  std::vector<std::string> methods_sent(std::size_t i) {
    std::vector<std::string> m;
    for (const auto& c : transport.log.at(i).calls) m.push_back(c.method);
    return m;
  }
};

}  // namespace

TEST_CASE("chain check: asked in the first request's batch, remembered, never asked again",
          "[executor][chain_check]") {
  Fixture f;
  f.transport.on("http://a.test", node(31337));
  auto o = f.route_one("eth_blockNumber");
  CHECK(o.status == CallOutcome::Status::result);
  CHECK(o.provider == "a");
  CHECK(o.response == R"({"jsonrpc":"2.0","id":1,"result":"0x10"})");
  REQUIRE(f.transport.log.size() == 1);
  CHECK(f.methods_sent(0) == std::vector<std::string>{"eth_blockNumber", "eth_chainId"});
  REQUIRE(f.state("a") != nullptr);
  CHECK(f.state("a")->probe.chain_id == 31337);
  CHECK(f.state("a")->probe.t_ms == 0);  // not a probe: one that runs later replaces it
  // Our eth_chainId is no traffic: the call's method has a sample, it has none.
  CHECK(f.state("a")->methods.count("eth_blockNumber") == 1);
  CHECK(f.state("a")->methods.count("eth_chainId") == 0);
  // The state knows now: the next request goes alone.
  o = f.route_one("eth_blockNumber");
  CHECK(o.provider == "a");
  REQUIRE(f.transport.log.size() == 2);
  CHECK(f.methods_sent(1) == std::vector<std::string>{"eth_blockNumber"});
}

TEST_CASE("chain check: a provider on another chain is left out, its answer never delivered",
          "[executor][chain_check]") {
  Fixture f;
  f.transport.on("http://a.test", node(1));
  f.transport.on("http://b.test", node(31337));
  auto o = f.route_one("eth_blockNumber");
  CHECK(o.status == CallOutcome::Status::result);
  CHECK(o.provider == "b");
  CHECK(o.attempts.size() == 1);  // a's answer was another chain's: not an attempt
  REQUIRE_FALSE(o.excluded.empty());
  CHECK(o.excluded.back().provider == "a");
  CHECK(o.excluded.back().kind == ExclusionKind::chain_id);
  CHECK(o.excluded.back().reason.find("wrong chain id 1 (the profile says 31337)") !=
        std::string::npos);
  CHECK(f.state("a")->probe.chain_id == 1);
  CHECK(f.state("a")->breaker.state == BreakerState::closed);  // it answered: not a failure
  // Next time the planner excludes it, as after a probe; b's id is known: nothing extra is sent.
  const auto before = f.transport.log.size();
  o = f.route_one("eth_blockNumber");
  CHECK(o.provider == "b");
  CHECK(f.transport.count("http://a.test") == 1);
  REQUIRE(f.transport.log.size() == before + 1);
  CHECK(f.methods_sent(before) == std::vector<std::string>{"eth_blockNumber"});
  CHECK(o.excluded.front().reason.find("seen by a call's chain id check") != std::string::npos);
}

TEST_CASE("chain check: every provider on another chain: unavailable, with the reason",
          "[executor][chain_check]") {
  Fixture f;
  f.transport.on("http://a.test", node(1));
  f.transport.on("http://b.test", node(5));
  const auto o = f.route_one("eth_getBalance");
  CHECK(o.status == CallOutcome::Status::unavailable);
  CHECK(o.error.find("wrong chain id 5") != std::string::npos);
}

TEST_CASE("chain check: a provider that refuses batches is asked alone, and then the next time",
          "[executor][chain_check]") {
  Fixture f;
  int batches = 0;
  f.transport.on("http://a.test", [&](const HttpRequest& r,
                                      const std::vector<FakeTransport::Call>& calls) {
    if (calls.size() > 1) {
      ++batches;
      HttpResponse h;
      h.status = 200;
      h.body =
          R"({"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"batches are not served"}})";
      return h;
    }
    return node(31337)(r, calls);
  });
  f.transport.on("http://b.test", node(31337));
  auto o = f.route_one("eth_blockNumber");
  CHECK(o.status == CallOutcome::Status::result);
  CHECK(batches == 1);
  REQUIRE(f.state("a") != nullptr);
  CHECK(f.state("a")->probe.batch == false);
  CHECK(f.state("a")->probe.chain_id == 0);
  // Asked alone now, before the call.
  const auto before = f.transport.log.size();
  o = f.route_one("eth_blockNumber");
  CHECK(o.provider == "a");
  CHECK(batches == 1);
  REQUIRE(f.transport.log.size() == before + 2);
  CHECK(f.methods_sent(before) == std::vector<std::string>{"eth_chainId"});
  CHECK(f.state("a")->probe.chain_id == 31337);
}

TEST_CASE("chain check: off (the sidecar, which probes), nothing extra is sent",
          "[executor][chain_check]") {
  Fixture f;
  f.transport.on("http://a.test", node(1));
  const auto o = f.route_one("eth_blockNumber", false);
  CHECK(o.provider == "a");
  CHECK(f.methods_sent(0) == std::vector<std::string>{"eth_blockNumber"});
}

}  // namespace unit_chain_check_test

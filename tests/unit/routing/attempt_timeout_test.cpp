// The per-method default attempt timeouts as the executor applies them (issue 23: only the 5 s
// default was tested end to end): cheap 5 s, standard 10 s, heavy 20 s, trace 60 s, the overall
// deadline stretched past the profile's 30 s for debug_* / trace_*, and a provider's own
// timeout_ms or a method override in their place. Read from what the scripted transport was asked.
#include <catch2/catch.hpp>

#include "../support/fake_transport.hpp"
#include "rpcroute/executor.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_attempt_timeout_test {

using namespace rpcroute;
using test::FakeTransport;

namespace {

constexpr const char* kTimeoutProfile = R"(
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - { id: a, url: "http://a.test" }
      - { id: own, url: "http://own.test", timeout_ms: 3000 }
routing:
  default_strategy: priority
  method_overrides:
    eth_getBlockReceipts: { timeout_ms: 7000 }
)";

struct TimeoutFixture {
  Profile profile = *load_profile_text(kTimeoutProfile, "test.yaml");
  FakeClock clock;
  Random rng{7};
  asio::io_context io;
  FakeTransport transport{io, &clock};
  StateStore store{std::nullopt, clock, [](const std::string&) {}};
  LocalTraffic traffic;
  Planner planner{profile, store, clock, rng, traffic};
  Executor executor{profile, planner, transport, store, clock, rng, traffic};
  const Chain& chain = profile.chains.front();

  /// The attempt timeout the transport was given for one call of `method` on `provider` alone.
  std::int64_t attempt_timeout(const std::string& method, const std::string& provider,
                               std::string params = "[]") {
    transport.log.clear();
    jsonrpc::Call c;
    c.id = "1";
    c.method = method;
    c.params = std::move(params);
    std::vector<jsonrpc::Call> calls{c};
    RouteOptions options;
    options.provider = provider;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> { (void)co_await executor.route(chain, calls, options); },
        asio::detached);
    io.run();
    io.restart();
    REQUIRE(transport.log.size() == 1);
    return transport.log[0].timeout_ms;
  }
};

}  // namespace

TEST_CASE("attempt timeouts: the per-class defaults reach the transport", "[executor][timeouts]") {
  TimeoutFixture f;
  f.transport.on("http://a.test", FakeTransport::results("\"0x1\""));
  CHECK(f.attempt_timeout("eth_blockNumber", "a") == 5'000);                           // cheap
  CHECK(f.attempt_timeout("erigon_getHeaderByNumber", "a", R"(["0x1"])") == 10'000);   // standard
  CHECK(f.attempt_timeout("eth_call", "a", R"([{"to":"0x00"},"latest"])") == 20'000);  // heavy
  CHECK(f.attempt_timeout("eth_getLogs", "a", R"([{"fromBlock":"0x1","toBlock":"0x2"}])") ==
        20'000);  // heavy
  // trace: 60 s, beyond the profile's 30 s overall deadline, which is stretched for it (were it
  // not, the attempt would be cut to 30 s).
  CHECK(f.attempt_timeout("debug_traceTransaction", "a", R"(["0x01"])") == 60'000);
  CHECK(f.attempt_timeout("trace_block", "a", R"(["0x1"])") == 60'000);
  // A method outside the catalogue: standard.
  CHECK(f.attempt_timeout("acme_somethingNew", "a") == 10'000);
}

TEST_CASE("attempt timeouts: a provider's timeout_ms and a method override take their place",
          "[executor][timeouts]") {
  TimeoutFixture f;
  f.transport.on("http://a.test", FakeTransport::results("\"0x1\""));
  f.transport.on("http://own.test", FakeTransport::results("\"0x1\""));
  CHECK(f.attempt_timeout("eth_getLogs", "own", R"([{"fromBlock":"0x1","toBlock":"0x2"}])") ==
        3'000);
  CHECK(f.attempt_timeout("debug_traceTransaction", "own", R"(["0x01"])") == 3'000);
  CHECK(f.attempt_timeout("eth_getBlockReceipts", "a", R"(["0x1"])") == 7'000);
  CHECK(f.attempt_timeout("eth_getBlockReceipts", "own", R"(["0x1"])") == 7'000);
}

// Issue 23: the filter pin was only ever seeded by hand in tests. Here eth_newFilter itself is
// routed (the first provider failing, so the filter lives on the second), and the pin it records
// sends the filter's reads there and nowhere else, whatever the case of the id.
TEST_CASE("filter pin: eth_newFilter records where the filter lives; its reads go there",
          "[executor][filter]") {
  TimeoutFixture f;
  f.transport.on("http://a.test", FakeTransport::status(503));
  f.transport.on("http://own.test", FakeTransport::results("\"0xAbC1\""));
  jsonrpc::Call c;
  c.id = "1";
  c.method = "eth_newFilter";
  c.params = R"([{"fromBlock":"latest"}])";
  std::vector<jsonrpc::Call> calls{c};
  std::vector<CallOutcome> out;
  asio::co_spawn(
      f.io, [&]() -> asio::awaitable<void> { out = co_await f.executor.route(f.chain, calls, {}); },
      asio::detached);
  f.io.run();
  f.io.restart();
  REQUIRE(out.size() == 1);
  REQUIRE(out[0].provider == "own");
  for (const char* id : {"0xabc1", "0xABC1"}) {
    const auto plan =
        f.planner.plan(f.chain, "eth_getFilterChanges", fmt::format(R"(["{}"])", id), {});
    REQUIRE(plan.candidates.size() == 1);
    CHECK(plan.candidates.front().provider->id == "own");
  }
  // Another filter id is not pinned: both providers are candidates.
  CHECK(f.planner.plan(f.chain, "eth_getFilterChanges", R"(["0x99"])", {}).candidates.size() == 2);
}

}  // namespace unit_attempt_timeout_test

// route() end to end over the Transport seam: the router with a scripted transport, no sockets.
#include <catch2/catch.hpp>

#include "../support/fake_transport.hpp"
#include "rpcroute/router.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_route_transport_test {

using namespace rpcroute;

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
health:
  circuit_breaker: { failure_threshold: 1, recovery_timeout_ms: 10000, jitter: 0 }
)";

struct Fixture {
  Profile profile = *load_profile_text(kProfile, "test.yaml");
  FakeClock clock;
  Random rng{7};
  asio::io_context io;
  test::FakeTransport transport{io, &clock};
  StateStore store{std::nullopt, clock, [](const std::string&) {}};
  Router router{profile, transport, store, clock, rng};
  const Chain& chain = profile.chains.front();

  std::vector<CallOutcome> route(std::string_view method, std::string_view params = "[]", RouteOptions options = {}) {
    std::vector<jsonrpc::Call> calls(1);
    calls[0].id = "1";
    calls[0].method = std::string(method);
    calls[0].params = std::string(params);
    std::vector<CallOutcome> out;
    asio::co_spawn(
        io, [&]() -> asio::awaitable<void> { out = co_await router.route(chain, calls, options); }, asio::detached);
    io.run();
    io.restart();
    return out;
  }
};

}  // namespace

TEST_CASE("route: a provider failure fails over to the next provider", "[route]") {
  Fixture f;
  f.transport.on("http://a.test", test::FakeTransport::status(503));
  f.transport.on("http://b.test", test::FakeTransport::results("\"0x10\""));
  auto out = f.route("eth_blockNumber");
  REQUIRE(out.size() == 1);
  CHECK(out[0].status == CallOutcome::Status::result);
  CHECK(out[0].provider == "b");
  CHECK(out[0].response == R"({"jsonrpc":"2.0","id":1,"result":"0x10"})");
  REQUIRE(out[0].attempts.size() == 2);
  CHECK(out[0].attempts[0].provider == "a");
  CHECK(f.transport.count("http://a.test") == 1);
}

TEST_CASE("route: a deterministic error is the answer, with no failover", "[route]") {
  Fixture f;
  f.transport.on("http://a.test", test::FakeTransport::rpc_error(3, "execution reverted"));
  f.transport.on("http://b.test", test::FakeTransport::results("\"0x\""));
  auto out = f.route("eth_call", R"([{"to":"0x0000000000000000000000000000000000000001"},"latest"])");
  REQUIRE(out.size() == 1);
  CHECK(out[0].status == CallOutcome::Status::rpc_error);
  CHECK(out[0].provider == "a");
  CHECK(f.transport.count("http://b.test") == 0);
}

TEST_CASE("route: a call goes upstream and its answer comes back with the client's id", "[route]") {
  Fixture f;
  f.transport.on("http://a.test", test::FakeTransport::results("\"0x1\""));
  auto out = f.route("eth_gasPrice");
  REQUIRE(f.transport.log.size() == 1);
  REQUIRE(f.transport.log[0].calls.size() == 1);
  CHECK(f.transport.log[0].calls[0].method == "eth_gasPrice");
  CHECK(out[0].response == R"({"jsonrpc":"2.0","id":1,"result":"0x1"})");
}

}  // namespace unit_route_transport_test

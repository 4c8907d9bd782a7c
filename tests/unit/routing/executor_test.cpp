// The executor over the Transport seam (issue 16): failover order, no failover on deterministic
// errors, write safety, batch per-item failover, broadcast and the deadline, with a scripted
// transport and a fake clock.
#include <catch2/catch.hpp>

#include "../support/fake_transport.hpp"
#include "rpcroute/executor.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_executor_test {

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
      - { id: c, url: "http://c.test", priority: 3 }
routing:
  default_strategy: priority
  method_overrides:
    eth_sendRawTransaction: { broadcast: false }
    eth_sendTransaction: { broadcast: true }
health:
  circuit_breaker: { failure_threshold: 5, recovery_timeout_ms: 10000, jitter: 0 }
)";

// Not a valid transaction: the send has no sticky sender, which these cases do not need.
constexpr const char* kRawTx = "0x02";

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

  static jsonrpc::Call call(std::string id, std::string method, std::string params = "[]") {
    jsonrpc::Call c;
    c.id = std::move(id);
    c.method = std::move(method);
    c.params = std::move(params);
    return c;
  }

  std::vector<CallOutcome> route(std::vector<jsonrpc::Call> calls, RouteOptions options = {}) {
    std::vector<CallOutcome> out;
    asio::co_spawn(
        io, [&]() -> asio::awaitable<void> { out = co_await executor.route(chain, calls, options); }, asio::detached);
    io.run();
    io.restart();
    return out;
  }
  CallOutcome route_one(std::string method, std::string params = "[]", RouteOptions options = {}) {
    auto out = route({call("1", std::move(method), std::move(params))}, std::move(options));
    REQUIRE(out.size() == 1);
    return out[0];
  }
  std::vector<std::string> tried(const CallOutcome& o) {
    std::vector<std::string> ids;
    for (const auto& a : o.attempts) ids.push_back(a.provider);
    return ids;
  }
};

}  // namespace

TEST_CASE("executor: failures fail over in the plan's order until one answers", "[executor]") {
  Fixture f;
  f.transport.on("http://a.test", FakeTransport::status(503));
  f.transport.on("http://b.test", FakeTransport::transport_error(TransportError::timeout));
  f.transport.on("http://c.test", FakeTransport::results("\"0x10\""));
  auto o = f.route_one("eth_blockNumber");
  CHECK(o.status == CallOutcome::Status::result);
  CHECK(o.provider == "c");
  CHECK(f.tried(o) == std::vector<std::string>{"a", "b", "c"});
  CHECK(o.response == R"({"jsonrpc":"2.0","id":1,"result":"0x10"})");
}

TEST_CASE("executor: max_attempts stops the failover", "[executor]") {
  Fixture f;
  f.transport.on("http://a.test", FakeTransport::status(503));
  f.transport.on("http://b.test", FakeTransport::status(503));
  f.transport.on("http://c.test", FakeTransport::results("\"0x10\""));
  RouteOptions two;
  two.max_attempts = 2;
  auto o = f.route_one("eth_blockNumber", "[]", two);
  CHECK(o.status == CallOutcome::Status::unavailable);
  CHECK(o.unavailable_reason == "attempt limit reached");
  CHECK(f.transport.count("http://c.test") == 0);
}

TEST_CASE("executor: every candidate failing ends unavailable with the attempts in the details", "[executor]") {
  Fixture f;
  f.transport.on("http://a.test", FakeTransport::status(503));
  f.transport.on("http://b.test", FakeTransport::status(502));
  f.transport.on("http://c.test", FakeTransport::status(500));
  auto o = f.route_one("eth_blockNumber");
  CHECK(o.status == CallOutcome::Status::unavailable);
  CHECK(o.unavailable_reason == "every candidate failed");
  CHECK_THAT(o.response, Catch::Contains("\"attempts\":[{\"provider\":\"a\""));
  CHECK_THAT(o.response, Catch::Contains("-32050"));
}

TEST_CASE("executor: execution reverted and invalid params are answers, not failures", "[executor]") {
  Fixture f;
  f.transport.on("http://a.test", FakeTransport::rpc_error(3, "execution reverted"));
  f.transport.on("http://b.test", FakeTransport::results("\"0x\""));
  auto o = f.route_one("eth_call", R"([{"to":"0x0000000000000000000000000000000000000001"},"latest"])");
  CHECK(o.status == CallOutcome::Status::rpc_error);
  CHECK(o.provider == "a");
  CHECK(f.transport.count("http://b.test") == 0);

  Fixture g;
  g.transport.on("http://a.test", FakeTransport::rpc_error(-32602, "invalid params"));
  g.transport.on("http://b.test", FakeTransport::results("\"0x1\""));
  auto p = g.route_one("eth_getBalance", R"(["0xzz","latest"])");
  CHECK(p.status == CallOutcome::Status::rpc_error);
  CHECK_THAT(p.error, Catch::Contains("invalid params"));
  CHECK(g.transport.count("http://b.test") == 0);
}

TEST_CASE("executor: a transaction send is never sent twice after an ambiguous failure", "[executor]") {
  for (auto error : {TransportError::timeout, TransportError::reset}) {
    Fixture f;
    f.transport.on("http://a.test", FakeTransport::transport_error(error));
    f.transport.on("http://b.test", FakeTransport::results("\"0xabc\""));
    auto o = f.route_one("eth_sendRawTransaction", std::string("[\"") + kRawTx + "\"]");
    CHECK(o.status == CallOutcome::Status::unavailable);
    CHECK_THAT(o.unavailable_reason, Catch::Contains("not retried elsewhere: the transaction may have reached a"));
    CHECK(f.transport.count("http://a.test") == 1);
    CHECK(f.transport.count("http://b.test") == 0);
  }
}

TEST_CASE("executor: a send that provably never left goes to the next provider", "[executor]") {
  Fixture f;  // no handler for a: connection refused
  f.transport.on("http://b.test", FakeTransport::results("\"0xabc\""));
  auto o = f.route_one("eth_sendRawTransaction", std::string("[\"") + kRawTx + "\"]");
  CHECK(o.status == CallOutcome::Status::result);
  CHECK(o.provider == "b");
  CHECK(f.transport.count("http://b.test") == 1);
}

TEST_CASE("executor: a node's unknown error on a send is returned, not resent", "[executor]") {
  Fixture f;
  f.transport.on("http://a.test", FakeTransport::rpc_error(-32000, "something odd happened"));
  f.transport.on("http://b.test", FakeTransport::results("\"0xabc\""));
  auto o = f.route_one("eth_sendRawTransaction", std::string("[\"") + kRawTx + "\"]");
  CHECK(o.status == CallOutcome::Status::rpc_error);
  CHECK_THAT(o.error, Catch::Contains("something odd happened"));
  CHECK(f.transport.count("http://b.test") == 0);
}

TEST_CASE("executor: a batch goes as one request and each item fails over on its own", "[executor]") {
  Fixture f;
  // a answers the first item and fails the second with a capability error; b answers it.
  f.transport.on("http://a.test", [](const HttpRequest&, const std::vector<FakeTransport::Call>& calls) {
    return FakeTransport::reply(calls, [](const FakeTransport::Call& c) -> std::string {
      if (c.method == "eth_gasPrice") return "\"result\":\"0x1\"";
      return R"("error":{"code":-32601,"message":"the method eth_feeHistory does not exist"})";
    });
  });
  f.transport.on("http://b.test", FakeTransport::results("\"0x2\""));
  auto out = f.route({Fixture::call("1", "eth_gasPrice"), Fixture::call("2", "eth_feeHistory", R"(["0x1","latest",[]])")});
  REQUIRE(out.size() == 2);
  CHECK(out[0].provider == "a");
  CHECK(out[0].result == "\"0x1\"");
  CHECK(out[1].provider == "b");
  CHECK(out[1].result == "\"0x2\"");
  REQUIRE(f.transport.log.size() == 2);
  CHECK(f.transport.log[0].calls.size() == 2);  // one upstream batch
  CHECK(f.transport.log[1].calls.size() == 1);  // only the failed item goes on
}

TEST_CASE("executor: broadcast sends to every provider and the first success answers", "[executor]") {
  Fixture f;
  f.transport.on("http://a.test", FakeTransport::rpc_error(-32000, "already known"));
  f.transport.on("http://b.test", FakeTransport::results("\"0xhash\""));
  f.transport.on("http://c.test", FakeTransport::status(503));
  auto o = f.route_one("eth_sendTransaction", R"([{"from":"0x0000000000000000000000000000000000000001"}])");
  asio::co_spawn(f.io, f.executor.drain(), asio::detached);
  f.io.run();
  CHECK(o.broadcast);
  CHECK(o.status == CallOutcome::Status::result);
  CHECK(o.provider == "b");
  CHECK(f.transport.count("http://a.test") == 1);
  CHECK(f.transport.count("http://b.test") == 1);
  CHECK(f.transport.count("http://c.test") == 1);
}

TEST_CASE("executor: the deadline cuts the last attempt short and then ends the call", "[executor]") {
  Fixture f;
  f.transport.on("http://a.test", FakeTransport::results("\"0x1\""), 60'000);  // hangs
  f.transport.on("http://b.test", FakeTransport::results("\"0x2\""));
  RouteOptions o;
  o.timeout_ms = 1'500;
  auto out = f.route_one("eth_blockNumber", "[]", o);
  REQUIRE(f.transport.log.size() >= 1);
  CHECK(f.transport.log[0].timeout_ms == 1'500);  // the attempt timeout is cut to the deadline
  CHECK(out.status == CallOutcome::Status::unavailable);
  CHECK(out.unavailable_reason == "deadline of 1500 ms exceeded");
  CHECK(f.transport.count("http://b.test") == 0);
}

}  // namespace unit_executor_test

// Empty and not-yet results (issue 19): a null lookup from a provider behind the height it needs is
// asked again of a provider known at or past that height; a genuine null is returned as null.
#include <catch2/catch.hpp>

#include "../support/fake_transport.hpp"
#include "rpcroute/methods.hpp"
#include "rpcroute/router.hpp"
#include "rpcroute/state.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_not_yet_test {

using namespace rpcroute;

namespace {

constexpr const char* kNotYetProfile = R"(
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    max_lag_blocks: 2
    providers:
      - { id: a, url: "http://a.test", priority: 1 }
      - { id: b, url: "http://b.test", priority: 2 }
      - { id: c, url: "http://c.test", priority: 3 }
routing:
  default_strategy: priority
)";

constexpr const char* kReceipt = R"({"transactionHash":"0x01","blockNumber":"0x64","status":"0x1"})";
const std::string kHashParams = R"(["0x)" + std::string(64, '1') + R"("])";

struct NotYetFixture {
  explicit NotYetFixture(const char* text = kNotYetProfile) : profile(*load_profile_text(text, "t.yaml")) {}
  Profile profile;
  FakeClock clock;
  Random rng{7};
  asio::io_context io;
  test::FakeTransport transport{io, &clock};
  StateStore store{std::nullopt, clock, [](const std::string&) {}};
  Router router{profile, transport, store, clock, rng};
  const Chain& chain = profile.chains.front();

  void height(const std::string& id, std::uint64_t block) {
    store.record(HeightEvent{provider_key(profile.name, chain.name, *chain.find_provider(id)),
                             Height{block, clock.now_ms()}},
                 profile.health);
  }
  CallOutcome call(std::string method, std::string params) {
    std::vector<jsonrpc::Call> calls(1);
    calls[0].id = "3";
    calls[0].method = std::move(method);
    calls[0].params = std::move(params);
    std::vector<CallOutcome> out;
    asio::co_spawn(
        io, [&]() -> asio::awaitable<void> { out = co_await router.route(chain, calls, {}); },
        asio::detached);
    io.run();
    io.restart();
    return out.at(0);
  }
};

}  // namespace

TEST_CASE("not yet: the catalogue marks the lookups by hash and by number", "[notyet]") {
  for (const char* m : {"eth_getTransactionReceipt", "eth_getTransactionByHash", "eth_getBlockByHash",
                        "eth_getBlockByNumber", "eth_getBlockTransactionCountByHash",
                        "eth_getBlockTransactionCountByNumber", "eth_getBlockReceipts",
                        "eth_getTransactionByBlockNumberAndIndex"}) {
    INFO(m);
    CHECK(method_info(m).null_not_yet);
  }
  for (const char* m : {"eth_getBalance", "eth_call", "eth_blockNumber", "eth_getLogs", "eth_sendRawTransaction"}) {
    INFO(m);
    CHECK_FALSE(method_info(m).null_not_yet);
  }
}

TEST_CASE("not yet: a null receipt from a provider behind is asked of one at the height", "[notyet][route]") {
  NotYetFixture f;
  f.height("a", 98);
  f.height("b", 100);
  f.height("c", 100);
  f.transport.on("http://a.test", test::FakeTransport::results("null"));
  f.transport.on("http://b.test", test::FakeTransport::results(kReceipt));
  f.transport.on("http://c.test", test::FakeTransport::results(kReceipt));
  auto out = f.call("eth_getTransactionReceipt", kHashParams);
  REQUIRE(out.status == CallOutcome::Status::result);
  CHECK(out.result == kReceipt);
  CHECK(out.provider == "b");
  CHECK(out.empty_retries == 1);
  REQUIRE(out.attempts.size() == 2);
  CHECK(out.attempts[0].result.cls == OutcomeClass::success);  // not a failure for the breaker
  const ProviderState* a = f.store.provider(provider_key(f.profile.name, f.chain.name, f.chain.providers[0]));
  REQUIRE(a != nullptr);
  CHECK(a->breaker.failures == 0);
}

TEST_CASE("not yet: a null from a provider at the height is genuine", "[notyet][route]") {
  NotYetFixture f;
  f.height("a", 100);
  f.height("b", 100);
  f.transport.on("http://a.test", test::FakeTransport::results("null"));
  f.transport.on("http://b.test", test::FakeTransport::results(kReceipt));
  auto out = f.call("eth_getTransactionReceipt", kHashParams);
  REQUIRE(out.status == CallOutcome::Status::result);
  CHECK(out.result == "null");
  CHECK(out.response == R"({"jsonrpc":"2.0","id":3,"result":null})");
  CHECK(out.provider == "a");
  CHECK(out.empty_retries == 0);
  CHECK(f.transport.log.size() == 1);
}

TEST_CASE("not yet: null everywhere is null, after one provider at the height said so", "[notyet][route]") {
  NotYetFixture f;
  f.height("a", 99);
  f.height("b", 100);
  f.height("c", 100);
  f.transport.on("http://a.test", test::FakeTransport::results("null"));
  f.transport.on("http://b.test", test::FakeTransport::results("null"));
  f.transport.on("http://c.test", test::FakeTransport::results(kReceipt));
  auto out = f.call("eth_getTransactionByHash", kHashParams);
  REQUIRE(out.status == CallOutcome::Status::result);
  CHECK(out.result == "null");
  CHECK(out.provider == "b");
  CHECK(out.empty_retries == 1);
  CHECK(f.transport.log.size() == 2);  // c is never asked: b is at the height
}

TEST_CASE("not yet: nobody known at the height, or a provider of unknown height, leaves the null", "[notyet][route]") {
  NotYetFixture f;
  f.height("a", 99);  // b and c: never seen
  f.transport.on("http://a.test", test::FakeTransport::results("null"));
  f.transport.on("http://b.test", test::FakeTransport::results(kReceipt));
  auto out = f.call("eth_getTransactionReceipt", kHashParams);
  CHECK(out.result == "null");  // a is the best known height
  CHECK(f.transport.log.size() == 1);
}

TEST_CASE("not yet: the retry skips candidates below the height", "[notyet][route]") {
  NotYetFixture f;
  f.height("a", 98);
  f.height("b", 99);
  f.height("c", 100);
  f.transport.on("http://a.test", test::FakeTransport::results("null"));
  f.transport.on("http://b.test", test::FakeTransport::results("null"));
  f.transport.on("http://c.test", test::FakeTransport::results(kReceipt));
  auto out = f.call("eth_getTransactionReceipt", kHashParams);
  CHECK(out.result == kReceipt);
  CHECK(out.provider == "c");
  CHECK(f.transport.count("http://b.test") == 0);
}

TEST_CASE("not yet: a block number above the provider's observed height", "[notyet][route]") {
  NotYetFixture f;
  f.height("a", 96);
  f.clock.advance(4'000);  // a's estimate moves on with the block time: the planner keeps it
  f.height("b", 100);
  f.height("c", 100);
  const std::string block = R"({"number":"0x63","hash":"0x02"})";
  f.transport.on("http://a.test", test::FakeTransport::results("null"));
  f.transport.on("http://b.test", test::FakeTransport::results(block));
  auto out = f.call("eth_getBlockByNumber", R"(["0x63",false])");  // 99: above a's 96
  CHECK(out.result == block);
  CHECK(out.provider == "b");
  CHECK(out.empty_retries == 1);
  // A block a has reached: its null is the answer.
  f.transport.log.clear();
  out = f.call("eth_getBlockByNumber", R"(["0x60",false])");
  CHECK(out.result == "null");
  CHECK(out.provider == "a");
  CHECK(f.transport.log.size() == 1);
  // Beyond every provider: nobody at that height, so the first null stands.
  f.transport.log.clear();
  out = f.call("eth_getBlockByNumber", R"(["0x3e8",false])");
  CHECK(out.result == "null");
  CHECK(out.empty_retries == 0);
}

TEST_CASE("not yet: a failed retry returns the null held", "[notyet][route]") {
  NotYetFixture f;
  f.height("a", 98);
  f.height("b", 100);
  f.transport.on("http://a.test", test::FakeTransport::results("null"));
  f.transport.on("http://b.test", test::FakeTransport::status(503));
  auto out = f.call("eth_getTransactionReceipt", kHashParams);
  REQUIRE(out.status == CallOutcome::Status::result);
  CHECK(out.result == "null");
  CHECK(out.provider == "a");
  CHECK(out.response == R"({"jsonrpc":"2.0","id":3,"result":null})");
  REQUIRE(out.attempts.size() == 3);  // a's null, b's 503, then c (nothing listens there)
  CHECK(out.attempts[1].provider == "b");
}

TEST_CASE("not yet: retry_empty false under a method override returns the first null", "[notyet][route]") {
  const std::string text = std::string(kNotYetProfile) + R"(  method_overrides:
    eth_getTransactionReceipt: { retry_empty: false }
)";
  NotYetFixture f(text.c_str());
  f.height("a", 98);
  f.height("b", 100);
  f.transport.on("http://a.test", test::FakeTransport::results("null"));
  f.transport.on("http://b.test", test::FakeTransport::results(kReceipt));
  auto out = f.call("eth_getTransactionReceipt", kHashParams);
  CHECK(out.result == "null");
  CHECK(f.transport.log.size() == 1);
  // Other methods keep it.
  out = f.call("eth_getTransactionByHash", kHashParams);
  CHECK(out.result == kReceipt);
}

TEST_CASE("not yet: a null from a method outside the lookups is delivered", "[notyet][route]") {
  NotYetFixture f;
  f.height("a", 98);
  f.height("b", 100);
  f.transport.on("http://a.test", test::FakeTransport::results("null"));
  f.transport.on("http://b.test", test::FakeTransport::results("\"0x1\""));
  auto out = f.call("eth_getCode", R"(["0x0000000000000000000000000000000000000001","latest"])");
  CHECK(out.result == "null");
  CHECK(f.transport.log.size() == 1);
}

}  // namespace unit_not_yet_test

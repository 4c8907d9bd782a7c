// Block-tag rewrite (issue 19): `latest` in each shape of block parameter becomes the chain's
// high-water height; everything else goes as the client wrote it.
#include <catch2/catch.hpp>

#include "../support/fake_transport.hpp"
#include "rpcroute/router.hpp"
#include "rpcroute/state.hpp"
#include "rpcroute/tag_rewrite.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_tag_rewrite_test {

using namespace rpcroute;

namespace {
const std::string kA = R"("0x0000000000000000000000000000000000000001")";
std::optional<std::string> rw(std::string_view method, const std::string& params) {
  return rewrite_latest_params(method, params, 100);
}
}  // namespace

TEST_CASE("tag rewrite: latest at each method's block position", "[tagrewrite]") {
  CHECK(rw("eth_getBalance", "[" + kA + R"(,"latest"])") == "[" + kA + R"(,"0x64"])");
  CHECK(rw("eth_getCode", "[" + kA + R"(, "latest"])") == "[" + kA + R"(,"0x64"])");
  CHECK(rw("eth_getStorageAt", "[" + kA + R"(,"0x0","latest"])") == "[" + kA + R"(,"0x0","0x64"])");
  CHECK(rw("eth_getTransactionCount", "[" + kA + R"(,"latest"])") == "[" + kA + R"(,"0x64"])");
  CHECK(rw("eth_getBlockByNumber", R"(["latest",true])") == R"(["0x64",true])");
  CHECK(rw("eth_getBlockTransactionCountByNumber", R"(["latest"])") == R"(["0x64"])");
  CHECK(rw("eth_getProof", "[" + kA + R"(,[],"latest"])") == "[" + kA + R"(,[],"0x64"])");
  // eth_call: an explicit latest, a null, or the optional block left out.
  const std::string tx = R"({"to":)" + kA + R"(,"data":"0x"})";
  CHECK(rw("eth_call", "[" + tx + R"(,"latest"])") == "[" + tx + R"(,"0x64"])");
  CHECK(rw("eth_call", "[" + tx + ",null]") == "[" + tx + R"(,"0x64"])");
  CHECK(rw("eth_call", "[" + tx + "]") == "[" + tx + R"(,"0x64"])");
  CHECK(rw("eth_estimateGas", "[" + tx + "]") == "[" + tx + R"(,"0x64"])");
  // eth_call's state overrides (a third param) stay.
  CHECK(rw("eth_call", "[" + tx + R"(,"latest",{}])") == "[" + tx + R"(,"0x64",{}])");
}

TEST_CASE("tag rewrite: other tags, numbers and hashes go as written", "[tagrewrite]") {
  for (const char* tag : {"pending", "safe", "finalized", "earliest", "0x10"}) {
    INFO(tag);
    CHECK_FALSE(rw("eth_getBalance", "[" + kA + R"(,")" + tag + R"("])"));
  }
  CHECK_FALSE(rw("eth_getBalance", "[" + kA + R"(,{"blockHash":"0x)" + std::string(64, 'a') + R"("}])"));
  CHECK_FALSE(rw("eth_getBalance", "[" + kA + "]"));  // a required block left out: the node says so
  CHECK_FALSE(rw("eth_getBlockByHash", R"(["0x)" + std::string(64, 'a') + R"(",false])"));
  CHECK_FALSE(rw("eth_blockNumber", "[]"));
  CHECK_FALSE(rw("eth_sendRawTransaction", R"(["0x00"])"));
  CHECK_FALSE(rw("eth_getBalance", "not json"));
  CHECK_FALSE(rw("eth_call", "[]"));  // the tx itself is missing
}

TEST_CASE("tag rewrite: an eth_getLogs filter's latest bounds", "[tagrewrite]") {
  CHECK(rw("eth_getLogs", R"([{"fromBlock":"0x60","toBlock":"latest","address":"0x01"}])") ==
        R"([{"address":"0x01","fromBlock":"0x60","toBlock":"0x64"}])");
  CHECK(rw("eth_getLogs", R"([{"address":"0x01"}])") ==
        R"([{"address":"0x01","fromBlock":"0x64","toBlock":"0x64"}])");  // both left out: latest
  CHECK_FALSE(rw("eth_getLogs", R"([{"fromBlock":"0x60","toBlock":"0x62"}])"));
  CHECK_FALSE(rw("eth_getLogs", R"([{"fromBlock":"0x70","toBlock":"latest"}])"));  // would run backwards
  CHECK_FALSE(rw("eth_getLogs", R"([{"fromBlock":"earliest","toBlock":"latest"}])"));
  CHECK_FALSE(rw("eth_getLogs", R"([{"blockHash":"0x)" + std::string(64, 'a') + R"("}])"));
}

namespace {
constexpr const char* kRewriteProfile = R"(
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    max_lag_blocks: 2
    rewrite_latest: true
    providers:
      - { id: a, url: "http://a.test", priority: 1 }
      - { id: b, url: "http://b.test", priority: 2 }
routing:
  default_strategy: priority
)";
}  // namespace

TEST_CASE("tag rewrite: on a chain that asks, reads go at the high-water height", "[tagrewrite][route]") {
  Profile profile = *load_profile_text(kRewriteProfile, "t.yaml");
  FakeClock clock;
  Random rng{7};
  asio::io_context io;
  test::FakeTransport transport{io, &clock};
  StateStore store{std::nullopt, clock, [](const std::string&) {}};
  Router router{profile, transport, store, clock, rng};
  const Chain& chain = profile.chains.front();
  REQUIRE(chain.rewrite_latest);
  auto route = [&](std::string method, std::string params) {
    std::vector<jsonrpc::Call> calls(1);
    calls[0].id = "1";
    calls[0].method = std::move(method);
    calls[0].params = std::move(params);
    std::vector<CallOutcome> out;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> { out = co_await router.route(chain, calls, {}); },
                   asio::detached);
    io.run();
    io.restart();
    return out.at(0);
  };
  transport.on("http://a.test", test::FakeTransport::rpc_error(-32000, "header not found"));
  transport.on("http://b.test", test::FakeTransport::results("\"0x1\""));
  // Nothing known of the chain: the tag goes as written.
  auto out = route("eth_getBalance", "[" + kA + R"(,"latest"])");
  REQUIRE(transport.log.size() >= 1);
  CHECK(transport.log[0].calls.at(0).params == "[" + kA + R"(,"latest"])");
  // a at 99 (its estimate keeps it in the plan), b at 100: sent as 0x64; a's "header not found"
  // sends it on to b.
  for (const char* id : {"a", "b"}) {
    store.record(HeightEvent{provider_key(profile.name, chain.name, *chain.find_provider(id)),
                             Height{std::string_view(id) == "a" ? 99u : 100u, clock.now_ms()}},
                 profile.health);
  }
  clock.advance(2'000);
  transport.log.clear();
  out = route("eth_getBalance", "[" + kA + R"(,"latest"])");
  REQUIRE(out.status == CallOutcome::Status::result);
  CHECK(out.provider == "b");
  REQUIRE_FALSE(transport.log.empty());
  for (const auto& sent : transport.log) CHECK(sent.calls.at(0).params == "[" + kA + R"(,"0x64"])");
  // Off by default: the same profile without the key sends latest.
  profile.chains.front().rewrite_latest = false;
  transport.log.clear();
  out = route("eth_getBalance", "[" + kA + R"(,"latest"])");
  CHECK(transport.log.at(0).calls.at(0).params == "[" + kA + R"(,"latest"])");
}

}  // namespace unit_tag_rewrite_test

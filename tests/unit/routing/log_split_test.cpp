// eth_getLogs splitting (issue 19): the error wordings, the parts, and the router splitting and
// merging over a scripted transport.
#include <catch2/catch.hpp>
#include <simdjson.h>

#include "../support/fake_transport.hpp"
#include "rpcroute/jsonrpc.hpp"
#include "rpcroute/log_split.hpp"
#include "rpcroute/router.hpp"
#include "rpcroute/state.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_log_split_test {

using namespace rpcroute;

TEST_CASE("log split: every recorded range error is read as its source states it", "[logsplit]") {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  const auto path = std::string(RPCROUTE_SOURCE_DIR) + "/tests/fixtures/log-range-errors.json";
  REQUIRE(parser.load(path).get(root) == simdjson::SUCCESS);
  simdjson::dom::array cases;
  REQUIRE(root["cases"].get_array().get(cases) == simdjson::SUCCESS);
  REQUIRE(cases.size() >= 20);
  for (auto c : cases) {
    std::string_view message;
    REQUIRE(c["message"].get_string().get(message) == simdjson::SUCCESS);
    INFO(simdjson::to_string(c));
    const auto got = read_log_range_error(message);
    bool too_large = false;
    REQUIRE(c["too_large"].get_bool().get(too_large) == simdjson::SUCCESS);
    CHECK(got.too_large == too_large);
    std::uint64_t n = 0;
    if (c["block_limit"].get_uint64().get(n) == simdjson::SUCCESS) {
      CHECK(got.block_limit == std::optional<std::uint64_t>(n));
    } else {
      CHECK_FALSE(got.block_limit.has_value());
    }
    if (c["result_limit"].get_uint64().get(n) == simdjson::SUCCESS) {
      CHECK(got.result_limit == std::optional<std::uint64_t>(n));
    } else {
      CHECK_FALSE(got.result_limit.has_value());
    }
  }
}

TEST_CASE("log split: a range is cut in block order, the last part shorter", "[logsplit]") {
  CHECK(split_span({0, 9}, 4) == std::vector<BlockSpan>{{0, 3}, {4, 7}, {8, 9}});
  CHECK(split_span({5, 5}, 4) == std::vector<BlockSpan>{{5, 5}});
  CHECK(split_span({0, 19'999}, 2'000).size() == 10);
  CHECK(split_span({0, 3}, 0).size() == 4);
  const std::uint64_t top = ~std::uint64_t{0};
  CHECK(split_span({top - 2, top}, 2) == std::vector<BlockSpan>{{top - 2, top - 1}, {top, top}});
}

TEST_CASE("log split: a part keeps the filter and sets its own bounds", "[logsplit]") {
  auto p = logs_params_for(
      R"([{"address":"0xab","fromBlock":"latest","topics":[null,["0x1"]],"toBlock":"0x10"}])",
      {16, 31});
  REQUIRE(p);
  CHECK(*p == R"([{"address":"0xab","topics":[null,["0x1"]],"fromBlock":"0x10","toBlock":"0x1f"}])");
  CHECK_FALSE(logs_params_for(R"(["x"])", {0, 1}));
  CHECK_FALSE(logs_params_for("[]", {0, 1}));
}

TEST_CASE("log split: arrays merge into one, empty ones add nothing", "[logsplit]") {
  std::string merged;
  CHECK(append_log_array(merged, R"([{"a":1}])"));
  CHECK(append_log_array(merged, " [ ] "));
  CHECK(append_log_array(merged, R"([{"a":2},{"a":3}])"));
  CHECK(merged == R"({"a":1},{"a":2},{"a":3})");
  CHECK_FALSE(append_log_array(merged, "null"));
  CHECK_FALSE(append_log_array(merged, R"({"a":1})"));
}

TEST_CASE("log split: the limit is the configured one or the learned one, the lower", "[logsplit]") {
  Provider p;
  CHECK_FALSE(log_range_limit(p, nullptr));
  p.limits.max_block_range = 5000;
  CHECK(log_range_limit(p, nullptr) == std::optional<std::uint64_t>(5000));
  ProviderState ps;
  ps.log_limit = {2000, 1};
  CHECK(log_range_limit(p, &ps) == std::optional<std::uint64_t>(2000));
  ps.log_limit = {9000, 1};
  CHECK(log_range_limit(p, &ps) == std::optional<std::uint64_t>(5000));
  p.limits.max_block_range.reset();
  CHECK(log_range_limit(p, &ps) == std::optional<std::uint64_t>(9000));
}

namespace {

constexpr const char* kLogProfile = R"(
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

/// A node whose logs are one per block, {"n":N}, that refuses ranges over `limit` blocks with
/// Alchemy's wording (limit 0: never).
test::FakeTransport::Handler log_node(std::uint64_t limit) {
  return [limit](const HttpRequest&, const std::vector<test::FakeTransport::Call>& calls) {
    return test::FakeTransport::reply(calls, [&](const test::FakeTransport::Call& c) {
      if (c.method == "eth_blockNumber") return std::string(R"("result":"0x63")");
      simdjson::dom::parser parser;
      simdjson::dom::element root = parser.parse(c.params);
      const auto from = *jsonrpc::parse_quantity(simdjson::minify(root.at(0)["fromBlock"]));
      const auto to = *jsonrpc::parse_quantity(simdjson::minify(root.at(0)["toBlock"]));
      if (limit != 0 && to - from + 1 > limit) {
        return fmt::format(
            R"("error":{{"code":-32602,"message":"You can make eth_getLogs requests with up to a {} block range."}})",
            limit);
      }
      std::string out = R"("result":[)";
      for (auto n = from; n <= to; ++n) out += fmt::format("{}{{\"n\":{}}}", n == from ? "" : ",", n);
      return out + "]";
    });
  };
}

struct LogFixture {
  Profile profile = *load_profile_text(kLogProfile, "test.yaml");
  FakeClock clock;
  Random rng{7};
  asio::io_context io;
  test::FakeTransport transport{io, &clock};
  StateStore store{std::nullopt, clock, [](const std::string&) {}};
  Router router{profile, transport, store, clock, rng};
  const Chain& chain = profile.chains.front();

  CallOutcome get_logs(std::string_view params, RouteOptions options = {}) {
    std::vector<jsonrpc::Call> calls(1);
    calls[0].id = "7";
    calls[0].method = "eth_getLogs";
    calls[0].params = std::string(params);
    std::vector<CallOutcome> out;
    asio::co_spawn(
        io, [&]() -> asio::awaitable<void> { out = co_await router.route(chain, calls, options); },
        asio::detached);
    io.run();
    io.restart();
    return out.at(0);
  }
};

std::string expected_logs(std::uint64_t from, std::uint64_t to) {
  std::string out = "[";
  for (auto n = from; n <= to; ++n) out += fmt::format("{}{{\"n\":{}}}", n == from ? "" : ",", n);
  return out + "]";
}

}  // namespace

TEST_CASE("log split: a stated limit splits the range, merges in order, and is learned",
          "[logsplit][route]") {
  LogFixture f;
  f.transport.on("http://a.test", log_node(10));
  f.transport.on("http://b.test", log_node(10));
  auto out = f.get_logs(R"([{"fromBlock":"0x0","toBlock":"0x2c"}])");  // 45 blocks
  REQUIRE(out.status == CallOutcome::Status::result);
  CHECK(out.result == expected_logs(0, 44));
  CHECK(out.response == R"({"jsonrpc":"2.0","id":7,"result":)" + expected_logs(0, 44) + "}");
  // Learned from the error: both providers stated 10.
  const ProviderState* a = f.store.provider(f.router.plan(f.chain, "eth_chainId", "[]", {}).candidates[0].key);
  REQUIRE(a != nullptr);
  CHECK(a->log_limit.blocks == 10);

  // The next call splits up front: no request over 10 blocks goes out.
  f.transport.log.clear();
  out = f.get_logs(R"([{"fromBlock":"0x0","toBlock":"0x2c"}])");
  REQUIRE(out.status == CallOutcome::Status::result);
  CHECK(out.result == expected_logs(0, 44));
  REQUIRE(f.transport.log.size() == 6);  // the head, then five parts
  CHECK(f.transport.log[0].calls.at(0).method == "eth_blockNumber");
}

TEST_CASE("log split: a result-count error halves until the parts pass", "[logsplit][route]") {
  LogFixture f;
  auto node = log_node(0);
  f.transport.on("http://a.test", [node](const HttpRequest& r, const std::vector<test::FakeTransport::Call>& calls) {
    if (calls.at(0).method != "eth_getLogs") return node(r, calls);
    simdjson::dom::parser parser;
    simdjson::dom::element root = parser.parse(calls.at(0).params);
    const auto from = *jsonrpc::parse_quantity(simdjson::minify(root.at(0)["fromBlock"]));
    const auto to = *jsonrpc::parse_quantity(simdjson::minify(root.at(0)["toBlock"]));
    if (to - from + 1 > 8)
      return test::FakeTransport::rpc_error(-32005, "query returned more than 10000 results")(r, calls);
    return node(r, calls);
  });
  f.transport.on("http://b.test", test::FakeTransport::status(503));
  auto out = f.get_logs(R"([{"fromBlock":"0x0","toBlock":"0x1f"}])");  // 32 blocks → 4 × 8
  REQUIRE(out.status == CallOutcome::Status::result);
  CHECK(out.result == expected_logs(0, 31));
}

TEST_CASE("log split: a failed part fails the whole request with a clear error", "[logsplit][route]") {
  LogFixture f;
  f.profile.chains.front().providers[0].limits.max_block_range = 10;
  f.profile.chains.front().providers[1].limits.max_block_range = 10;
  f.transport.on("http://a.test", [](const HttpRequest& r, const std::vector<test::FakeTransport::Call>& calls) {
    if (calls.at(0).params.find("\"0x14\"") != std::string::npos)
      return test::FakeTransport::rpc_error(-32000, "execution aborted (timeout = 5s)")(r, calls);
    return log_node(10)(r, calls);
  });
  f.transport.on("http://b.test", test::FakeTransport::status(503));
  auto out = f.get_logs(R"([{"fromBlock":"0x0","toBlock":"0x2c"}])");
  REQUIRE(out.status == CallOutcome::Status::rpc_error);
  CHECK(out.error.find("eth_getLogs blocks 20-29 (part of a split range) failed") != std::string::npos);
  CHECK(out.response.find(R"("id":7)") != std::string::npos);
}

TEST_CASE("log split: a blockHash query is never split", "[logsplit][route]") {
  LogFixture f;
  f.transport.on("http://a.test", test::FakeTransport::rpc_error(-32602, "block range is too wide (maximum 5)"));
  f.transport.on("http://b.test", test::FakeTransport::rpc_error(-32602, "block range is too wide (maximum 5)"));
  const std::string hash(64, 'a');
  auto out = f.get_logs(R"([{"blockHash":"0x)" + hash + R"("}])");
  CHECK(out.status == CallOutcome::Status::rpc_error);
  CHECK(f.transport.log.size() == 2);  // a, then b: no parts
}

TEST_CASE("log split: the parts share the request's one deadline; on expiry one clear error",
          "[logsplit][route]") {
  LogFixture f;
  f.profile.chains.front().providers[0].limits.max_block_range = 10;
  f.profile.chains.front().providers[1].limits.max_block_range = 10;
  // Every request takes 300 ms (the fake clock moves): the head, then five parts of 10 blocks.
  f.transport.on("http://a.test", log_node(10), 300);
  f.transport.on("http://b.test", log_node(10), 300);
  RouteOptions options;
  options.timeout_ms = 1000;
  auto out = f.get_logs(R"([{"fromBlock":"0x0","toBlock":"0x31"}])", options);
  // Each part alone would fit in 1000 ms; all of them do not.
  REQUIRE(out.status == CallOutcome::Status::unavailable);
  CHECK(out.error.find("the split range did not finish within the deadline of 1000 ms") != std::string::npos);
  CHECK(out.response.find(R"("id":7)") != std::string::npos);
  CHECK(out.response.find(R"("result")") == std::string::npos);  // never a partial answer
  CHECK(out.result.empty());
  // No request outlived the deadline: each was given what was left of it.
  std::int64_t given = 0;
  for (const auto& sent : f.transport.log) given += std::min<std::int64_t>(sent.timeout_ms, 300);
  CHECK(given <= 1000);

  // The same parts with time enough: the merged answer.
  options.timeout_ms = 5000;
  out = f.get_logs(R"([{"fromBlock":"0x0","toBlock":"0x31"}])", options);
  REQUIRE(out.status == CallOutcome::Status::result);
  CHECK(out.result == expected_logs(0, 49));
}

}  // namespace unit_log_split_test

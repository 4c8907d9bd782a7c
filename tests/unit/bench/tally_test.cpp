// The pure half of the bench engine: the params it sends, how answers add up per provider and
// method, the latency figures, the order of the table and the error lines.
#include <catch2/catch.hpp>

#include "rpcroute/bench.hpp"
#include "rpcroute/metrics.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_tally_test {

using namespace rpcroute;

namespace {

Classification answered(Outcome outcome, OutcomeClass cls, std::string message = {}) {
  Classification c;
  c.outcome = outcome;
  c.cls = cls;
  c.message = std::move(message);
  return c;
}

const Classification kOk = answered(Outcome::success, OutcomeClass::success);

/// A profile whose scrub() hides "s3cret".
Profile profile_with_secret() {
  Profile p;
  p.secrets = {"s3cret"};
  return p;
}

bench::Plan plan_of(std::vector<const Provider*> providers, std::vector<std::string> methods) {
  bench::Plan plan;
  plan.providers = std::move(providers);
  plan.methods = std::move(methods);
  return plan;
}

}  // namespace

TEST_CASE("bench params: the default mix asks the same question on every chain", "[bench]") {
  CHECK(bench::params_for("eth_blockNumber", 100) == "[]");
  CHECK(bench::params_for("eth_chainId", std::nullopt) == "[]");
  CHECK(bench::params_for("eth_gasPrice", 100) == "[]");
  CHECK(bench::params_for("eth_getBlockByNumber", 100) == R"(["latest",false])");
  CHECK(bench::params_for("eth_getBalance", 100) == R"(["0x0000000000000000000000000000000000000000","latest"])");
  CHECK(bench::params_for("eth_getTransactionCount", std::nullopt) ==
        R"(["0x0000000000000000000000000000000000000000","latest"])");
  // Any other method gets no params.
  CHECK(bench::params_for("eth_feeHistory", 100) == R"(["0x4","latest",[25,75]])");
  // eth_call and friends get a harmless call at latest, never empty params (issue 21).
  CHECK(bench::params_for("eth_call", 100) ==
        R"([{"to":"0x0000000000000000000000000000000000000000","data":"0x"},"latest"])");
  CHECK(bench::params_for("eth_estimateGas", 100) ==
        R"([{"from":"0x0000000000000000000000000000000000000000","to":"0x0000000000000000000000000000000000000000","value":"0x0"}])");
  CHECK(bench::params_for("eth_getCode", 100) == R"(["0x0000000000000000000000000000000000000000","latest"])");
  CHECK(bench::params_for("eth_getBlockReceipts", 100) == R"(["latest"])");
  CHECK(bench::params_for("net_version", 100) == "[]");
  for (auto m : bench::kDefaultMix) CHECK_FALSE(bench::params_for(m, 7).empty());
}

TEST_CASE("bench params: eth_getLogs covers the four blocks up to the warm-up's head", "[bench]") {
  CHECK(bench::params_for("eth_getLogs", 100) == R"([{"fromBlock":"0x61","toBlock":"0x64"}])");
  // Near genesis it starts at block 0.
  CHECK(bench::params_for("eth_getLogs", 2) == R"([{"fromBlock":"0x0","toBlock":"0x2"}])");
  CHECK(bench::params_for("eth_getLogs", 3) == R"([{"fromBlock":"0x0","toBlock":"0x3"}])");
  // No head seen: the latest block only.
  CHECK(bench::params_for("eth_getLogs", std::nullopt) == R"([{"fromBlock":"latest","toBlock":"latest"}])");
}

TEST_CASE("bench plan: no more workers than requests, unless the run is timed", "[bench]") {
  bench::Plan plan;
  plan.requests = 3;
  plan.concurrency = 8;
  CHECK(plan.workers() == 3);
  plan.duration_ms = 1000;
  CHECK(plan.workers() == 8);
  Provider p;
  p.timeout_ms = 7000;
  CHECK(plan.timeout_for(p) == 7000);
  plan.timeout_ms = 250;
  CHECK(plan.timeout_for(p) == 250);
}

TEST_CASE("bench messages: curl's elapsed time goes, so equal failures group", "[bench]") {
  CHECK(bench::without_elapsed("Failed to connect to 127.0.0.1 port 1 after 3 ms: Connection refused") ==
        "Failed to connect to 127.0.0.1 port 1: Connection refused");
  CHECK(bench::without_elapsed("a after 12 ms, b after 7 ms") == "a, b");
  // Only " after N ms": other words and units stay.
  CHECK(bench::without_elapsed("retry after 5 s") == "retry after 5 s");
  CHECK(bench::without_elapsed("after ms") == "after ms");
  CHECK(bench::without_elapsed("done after  3 ms") == "done after  3 ms");
}

TEST_CASE("bench messages: scrubbed of the profile's secrets, else the outcome's name", "[bench]") {
  const Profile profile = profile_with_secret();
  CHECK(bench::message_of(answered(Outcome::http_error, OutcomeClass::provider_failure, "bad key s3cret after 4 ms"),
                          profile) == "bad key ***");
  CHECK(bench::message_of(answered(Outcome::timeout, OutcomeClass::provider_failure), profile) ==
        std::string(outcome_name(Outcome::timeout)));
}

TEST_CASE("bench tally: successes count as latency, failures by class, rate limits apart", "[bench]") {
  const Profile profile;
  bench::Tally t;
  t.add(kOk, 10, profile);
  t.add(kOk, 20, profile);
  // A JSON-RPC error is an answer, but no latency (issue 21): its class is listed.
  t.add(answered(Outcome::rpc_error, OutcomeClass::deterministic, "execution reverted"), 5, profile);
  // A 429 and a timeout did not answer: no latency.
  t.add(answered(Outcome::rate_limited, OutcomeClass::rate_limited, "too many requests"), 1, profile);
  t.add(answered(Outcome::timeout, OutcomeClass::provider_failure, "timed out"), 5000, profile);
  CHECK(t.ok == 2);
  CHECK(t.answered == 3);
  CHECK(t.latencies_ms == std::vector<double>{10, 20});
  CHECK_FALSE(t.mostly_errors());  // 1 error of 3 answers
  CHECK(t.rate_limited == 1);
  CHECK(t.errors[static_cast<std::size_t>(OutcomeClass::deterministic)] == 1);
  CHECK(t.errors[static_cast<std::size_t>(OutcomeClass::rate_limited)] == 1);
  CHECK(t.errors[static_cast<std::size_t>(OutcomeClass::provider_failure)] == 1);
  CHECK(t.errors[static_cast<std::size_t>(OutcomeClass::success)] == 0);
  REQUIRE(t.messages.size() == 3);
  CHECK(t.messages[0] == std::pair<std::string, int>{"execution reverted", 1});
}

TEST_CASE("bench tally: mostly errors when more than half the answers are errors", "[bench]") {
  const Profile profile;
  bench::Tally t;
  CHECK_FALSE(t.mostly_errors());  // nothing answered
  const auto invalid = answered(Outcome::rpc_error, OutcomeClass::deterministic, "invalid params");
  t.add(invalid, 1, profile);
  CHECK(t.mostly_errors());
  t.add(kOk, 10, profile);
  CHECK_FALSE(t.mostly_errors());  // one of two: not most
  t.add(invalid, 1, profile);
  CHECK(t.mostly_errors());
  // Failures that are no answers do not count either way.
  t.add(answered(Outcome::timeout, OutcomeClass::provider_failure, "timed out"), 5000, profile);
  t.add(answered(Outcome::timeout, OutcomeClass::provider_failure, "timed out"), 5000, profile);
  CHECK(t.mostly_errors());
  CHECK(bench::figures_of(t).has_latency);
  CHECK(bench::figures_of(t).p50 == 10);
}

TEST_CASE("bench tally: the first few distinct messages are kept with counts, the rest counted", "[bench]") {
  const Profile profile;
  bench::Tally t;
  auto fail = [&](const std::string& m) { t.add(answered(Outcome::http_error, OutcomeClass::provider_failure, m), 1, profile); };
  fail("a");
  fail("a");
  // The same text once the elapsed time is gone.
  fail("b after 1 ms");
  fail("b after 2 ms");
  for (std::size_t i = 0; i < bench::kMaxMessages + 2; ++i) fail("other " + std::to_string(i));
  REQUIRE(t.messages.size() == bench::kMaxMessages);
  CHECK(t.messages[0] == std::pair<std::string, int>{"a", 2});
  CHECK(t.messages[1] == std::pair<std::string, int>{"b", 2});
  CHECK(t.other_messages == 4);
  // A message already kept is still counted once the list is full.
  fail("a");
  CHECK(t.messages[0].second == 3);
  CHECK(t.other_messages == 4);
}

TEST_CASE("bench figures: percentiles, extremes and successes per second of wall time", "[bench]") {
  bench::Tally t;
  for (int i = 100; i >= 1; --i) t.latencies_ms.push_back(i);
  t.answered = 120;  // 20 errors: no throughput
  t.ok = 100;
  t.started_us = 1'000'000;
  t.finished_us = 3'000'000;  // 2 s
  const auto f = bench::figures_of(t);
  CHECK(f.has_latency);
  CHECK(f.p50 == Approx(quantile(t.latencies_ms, 0.5)));
  CHECK(f.p90 == Approx(quantile(t.latencies_ms, 0.9)));
  CHECK(f.p99 == Approx(quantile(t.latencies_ms, 0.99)));
  CHECK(f.p50 <= f.p90);
  CHECK(f.p90 <= f.p99);
  CHECK(f.min == 1);
  CHECK(f.max == 100);
  CHECK(f.per_s == Approx(50));
}

TEST_CASE("bench figures: no answer, no latency; no wall time, no rate", "[bench]") {
  bench::Tally t;
  t.issued = 4;
  const auto f = bench::figures_of(t);
  CHECK_FALSE(f.has_latency);
  CHECK(f.per_s == 0);
}

TEST_CASE("bench order: fastest p50 first, providers without latency last in their order", "[bench]") {
  auto with = [](double p50) {
    bench::Figures f;
    f.has_latency = true;
    f.p50 = p50;
    return f;
  };
  const std::vector<bench::Figures> figures = {bench::Figures{}, with(30), with(10), bench::Figures{}, with(30)};
  CHECK(bench::order_by_p50(figures) == std::vector<std::size_t>{2, 1, 4, 0, 3});
  CHECK(bench::order_by_p50({}).empty());
}

TEST_CASE("bench results: any answer, and figures per method in provider order", "[bench]") {
  bench::Results r;
  r.tallies.assign(2, std::vector<bench::Tally>(2));
  CHECK_FALSE(r.any_answer());
  r.tallies[1][0].latencies_ms = {4, 2};
  r.tallies[1][0].answered = 2;
  CHECK(r.any_answer());
  const auto figures = r.figures(1);
  REQUIRE(figures.size() == 2);
  CHECK(figures[0].has_latency);
  CHECK(figures[0].min == 2);
  CHECK_FALSE(figures[1].has_latency);
}

TEST_CASE("bench error lines: one per provider and message over all methods, with the methods", "[bench]") {
  Provider a, b;
  const auto plan = plan_of({&a, &b}, {"eth_blockNumber", "eth_gasPrice", "eth_chainId"});
  bench::Results r;
  r.tallies.assign(3, std::vector<bench::Tally>(2));
  r.tallies[0][0].messages = {{"refused", 2}, {"timeout", 1}};
  r.tallies[1][0].messages = {{"refused", 3}};
  r.tallies[2][0].messages = {{"refused", 1}};
  r.tallies[2][0].other_messages = 4;
  r.tallies[1][1].messages = {{"refused", 5}};
  const auto lines = bench::error_lines(plan, r);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0].provider == 0);
  CHECK(lines[0].message == "refused");
  CHECK(lines[0].count == 6);
  CHECK(lines[0].methods == std::vector<std::string_view>{"eth_blockNumber", "eth_gasPrice", "eth_chainId"});
  CHECK(lines[1].message == "timeout");
  CHECK(lines[1].methods == std::vector<std::string_view>{"eth_blockNumber"});
  CHECK(lines[2].message == "other errors");
  CHECK(lines[2].count == 4);
  CHECK(lines[3].provider == 1);
  CHECK(lines[3].count == 5);
  CHECK(lines[3].methods == std::vector<std::string_view>{"eth_gasPrice"});
}

}  // namespace unit_tally_test

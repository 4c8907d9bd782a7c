#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "rpcroute/health/exchange.hpp"
#include "rpcroute/jsonrpc.hpp"
#include "rpcroute/state.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_exchange_test {

using namespace rpcroute;

namespace {

const Profile& empty_profile() {
  static Profile p;
  return p;
}

HttpResponse answer(long status, std::string body, std::string retry_after = {}) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  r.retry_after = std::move(retry_after);
  r.latency_us = 1500;
  return r;
}

}  // namespace

TEST_CASE("upstream_body: one call is an object, several a batch, with the ids given", "[exchange]") {
  std::vector<UpstreamCall> one{{"eth_blockNumber", "[]"}};
  CHECK(upstream_body(one, {41, 1}) == R"({"jsonrpc":"2.0","id":41,"method":"eth_blockNumber","params":[]})");
  std::vector<UpstreamCall> two{{"a", "[]"}, {"b", "[1]"}};
  CHECK(upstream_body(two, {7, 2}) ==
        R"([{"jsonrpc":"2.0","id":7,"method":"a","params":[]},{"jsonrpc":"2.0","id":8,"method":"b","params":[1]}])");
}

TEST_CASE("reserve_upstream_ids: every upstream call in the process gets an id of its own", "[exchange]") {
  const auto a = reserve_upstream_ids(1);
  const auto b = reserve_upstream_ids(3);
  const auto c = reserve_upstream_ids(1);
  CHECK(a.first > 0);  // never the 0 every call used to carry
  CHECK(a.count == 1);
  CHECK(b.first >= a.first + 1);
  CHECK(c.first >= b.first + 3);
}

TEST_CASE("classify_exchange: an answer to an earlier request on the connection is a wrong id", "[exchange]") {
  // The keep-alive desync of issue 14: a provider sent one answer too many, so the next request
  // read the previous one's answer. Its id is the earlier call's, never this one's.
  auto ex = classify_exchange(answer(200, R"({"jsonrpc":"2.0","id":41,"result":"0xdeadbeef"})"), UpstreamIds{42, 1}, 0,
                              empty_profile());
  CHECK(ex.per_call[0].outcome == Outcome::wrong_id);
  CHECK(ex.per_call[0].cls == OutcomeClass::provider_failure);
  CHECK(ex.replies[0] == nullptr);
  CHECK(connection_suspect(ex));
  auto ok = classify_exchange(answer(200, R"({"jsonrpc":"2.0","id":42,"result":"0x1"})"), UpstreamIds{42, 1}, 0,
                              empty_profile());
  CHECK(ok.per_call[0].cls == OutcomeClass::success);
  CHECK_FALSE(connection_suspect(ok));
}

TEST_CASE("classify_exchange: answers that are not the answer to our request are provider failures", "[exchange]") {
  const std::pair<const char*, Outcome> rows[] = {
      // the same number in another spelling is another token
      {R"({"jsonrpc":"2.0","id":42.0,"result":"0x1"})", Outcome::wrong_id},
      {R"({"jsonrpc":"2.0","id":4.2e1,"result":"0x1"})", Outcome::wrong_id},
      {R"({"jsonrpc":"2.0","id":"42","result":"0x1"})", Outcome::wrong_id},
      // two ids: which one answered?
      {R"({"jsonrpc":"2.0","id":42,"id":41,"result":"0x1"})", Outcome::bad_response},
      {R"({"jsonrpc":"2.0","id":41,"id":42,"result":"0x1"})", Outcome::bad_response},
      {R"({"jsonrpc":"2.0","id":42,"result":"0x1","result":"0x2"})", Outcome::bad_response},
      // a batch of one for a call sent as an object
      {R"([{"jsonrpc":"2.0","id":42,"result":"0x1"}])", Outcome::bad_response},
  };
  for (const auto& [body, outcome] : rows) {
    INFO(body);
    auto ex = classify_exchange(answer(200, body), UpstreamIds{42, 1}, 0, empty_profile());
    CHECK(ex.per_call[0].outcome == outcome);
    CHECK(ex.per_call[0].cls == OutcomeClass::provider_failure);
    CHECK(ex.replies[0] == nullptr);
  }
}

TEST_CASE("classify_exchange: two answers for one call in a batch are a bad response", "[exchange]") {
  auto ex = classify_exchange(answer(200, R"([{"jsonrpc":"2.0","id":5,"result":"0x1"},)"
                                          R"({"jsonrpc":"2.0","id":5,"result":"0x2"},)"
                                          R"({"jsonrpc":"2.0","id":6,"result":"0x3"}])"),
                              UpstreamIds{5, 2}, 0, empty_profile());
  CHECK(ex.per_call[0].outcome == Outcome::bad_response);
  CHECK(ex.replies[0] == nullptr);
  CHECK(ex.per_call[1].cls == OutcomeClass::success);
}

TEST_CASE("max_response_bytes: method override, else provider limit, else the default", "[exchange]") {
  Profile profile;
  Provider provider;
  const std::vector<UpstreamCall> logs{{"eth_getLogs", "[]"}};
  const std::vector<UpstreamCall> both{{"eth_blockNumber", "[]"}, {"eth_getLogs", "[]"}};
  CHECK(max_response_bytes(logs, provider, profile) == kDefaultMaxResponseBytes);
  provider.limits.max_response_bytes = 2 << 20;
  CHECK(max_response_bytes(logs, provider, profile) == (2u << 20));
  MethodOverride o;
  o.pattern = "eth_getLogs";
  o.policy.max_response_bytes = 512u << 20;
  profile.routing.method_overrides.push_back(o);
  CHECK(max_response_bytes(logs, provider, profile) == (512u << 20));
  CHECK(max_response_bytes(both, provider, profile) == (512u << 20));  // a batch gets its largest
}

TEST_CASE("classify_exchange: a result is a success and keeps the reply", "[exchange]") {
  auto ex = classify_exchange(answer(200, R"({"jsonrpc":"2.0","id":0,"result":"0x10"})"),
                              UpstreamIds{0, 1}, 0, empty_profile());
  REQUIRE(ex.per_call.size() == 1);
  CHECK(ex.per_call[0].cls == OutcomeClass::success);
  REQUIRE(ex.replies[0] != nullptr);
  CHECK(*ex.replies[0]->result == R"("0x10")");
  CHECK(ex.overall.cls == OutcomeClass::success);
  CHECK(ex.latency_ms() == Approx(1.5));
}

TEST_CASE("take_as_response: the client's response is built in the answer's buffer", "[exchange]") {
  const std::string result = "\"0x" + std::string(300'000, 'a') + "\"";
  auto fresh = [&](std::string envelope_head) {
    HttpResponse r = answer(200, envelope_head + result + "}");
    r.body.reserve(r.body.size() + kBodySlack);  // as the transports receive bodies
    return classify_exchange(std::move(r), UpstreamIds{0, 1}, 0, empty_profile());
  };
  for (std::string id : {"7", "12345", R"("a-much-longer-client-id-string")", "", "null"}) {
    auto ex = fresh(R"({"jsonrpc":"2.0","id":0,"result":)");
    REQUIRE(ex.per_call[0].cls == OutcomeClass::success);
    const char* buffer = ex.http.body.data();
    auto response = take_as_response(ex, *ex.replies[0]->result, id);
    CHECK(response == jsonrpc::make_result(id, result));
    CHECK(response.data() == buffer);  // no copy of the 300 KB result
  }
  SECTION("the provider's envelope in another order, with spaces") {
    auto ex = fresh(R"({ "id" : 0 , "jsonrpc" : "2.0" , "result" : )");
    const char* buffer = ex.http.body.data();
    auto response = take_as_response(ex, *ex.replies[0]->result, "1");
    CHECK(response == jsonrpc::make_result("1", result));
    CHECK(response.data() == buffer);
  }
  SECTION("no room in the buffer: a copy, still right") {
    auto ex = classify_exchange(answer(200, R"({"jsonrpc":"2.0","id":0,"result":[1,2]})"),
                              UpstreamIds{0, 1}, 0, empty_profile());
    auto id = std::string(ex.http.body.capacity(), '9');  // a longer envelope than the buffer holds
    CHECK(take_as_response(ex, *ex.replies[0]->result, id) == jsonrpc::make_result(id, "[1,2]"));
  }
}

TEST_CASE("classify_exchange: a wrong id is a provider failure", "[exchange]") {
  auto ex = classify_exchange(answer(200, R"({"jsonrpc":"2.0","id":1000,"result":"0x10"})"),
                              UpstreamIds{0, 1}, 0, empty_profile());
  CHECK(ex.per_call[0].outcome == Outcome::wrong_id);
  CHECK(ex.per_call[0].cls == OutcomeClass::provider_failure);
  CHECK(ex.overall.counts_for_breaker());
}

TEST_CASE("classify_exchange: invalid JSON, HTML and truncation are bad responses", "[exchange]") {
  for (const char* body : {R"({"jsonrpc":"2.0","id":0,"result":0x12)", "<html>Checking your browser</html>",
                           R"({"jsonrpc":"2.0","id":0,"result":{"a":tru}})"}) {
    auto ex = classify_exchange(answer(200, body), UpstreamIds{0, 1}, 0, empty_profile());
    INFO(body);
    CHECK(ex.per_call[0].outcome == Outcome::bad_response);
    CHECK(ex.per_call[0].cls == OutcomeClass::provider_failure);
  }
}

TEST_CASE("classify_exchange: HTTP 429 with Retry-After is rate limited with that delay", "[exchange]") {
  auto ex = classify_exchange(answer(429, "Too Many Requests", "7"), UpstreamIds{0, 1}, 0, empty_profile());
  CHECK(ex.per_call[0].cls == OutcomeClass::rate_limited);
  CHECK(ex.overall.retry_after_ms == 7000);
  CHECK_FALSE(ex.overall.counts_for_breaker());
}

TEST_CASE("classify_exchange: transport errors carry their kind and are scrubbed of secrets", "[exchange]") {
  Profile p;
  p.secrets = {"sekrit-key-123"};
  HttpResponse r;
  r.error = TransportError::connect;
  r.error_message = "Failed to connect to sekrit-key-123.example port 443";
  auto ex = classify_exchange(std::move(r), UpstreamIds{0, 1}, 0, p);
  CHECK(ex.per_call[0].outcome == Outcome::connect_failed);
  CHECK(ex.per_call[0].never_sent());
  CHECK(ex.per_call[0].message.find("sekrit") == std::string::npos);
}

TEST_CASE("classify_exchange: batch answers are matched by id, in any order", "[exchange]") {
  auto ex = classify_exchange(
      answer(200,
             R"([{"jsonrpc":"2.0","id":2,"error":{"code":3,"message":"execution reverted"}},)"
             R"({"jsonrpc":"2.0","id":0,"result":"0x1"}])"),
      UpstreamIds{0, 3}, 0, empty_profile());
  CHECK(ex.per_call[0].cls == OutcomeClass::success);
  CHECK(ex.per_call[1].cls == OutcomeClass::provider_failure);  // missing from the batch
  CHECK(ex.per_call[2].cls == OutcomeClass::deterministic);
  CHECK(ex.overall.cls == OutcomeClass::provider_failure);
}

TEST_CASE("classify_exchange: one error object for a whole batch applies to every call", "[exchange]") {
  auto ex = classify_exchange(
      answer(200, R"({"jsonrpc":"2.0","id":null,"error":{"code":-32601,"message":"batch requests not supported"}})"),
      UpstreamIds{0, 2}, 0, empty_profile());
  CHECK(ex.per_call[0].cls == OutcomeClass::capability);
  CHECK(ex.per_call[1].cls == OutcomeClass::capability);
}

TEST_CASE("classify_exchange: a rate-limit error in a 200 answer outranks the others", "[exchange]") {
  auto ex = classify_exchange(
      answer(200,
             R"([{"jsonrpc":"2.0","id":0,"result":"0x1"},)"
             R"({"jsonrpc":"2.0","id":1,"error":{"code":-32005,"message":"limit exceeded, try again in 3 seconds"}}])"),
      UpstreamIds{0, 2}, 0, empty_profile());
  CHECK(ex.overall.cls == OutcomeClass::rate_limited);
  CHECK(ex.overall.retry_after_ms == 3000);
}

TEST_CASE("record_exchange: one attempt for the breaker and one sample per call", "[exchange]") {
  FakeClock clock;
  StateStore store(std::nullopt, clock, [](const std::string&) {});
  HealthConfig health;
  health.circuit_breaker.failure_threshold = 1;
  health.circuit_breaker.jitter = 0;
  std::vector<UpstreamCall> calls{{"eth_blockNumber", "[]"}, {"eth_gasPrice", "[]"}};
  HttpResponse r;
  r.error = TransportError::timeout;
  r.latency_us = 2000;
  auto ex = classify_exchange(std::move(r), UpstreamIds{0, 2}, clock.now_ms(), Profile{});
  record_exchange(store, health, "p/c/x#f", calls, ex, clock.now_ms(), 0.0);
  const auto& ps = store.state().providers.at("p/c/x#f");
  CHECK(ps.breaker.state == BreakerState::open);  // one exchange, one failure: threshold 1 opens it
  CHECK(ps.methods.at("eth_blockNumber").size() == 1);
  CHECK(ps.methods.at("eth_gasPrice").size() == 1);
  CHECK(ps.methods.at("eth_gasPrice").front().outcome == Outcome::timeout);
}

TEST_CASE("classify_exchange: a head answer that is not a quantity is a provider failure, not a result",
          "[exchange]") {
  const std::vector<UpstreamCall> head{{"eth_blockNumber", "[]"}};
  for (std::string bad : {R"("0x")", R"("-0x1")", "5", R"("12")", "null", R"("0x1g")", R"("0x10000000000000000")"}) {
    auto ex = classify_exchange(answer(200, R"({"jsonrpc":"2.0","id":0,"result":)" + bad + "}"), UpstreamIds{0, 1}, 0,
                                empty_profile(), head);
    INFO(bad);
    CHECK(ex.per_call[0].cls == OutcomeClass::provider_failure);
    CHECK(ex.per_call[0].outcome == Outcome::bad_response);
    CHECK_THAT(ex.per_call[0].message, Catch::Contains("not a block number"));
    CHECK(ex.overall.cls == OutcomeClass::provider_failure);
  }
  auto ok = classify_exchange(answer(200, R"({"jsonrpc":"2.0","id":0,"result":"0x10"})"), UpstreamIds{0, 1}, 0, empty_profile(), head);
  CHECK(ok.per_call[0].cls == OutcomeClass::success);
  // Other methods' results are theirs to shape; in a batch only the head call is judged.
  const std::vector<UpstreamCall> mixed{{"eth_getCode", "[]"}, {"eth_blockNumber", "[]"}};
  auto batch = classify_exchange(
      answer(200, R"([{"jsonrpc":"2.0","id":0,"result":"0x"},{"jsonrpc":"2.0","id":1,"result":"0x"}])"), UpstreamIds{0, 2}, 0,
      empty_profile(), mixed);
  CHECK(batch.per_call[0].cls == OutcomeClass::success);
  CHECK(batch.per_call[1].cls == OutcomeClass::provider_failure);
}

TEST_CASE("record_exchange: a timeout opens the breaker at once, unless the overall deadline cut it short",
          "[exchange][breaker]") {
  FakeClock clock;
  StateStore store{std::nullopt, clock, [](const std::string&) {}};
  HealthConfig health;  // failure_threshold 5
  HttpResponse timed_out;
  timed_out.error = TransportError::timeout;
  timed_out.error_message = "timed out";
  const std::vector<UpstreamCall> calls{{"eth_blockNumber", "[]"}};
  auto ex = classify_exchange(std::move(timed_out), UpstreamIds{0, 1}, clock.now_ms(), empty_profile());
  REQUIRE(ex.overall.outcome == Outcome::timeout);

  record_exchange(store, health, "p/c/cut#f", calls, ex, clock.now_ms(), 0.0, {.timeout_trips = false});
  CHECK(store.state().providers.at("p/c/cut#f").breaker.state == BreakerState::closed);
  CHECK(store.state().providers.at("p/c/cut#f").breaker.failures == 1);

  record_exchange(store, health, "p/c/hung#f", calls, ex, clock.now_ms(), 0.0);
  CHECK(store.state().providers.at("p/c/hung#f").breaker.state == BreakerState::open);
  CHECK(store.state().providers.at("p/c/hung#f").breaker.reason == "timeout");
}

TEST_CASE("record_exchange: a trial's success closes an open breaker before its recovery time", "[exchange][breaker]") {
  FakeClock clock;
  StateStore store{std::nullopt, clock, [](const std::string&) {}};
  HealthConfig health;
  const std::vector<UpstreamCall> calls{{"eth_blockNumber", "[]"}};
  HttpResponse refused;
  refused.error = TransportError::connect;
  auto fail = classify_exchange(std::move(refused), UpstreamIds{0, 1}, clock.now_ms(), empty_profile());
  for (int i = 0; i < health.circuit_breaker.failure_threshold; ++i) {
    record_exchange(store, health, "p/c/n#f", calls, fail, clock.now_ms(), 0.0);
  }
  REQUIRE(store.state().providers.at("p/c/n#f").breaker.state == BreakerState::open);
  clock.advance(500);
  auto ok = classify_exchange(answer(200, R"({"jsonrpc":"2.0","id":0,"result":"0x1"})"), UpstreamIds{0, 1}, clock.now_ms(),
                              empty_profile());
  // A late success of an ordinary request does not close it ...
  record_exchange(store, health, "p/c/n#f", calls, ok, clock.now_ms(), 0.0);
  CHECK(store.state().providers.at("p/c/n#f").breaker.effective_state(clock.now_ms()) == BreakerState::open);
  // ... a trial's does.
  record_exchange(store, health, "p/c/n#f", calls, ok, clock.now_ms(), 0.0, {.trial = true});
  CHECK(store.state().providers.at("p/c/n#f").breaker.effective_state(clock.now_ms()) == BreakerState::closed);
}

TEST_CASE("classify_exchange: a provider's message is scrubbed, escaped and cut before anyone prints it",
          "[exchange]") {
  Profile p;
  p.secrets = {"sk_live_0123456789abcdef"};
  const std::string message = "bad key sk_live_0123456789abcdef\x1b[2J\nrpcroute: forged" + std::string(300'000, 'z');
  const std::string body = R"({"jsonrpc":"2.0","id":0,"error":{"code":-32603,"message":")" +
                           std::string("bad key sk_live_0123456789abcdef\\u001b[2J\\nrpcroute: forged") +
                           std::string(300'000, 'z') + R"("}})";
  auto ex = classify_exchange(answer(200, body), UpstreamIds{0, 1}, 0, p);
  REQUIRE(ex.per_call[0].outcome == Outcome::rpc_error);
  const auto& m = ex.per_call[0].message;
  CHECK(m.starts_with("-32603: bad key ***\\x1b[2J\\nrpcroute: forged"));
  CHECK(m.ends_with(fmt::format("… ({} bytes)", std::string("-32603: bad key ***").size() + message.size() -
                                                    std::string("bad key sk_live_0123456789abcdef").size())));
  CHECK(m.size() < 600);
  CHECK(ex.overall.message == m);
  // The node's own error stays whole for the client.
  REQUIRE(ex.replies[0] != nullptr);
  CHECK(ex.replies[0]->error->message == message);
  // An HTTP error's text gets the same treatment.
  auto h = classify_exchange(answer(503, R"({"jsonrpc":"2.0","id":0,"error":{"code":-32603,"message":"down\u0007"}})"), UpstreamIds{0, 1}, 0, p);
  CHECK(h.per_call[0].message == "HTTP 503: down\\x07");
}

TEST_CASE("classify_exchange: a whole batch answered under other ids is a wrong id, call by call",
          "[exchange]") {
  auto ex = classify_exchange(
      answer(200, R"([{"jsonrpc":"2.0","id":1010,"result":"0x1"},{"jsonrpc":"2.0","id":1011,"result":"0x2"}])"),
      UpstreamIds{10, 2}, 0, empty_profile());
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(ex.per_call[i].outcome == Outcome::wrong_id);
    CHECK(ex.replies[i] == nullptr);
  }
  CHECK(ex.per_call[0].message == "answer has id 1010 instead of 10");
  CHECK(connection_suspect(ex));
  // One of ours among them: the others are missing from the batch, as before.
  auto partly = classify_exchange(
      answer(200, R"([{"jsonrpc":"2.0","id":10,"result":"0x1"},{"jsonrpc":"2.0","id":1011,"result":"0x2"}])"),
      UpstreamIds{10, 2}, 0, empty_profile());
  CHECK(partly.per_call[0].cls == OutcomeClass::success);
  CHECK(partly.per_call[1].outcome == Outcome::bad_response);
}

TEST_CASE("classify_exchange: one error answer to a batch refuses the batch; no call has an answer",
          "[exchange]") {
  // -32600 would be a deterministic error handed to the caller; there is no reply of its own to
  // hand (judge's return_error read a null reply).
  auto ex = classify_exchange(
      answer(200, R"({"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"batches are not served"}})"),
      UpstreamIds{10, 2}, 0, empty_profile());
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(ex.per_call[i].outcome == Outcome::bad_response);
    CHECK(ex.per_call[i].cls == OutcomeClass::provider_failure);
    CHECK(ex.replies[i] == nullptr);
  }
  CHECK(ex.per_call[0].message.find("batches are not served") != std::string::npos);
  // A rate limit stays one (a capability too: the test above).
  auto limited = classify_exchange(
      answer(200, R"({"jsonrpc":"2.0","id":null,"error":{"code":-32005,"message":"limit exceeded"}})"),
      UpstreamIds{10, 2}, 0, empty_profile());
  CHECK(limited.per_call[0].cls == OutcomeClass::rate_limited);
}

}  // namespace unit_exchange_test

#include <simdjson.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cctype>
#include <set>
#include <string>

#include "rpcroute/jsonrpc.hpp"
#include "rpcroute/outcome.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_classify_test {

using namespace rpcroute;

namespace {

// Tue, 14 Nov 2023 22:13:20 GMT
constexpr std::int64_t kNow = 1'700'000'000'000;

std::optional<OutcomeClass> class_named(std::string_view name) {
  for (auto c :
       {OutcomeClass::success, OutcomeClass::deterministic, OutcomeClass::capability,
        OutcomeClass::rate_limited, OutcomeClass::provider_failure, OutcomeClass::unknown}) {
    if (class_name(c) == name) return c;
  }
  return std::nullopt;
}

std::string upper(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  return out;
}

struct Classified {
  OutcomeClass cls;
  std::int64_t retry_after_ms = -1;
};

/// What the router makes of one recorded upstream answer.
Classified classify_case(simdjson::dom::object c) {
  std::int64_t http = 0;
  REQUIRE(c["http"].get_int64().get(http) == simdjson::SUCCESS);

  std::string body;
  std::string_view body_text;
  simdjson::dom::object error;
  bool has_error = c["error"].get_object().get(error) == simdjson::SUCCESS;
  if (c["body"].get_string().get(body_text) == simdjson::SUCCESS) {
    body = std::string(body_text);
  } else {
    REQUIRE(has_error);
    body = R"({"jsonrpc":"2.0","id":1,"error":)" + simdjson::to_string(error) + "}";
  }
  std::string retry_after;
  std::string_view header;
  if (c["headers"]["Retry-After"].get_string().get(header) == simdjson::SUCCESS)
    retry_after = std::string(header);

  if (http != 200) {
    auto cl = classify_http_status(http, body, retry_after, kNow);
    return {cl.cls, cl.retry_after_ms};
  }
  // A 200: the body must be a JSON-RPC answer, else it is a provider failure.
  auto parsed = jsonrpc::parse_response(body);
  if (!parsed) return {OutcomeClass::provider_failure};
  REQUIRE(parsed->replies.size() == 1);
  const auto& reply = parsed->replies[0];
  if (reply.result) return {OutcomeClass::success};
  REQUIRE(reply.error.has_value());
  // The table's error object, read directly, must agree with what parse_response extracted.
  std::int64_t code = 0;
  std::string_view message;
  REQUIRE(error["code"].get_int64().get(code) == simdjson::SUCCESS);
  REQUIRE(error["message"].get_string().get(message) == simdjson::SUCCESS);
  CHECK(reply.error->code == code);
  CHECK(reply.error->message == message);
  auto cls = classify_rpc_error(code, message);
  std::int64_t retry = -1;
  if (cls == OutcomeClass::rate_limited)
    retry = retry_after_ms(retry_after, reply.error->message, reply.error->data, kNow);
  return {cls, retry};
}

}  // namespace

TEST_CASE("every recorded upstream answer gets its class", "[classify]") {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  auto path = std::string(RPCROUTE_SOURCE_DIR) + "/tests/fixtures/upstream-errors.json";
  INFO(path);
  REQUIRE(parser.load(path).get(root) == simdjson::SUCCESS);
  simdjson::dom::array cases;
  REQUIRE(root["cases"].get_array().get(cases) == simdjson::SUCCESS);
  REQUIRE(cases.size() >= 20);

  std::size_t index = 0;
  std::size_t with_retry = 0;
  for (auto item : cases) {
    simdjson::dom::object c;
    REQUIRE(item.get_object().get(c) == simdjson::SUCCESS);
    INFO("case " << index++ << ": " << simdjson::to_string(c));
    std::string_view want_name;
    REQUIRE(c["class"].get_string().get(want_name) == simdjson::SUCCESS);
    auto want = class_named(want_name);
    REQUIRE(want.has_value());

    auto got = classify_case(c);
    CHECK(class_name(got.cls) == class_name(*want));

    std::int64_t retry_s = 0;
    if (c["retry_after_s"].get_int64().get(retry_s) == simdjson::SUCCESS) {
      ++with_retry;
      CHECK(got.retry_after_ms == retry_s * 1000);
    }
  }
  CHECK(with_retry >= 2);
}

TEST_CASE("real providers' wordings get the class their senders mean", "[classify]") {
  // tests/fixtures/provider-errors.json: each class written from what the provider says it
  // means, not from the rule table, so the table is tested against the world.
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  auto path = std::string(RPCROUTE_SOURCE_DIR) + "/tests/fixtures/provider-errors.json";
  INFO(path);
  REQUIRE(parser.load(path).get(root) == simdjson::SUCCESS);
  simdjson::dom::array cases;
  REQUIRE(root["cases"].get_array().get(cases) == simdjson::SUCCESS);

  std::set<std::string, std::less<>> sources;
  std::set<std::string, std::less<>> classes;
  std::set<std::string, std::less<>> missing_sources;
  std::size_t index = 0;
  for (auto item : cases) {
    simdjson::dom::object c;
    REQUIRE(item.get_object().get(c) == simdjson::SUCCESS);
    INFO("case " << index++ << ": " << simdjson::to_string(c));
    std::string_view source;
    std::string_view want_name;
    REQUIRE(c["source"].get_string().get(source) == simdjson::SUCCESS);
    REQUIRE(c["class"].get_string().get(want_name) == simdjson::SUCCESS);
    sources.emplace(source);
    classes.emplace(want_name);
    auto want = class_named(want_name);
    REQUIRE(want.has_value());
    // The whole answer (status and body); where the design overrides the sender's meaning, the
    // case says so (answer_class, with the reason in "design").
    std::string_view answer_name = want_name;
    if (std::string_view design; c["answer_class"].get_string().get(design) == simdjson::SUCCESS)
      answer_name = design;
    auto answer_want = class_named(answer_name);
    REQUIRE(answer_want.has_value());
    auto got = classify_case(c);
    CHECK(class_name(got.cls) == class_name(*answer_want));
    // The error object alone, as it comes inside a batch answered with 200.
    std::int64_t code = 0;
    std::string_view message;
    REQUIRE(c["error"]["code"].get_int64().get(code) == simdjson::SUCCESS);
    REQUIRE(c["error"]["message"].get_string().get(message) == simdjson::SUCCESS);
    CHECK(class_name(classify_rpc_error(code, message)) == class_name(*want));
    std::int64_t retry_s = 0;
    if (c["retry_after_s"].get_int64().get(retry_s) == simdjson::SUCCESS)
      CHECK(got.retry_after_ms == retry_s * 1000);
    // Whether the node lacks the old state (an archive provider is asked instead): as the case
    // says, absent meaning no.
    bool missing = false;
    if (c["missing_state"].get_bool().get(missing) == simdjson::SUCCESS) {
      missing_sources.emplace(source);
      CHECK(class_name(*want) == "capability");
    }
    CHECK(says_missing_state(message) == missing);
  }
  for (std::string_view s : {"geth", "erigon", "nethermind", "besu", "reth", "Infura"}) {
    INFO("no missing-state case from " << s);
    CHECK(missing_sources.count(s) == 1);
  }
  for (std::string_view s :
       {"Alchemy", "Infura", "QuickNode", "Ankr", "Cloudflare", "publicnode", "llamarpc",
        "BlastAPI", "Chainstack", "geth", "erigon", "nethermind", "besu", "reth", "dRPC"}) {
    INFO("no case from " << s);
    CHECK(sources.count(s) == 1);
  }
  for (std::string_view k : {"deterministic", "capability", "rate_limited", "provider_failure"}) {
    INFO("no case of class " << k);
    CHECK(classes.count(k) == 1);
  }
}

TEST_CASE("a node behind or a bad request is not a node without the old state", "[classify]") {
  // Each of these makes the router try another provider (or answer the client), never mark the
  // provider non-archival: the block is not reached yet, or the request itself is wrong.
  for (std::string_view m :
       {"header not found", "block not found 11185311", "unknown block", "invalid block range params",
        "From block 10 is later than to block 5.", "8633830 could not be found",
        "the method debug_traceTransaction does not exist/is not available", "Method not enabled",
        "query block range exceeds server limit, narrow your filter: 1000", "execution reverted"}) {
    INFO(m);
    CHECK_FALSE(says_missing_state(m));
  }
  CHECK(says_missing_state("MISSING TRIE NODE abc (path )"));  // case does not matter
}

TEST_CASE("every message rule is reachable and wins over codes", "[classify]") {
  auto rules = message_rules();
  REQUIRE_FALSE(rules.empty());
  for (std::size_t i = 0; i < rules.size(); ++i) {
    const auto& r = rules[i];
    std::string message = "upstream says: " + std::string(r.needle);
    if (!r.needle2.empty()) message += " and " + std::string(r.needle2);
    INFO("rule " << i << " '" << r.needle << "' '" << r.needle2 << "' -> " << class_name(r.cls)
                 << "; message: " << message);
    // No earlier row of another class swallows this one.
    for (std::size_t j = 0; j < i; ++j) {
      const auto& earlier = rules[j];
      bool hit = message.find(earlier.needle) != std::string::npos &&
                 (earlier.needle2.empty() || message.find(earlier.needle2) != std::string::npos);
      if (hit) CHECK(class_name(earlier.cls) == class_name(r.cls));
    }
    CHECK(class_name(classify_rpc_error(0, message)) == class_name(r.cls));
    // Case does not matter.
    CHECK(class_name(classify_rpc_error(0, upper(message))) == class_name(r.cls));
    // The message decides even when the code says otherwise.
    CHECK(class_name(classify_rpc_error(-32603, message)) == class_name(r.cls));
    if (!r.needle2.empty()) {
      // Both needles are needed.
      auto only_first = classify_rpc_error(12345, "upstream says: " + std::string(r.needle));
      CHECK(class_name(only_first) != class_name(r.cls));
    }
  }
}

TEST_CASE("every code rule is reachable", "[classify]") {
  auto rules = code_rules();
  REQUIRE_FALSE(rules.empty());
  for (std::size_t i = 0; i < rules.size(); ++i) {
    const auto& r = rules[i];
    INFO("code " << r.code << " -> " << class_name(r.cls));
    for (std::size_t j = 0; j < i; ++j) CHECK(rules[j].code != r.code);  // no shadowed duplicates
    CHECK(class_name(classify_rpc_error(r.code, "")) == class_name(r.cls));
    CHECK(class_name(classify_rpc_error(r.code, "zzz")) == class_name(r.cls));
  }
  CHECK(classify_rpc_error(12345, "zzz") == OutcomeClass::unknown);
  CHECK(classify_rpc_error(-32000, "something unexpected happened") == OutcomeClass::unknown);
}

TEST_CASE("classification of the examples in DESIGN.md section 7", "[classify]") {
  CHECK(classify_rpc_error(3, "execution reverted") == OutcomeClass::deterministic);
  CHECK(classify_rpc_error(-32602, "invalid params") == OutcomeClass::deterministic);
  CHECK(classify_rpc_error(-32600, "invalid request") == OutcomeClass::deterministic);
  CHECK(classify_rpc_error(-32000, "nonce too low") == OutcomeClass::deterministic);
  CHECK(classify_rpc_error(-32000, "insufficient funds for gas * price + value") ==
        OutcomeClass::deterministic);
  CHECK(classify_rpc_error(-32000, "already known") == OutcomeClass::deterministic);
  CHECK(classify_rpc_error(-32601, "method not found") == OutcomeClass::capability);
  CHECK(classify_rpc_error(-32601, "the method eth_foo does not exist/is not available") ==
        OutcomeClass::capability);
  CHECK(classify_rpc_error(-32000, "missing trie node abc") == OutcomeClass::capability);
  CHECK(classify_rpc_error(-32000, "header not found") == OutcomeClass::capability);
  CHECK(classify_rpc_error(-32602, "BlockOutOfRangeError: block height is 0 but requested was 1") ==
        OutcomeClass::capability);
  CHECK(classify_rpc_error(-32005, "limit exceeded") == OutcomeClass::rate_limited);
  CHECK(classify_rpc_error(429, "Too Many Requests") == OutcomeClass::rate_limited);
  CHECK(classify_rpc_error(-32000, "Your app has exceeded its compute units per second capacity") ==
        OutcomeClass::rate_limited);
  CHECK(classify_rpc_error(-32603, "internal error") == OutcomeClass::provider_failure);
}

TEST_CASE("retry_after_ms reads headers, error data and messages", "[classify]") {
  SECTION("Retry-After in seconds") {
    CHECK(retry_after_ms("7", "", "", kNow) == 7'000);
    CHECK(retry_after_ms("0", "", "", kNow) == 0);
    CHECK(retry_after_ms("120", "try again in 5 seconds", R"({"retry_after":9})", kNow) == 120'000);
  }
  SECTION("Retry-After as an HTTP date, relative to now") {
    // kNow is Tue, 14 Nov 2023 22:13:20 GMT.
    CHECK(retry_after_ms("Tue, 14 Nov 2023 22:13:30 GMT", "", "", kNow) == 10'000);
    CHECK(retry_after_ms("Tue, 14 Nov 2023 22:15:20 GMT", "", "", kNow) == 120'000);
    CHECK(retry_after_ms("Tue, 14 Nov 2023 22:13:30 GMT", "", "", kNow + 4'000) == 6'000);
    CHECK(retry_after_ms("Mon, 13 Nov 2023 00:00:00 GMT", "", "", kNow) == 0);  // in the past
  }
  SECTION("more than a week is not believed, whatever says it (found by fuzzing)") {
    // A huge Retry-After overflowed seconds × 1000 (UB), and would have kept a provider marked
    // rate-limited for years; the error data and message were already capped at a week.
    CHECK(retry_after_ms("604800", "", "", kNow) == 604'800'000);
    CHECK(retry_after_ms("604801", "", "", kNow) == -1);
    CHECK(retry_after_ms("88888888", "", "", kNow) == -1);
    CHECK(retry_after_ms("9223372036854775807", "", "", kNow) == -1);
    CHECK(retry_after_ms("99999999999", "try again in 3 seconds", "", kNow) == 3'000);
    CHECK(retry_after_ms("Tue, 14 Nov 2073 22:13:20 GMT", "", "", kNow) == -1);
  }
  SECTION("not-a-number is not a duration (found by fuzzing: NaN cast to an integer is UB)") {
    CHECK(retry_after_ms("", "", R"({"retry_after":"nan"})", kNow) == -1);
    CHECK(retry_after_ms("", "rate limited, try again in nan seconds", "", kNow) == -1);
    CHECK(retry_after_ms("", "rate limited, try again in inf seconds", "", kNow) == -1);
  }
  SECTION("an unusable header falls through to the error") {
    CHECK(retry_after_ms("soon", "", "", kNow) == -1);
    CHECK(retry_after_ms("soon", "try again in 3 seconds", "", kNow) == 3'000);
  }
  SECTION("error data") {
    CHECK(retry_after_ms("", "", R"({"retry_after":12})", kNow) == 12'000);
    CHECK(retry_after_ms("", "",
                         R"({"current_rps":13.333,"allowed_rps":10.0,"backoff_seconds":30.0})",
                         kNow) == 30'000);
    CHECK(retry_after_ms("", "", R"({"backoff_seconds": 1.5})", kNow) == 1'500);
    CHECK(retry_after_ms("", "", R"({"other":5})", kNow) == -1);
  }
  SECTION("the message") {
    CHECK(retry_after_ms("", "rate limited, try again in 5 seconds", "", kNow) == 5'000);
    CHECK(retry_after_ms("", "Too many requests. Try again in 2 seconds.", "", kNow) == 2'000);
    CHECK(retry_after_ms("", "rate limited: retry in 250ms", "", kNow) == 250);
    CHECK(retry_after_ms("", "rate limited: retry after 1.5 s", "", kNow) == 1'500);
    CHECK(retry_after_ms("", "daily request count exceeded, request rate limited", "", kNow) == -1);
  }
  CHECK(retry_after_ms("", "", "", kNow) == -1);
}

TEST_CASE("retry_after_ms understands minutes and milliseconds spelled out",
          "[classify]") {
  // The unit after "try again in N" is only checked for an "ms" prefix: "2 minutes" is taken as
  // 2 s and "500 milliseconds" as 500 s (classify.cpp retry_after_ms, the `millis` test).
  CHECK(retry_after_ms("", "rate limited, try again in 2 minutes", "", kNow) == 120'000);
  CHECK(retry_after_ms("", "try again in 500 milliseconds", "", kNow) == 500);
}

TEST_CASE("classify_transport maps every transport failure", "[classify]") {
  struct Row {
    TransportError e;
    Outcome outcome;
    bool never_sent;
  };
  const Row rows[] = {
      {TransportError::connect, Outcome::connect_failed, true},
      {TransportError::dns, Outcome::dns_failed, true},
      {TransportError::timeout, Outcome::timeout, false},
      {TransportError::tls, Outcome::tls_failed, false},
      {TransportError::reset, Outcome::transport_error, false},
      {TransportError::truncated, Outcome::bad_response, false},
      {TransportError::other, Outcome::transport_error, false},
      {TransportError::too_large, Outcome::too_large, false},
      {TransportError::encoded, Outcome::bad_response, false},
      {TransportError::out_of_memory, Outcome::out_of_memory, false},
  };
  for (const auto& row : rows) {
    auto c = classify_transport(row.e, "boom");
    INFO(outcome_name(row.outcome));
    CHECK(c.outcome == row.outcome);
    CHECK(c.cls == OutcomeClass::provider_failure);
    CHECK(c.counts_for_breaker());
    CHECK(c.never_sent() == row.never_sent);
    CHECK(c.message == "boom");
    CHECK(c.retry_after_ms == -1);
  }
  // Abandoned by the caller (the sidecar's client left): not the provider's failure.
  auto cancelled = classify_transport(TransportError::cancelled, "cancelled");
  CHECK_FALSE(cancelled.counts_for_breaker());
  CHECK_FALSE(cancelled.never_sent());
  auto none = classify_transport(TransportError::none, "");
  CHECK(none.outcome == Outcome::success);
  CHECK(none.cls == OutcomeClass::success);
  CHECK_FALSE(none.counts_for_breaker());
  CHECK_FALSE(none.never_sent());
}

TEST_CASE(
    "classify_http_status: 429 and rate-limit bodies are rate limits, the rest provider failures",
    "[classify]") {
  SECTION("429 with a Retry-After") {
    auto c = classify_http_status(429, "Too Many Requests", "7", kNow);
    CHECK(c.outcome == Outcome::rate_limited);
    CHECK(c.cls == OutcomeClass::rate_limited);
    CHECK(c.retry_after_ms == 7'000);
    CHECK_FALSE(c.counts_for_breaker());
    CHECK(c.message == "HTTP 429");
  }
  SECTION("429 saying nothing about when") {
    auto c = classify_http_status(429, "", "", kNow);
    CHECK(c.cls == OutcomeClass::rate_limited);
    CHECK(c.retry_after_ms == -1);
  }
  SECTION("another status whose body is a rate-limit error") {
    auto c = classify_http_status(
        503,
        R"({"jsonrpc":"2.0","id":1,"error":{"code":-32005,"message":"request rate exceeded","data":{"retry_after":4}}})",
        "", kNow);
    CHECK(c.cls == OutcomeClass::rate_limited);
    CHECK(c.retry_after_ms == 4'000);
    CHECK(c.message.find("request rate exceeded") != std::string::npos);
  }
  SECTION("5xx and other 4xx") {
    for (long status : {500L, 502L, 503L, 504L, 400L, 401L, 403L, 404L}) {
      INFO(status);
      auto c = classify_http_status(status, "<html>bad gateway</html>", "", kNow);
      CHECK(c.outcome == Outcome::http_error);
      CHECK(c.cls == OutcomeClass::provider_failure);
      CHECK(c.counts_for_breaker());
      CHECK(c.message == "HTTP " + std::to_string(status));
    }
  }
  SECTION("a JSON-RPC error body that is not a rate limit keeps its message") {
    auto c = classify_http_status(
        401,
        R"({"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"Must be authenticated!"}})",
        "", kNow);
    CHECK(c.cls == OutcomeClass::provider_failure);
    CHECK(c.message == "HTTP 401: Must be authenticated!");
  }
}

TEST_CASE("outcome names round-trip", "[classify]") {
  for (int i = 0; i <= static_cast<int>(kLastOutcome); ++i) {
    auto o = static_cast<Outcome>(i);
    INFO(outcome_name(o));
    CHECK(outcome_name(o) != "?");
    CHECK(parse_outcome(outcome_name(o)) == std::optional<Outcome>(o));
  }
  CHECK_FALSE(parse_outcome("exploded").has_value());
  CHECK_FALSE(parse_outcome("").has_value());
}

TEST_CASE("report_text: control characters, DEL and C1 controls from a provider become visible escapes",
          "[classify][report]") {
  CHECK(report_text("plain text, é and ✓ stay") == "plain text, é and ✓ stay");
  CHECK(report_text("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m");
  CHECK(report_text("one\nrpcroute: error: forged\r\tx") == "one\\nrpcroute: error: forged\\r\\tx");
  CHECK(report_text(std::string("nul\0bel\x07" "del\x7f", 12)) == "nul\\x00bel\\x07del\\x7f");
  CHECK(report_text("csi \xc2\x9b" "2J, nbsp \xc2\xa0") == "csi \\xc2\\x9b2J, nbsp \xc2\xa0");
  // Not UTF-8: a stray continuation byte, a cut sequence, an overlong form, a surrogate.
  CHECK(report_text("a\x80z") == "a\\x80z");
  CHECK(report_text("cut \xe2\x9c") == "cut \\xe2\\x9c");
  CHECK(report_text("over \xc0\xaf") == "over \\xc0\\xaf");
  CHECK(report_text("sur \xed\xa0\x80") == "sur \\xed\\xa0\\x80");
  // Whatever comes out is printable: nothing below 0x20, no DEL.
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  for (unsigned char c : report_text(all)) CHECK((c >= 0x20 && c != 0x7f));
}

TEST_CASE("report_text: a long message is cut to 512 bytes on a character boundary, saying how long it was",
          "[classify][report]") {
  CHECK(report_text(std::string(512, 'a')) == std::string(512, 'a'));
  const std::string huge(200'000, 'x');
  auto cut = report_text(huge);
  CHECK(cut == std::string(512, 'x') + "… (200000 bytes)");
  // A 3-byte character that would straddle the limit is left out whole.
  std::string wide = std::string(511, 'a') + "✓✓";
  auto w = report_text(wide);
  CHECK(w == std::string(511, 'a') + "… (517 bytes)");
  // Escapes count as what is printed: 200 ESC bytes print as 800.
  auto e = report_text(std::string(200, '\x1b'));
  CHECK(e.rfind("… (200 bytes)") == e.size() - std::string("… (200 bytes)").size());
  CHECK(e.size() <= 512 + std::string("… (200 bytes)").size());
  CHECK(e.substr(0, 8) == "\\x1b\\x1b");
}

}  // namespace unit_classify_test

#include "rpcroute/jsonrpc.hpp"

#include <catch2/catch.hpp>
#include <limits>
#include <string>

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_jsonrpc_test {

using namespace rpcroute;
using namespace rpcroute::jsonrpc;

namespace {

/// Parses a body that must be valid; fails the test otherwise.
Body body_of(std::string_view text) {
  auto b = parse_body(text);
  INFO(text);
  REQUIRE(b.has_value());
  return *b;
}

/// The error code, or 0 when the body parsed (for assertions that must show what happened).
int code_or_zero(std::string_view text) {
  auto b = parse_body(text);
  return b ? 0 : b.error().code;
}

int error_code_of(std::string_view text) {
  auto b = parse_body(text);
  INFO(text);
  REQUIRE_FALSE(b.has_value());
  return b.error().code;
}

}  // namespace

TEST_CASE("parse_body: a single call", "[jsonrpc]") {
  auto b =
      body_of(R"({"jsonrpc":"2.0","id":7,"method":"eth_getBalance","params":["0xabc", "latest"]})");
  CHECK_FALSE(b.batch);
  REQUIRE(b.calls.size() == 1);
  const Call& c = b.calls[0];
  CHECK(c.valid());
  CHECK(c.id == "7");
  CHECK(c.has_id());
  CHECK(c.reply_id() == "7");
  CHECK(c.method == "eth_getBalance");
  CHECK(c.params == R"(["0xabc", "latest"])");  // raw bytes, spacing kept
}

TEST_CASE("parse_body: params absent become [], object params are kept raw", "[jsonrpc]") {
  auto b = body_of(R"({"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"})");
  CHECK(b.calls[0].params == "[]");
  auto o = body_of(R"({"jsonrpc":"2.0","id":1,"method":"m","params":{"a":[1,{"b":null}]}})");
  CHECK(o.calls[0].params == R"({"a":[1,{"b":null}]})");
  CHECK(o.calls[0].valid());
}

TEST_CASE("parse_body: ids are kept exactly as raw tokens", "[jsonrpc]") {
  const std::pair<const char*, const char*> ids[] = {
      {"7", "7"},
      {R"("abc")", R"("abc")"},
      {"null", "null"},
      {"1.5", "1.5"},
      {"-3", "-3"},
      {"1e3", "1e3"},
      {"123456789012345678901234567890", "123456789012345678901234567890"},
      {"18446744073709551617", "18446744073709551617"},
      {R"("a\"b\u00e9")", R"("a\"b\u00e9")"},
      {"  42  ", "42"},
  };
  for (const auto& [token, expected] : ids) {
    std::string text = std::string(R"({"jsonrpc":"2.0","id":)") + token + R"(,"method":"m"})";
    auto b = body_of(text);
    INFO(text);
    REQUIRE(b.calls.size() == 1);
    CHECK(b.calls[0].id == expected);
    CHECK(b.calls[0].has_id());
    CHECK(b.calls[0].valid());
  }
}

TEST_CASE("parse_body: a notification has no id", "[jsonrpc]") {
  auto b = body_of(R"({"jsonrpc":"2.0","method":"eth_subscribe","params":["newHeads"]})");
  REQUIRE(b.calls.size() == 1);
  CHECK(b.calls[0].valid());
  CHECK_FALSE(b.calls[0].has_id());
  CHECK(b.calls[0].id.empty());
  CHECK(b.calls[0].reply_id() == "null");
  // An explicit null id is not a notification.
  auto n = body_of(R"({"jsonrpc":"2.0","id":null,"method":"m"})");
  CHECK(n.calls[0].has_id());
}

TEST_CASE("parse_body: a batch keeps order and raw ids", "[jsonrpc]") {
  auto b = body_of(
      R"([{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","id":"x","method":"b","params":[1]},)"
      R"({"jsonrpc":"2.0","method":"c"}])");
  CHECK(b.batch);
  REQUIRE(b.calls.size() == 3);
  CHECK(b.calls[0].id == "1");
  CHECK(b.calls[0].method == "a");
  CHECK(b.calls[1].id == R"("x")");
  CHECK(b.calls[1].params == "[1]");
  CHECK_FALSE(b.calls[2].has_id());
  for (const auto& c : b.calls) CHECK(c.valid());
  // A batch of one is still a batch.
  CHECK(body_of(R"([{"id":1,"method":"a"}])").batch);
}

TEST_CASE("parse_body: method names are unescaped", "[jsonrpc]") {
  auto b = body_of(R"({"id":1,"method":"eth_\u0063all"})");
  CHECK(b.calls[0].method == "eth_call");
}

TEST_CASE("parse_body: invalid JSON is -32700, a non-request is -32600", "[jsonrpc]") {
  CHECK(error_code_of("") == kParseError);
  CHECK(error_code_of("   \n\t ") == kParseError);
  CHECK(error_code_of("{") == kParseError);
  CHECK(error_code_of(R"({"id":1,"method":})") == kParseError);
  CHECK(error_code_of(R"({"id":1 "method":"m"})") == kParseError);
  CHECK(error_code_of("[1,2") == kParseError);
  CHECK(error_code_of(R"({'id':1})") == kParseError);
  CHECK(error_code_of("<html>502</html>") == kParseError);

  CHECK(error_code_of("[]") == kInvalidRequest);
  CHECK(error_code_of(" [ ] ") == kInvalidRequest);
  CHECK(error_code_of("1") == kInvalidRequest);
  CHECK(error_code_of(R"("eth_call")") == kInvalidRequest);
  CHECK(error_code_of("null") == kInvalidRequest);
  CHECK(error_code_of("true") == kInvalidRequest);

  auto empty = parse_body("");
  REQUIRE_FALSE(empty.has_value());
  CHECK(empty.error().message.find("empty") != std::string::npos);
  auto batch = parse_body("[]");
  REQUIRE_FALSE(batch.has_value());
  CHECK(batch.error().message.find("empty batch") != std::string::npos);
}

TEST_CASE("parse_body: trailing garbage is -32700", "[jsonrpc]") {
  CHECK(error_code_of(R"({"id":1,"method":"m"} x)") == kParseError);
  CHECK(error_code_of(R"({"id":1,"method":"m"}{"id":2,"method":"m"})") == kParseError);
  CHECK(error_code_of(R"([{"id":1,"method":"m"}] ])") == kParseError);
  CHECK(error_code_of(R"([{"id":1,"method":"m"}],)") == kParseError);
  // Trailing whitespace is fine.
  CHECK(body_of("{\"id\":1,\"method\":\"m\"}\n\r\n  ").calls.size() == 1);
}

TEST_CASE("parse_body: a bare scalar that is not JSON is -32700", "[jsonrpc]") {
  // `nul`, `01x` and `tru` are not JSON at all; parse_body answers -32600 "not a request"
  // instead: doc.raw_json_token() in the scalar branch of parse_body does not validate.
  CHECK(code_or_zero("nul") == kParseError);
  CHECK(code_or_zero("01x") == kParseError);
  CHECK(code_or_zero("tru") == kParseError);
}

TEST_CASE("parse_body: invalid JSON inside params is -32700, never forwarded",
          "[jsonrpc]") {
  // DESIGN.md section 4: invalid JSON is -32700 and nothing is sent upstream. raw_of() takes
  // objects and arrays with raw_json() without validating their contents, so these parse and
  // the broken params would be forwarded to a provider.
  CHECK(code_or_zero(R"({"jsonrpc":"2.0","id":1,"method":"m","params":[1,}})") == kParseError);
  CHECK(code_or_zero(R"({"jsonrpc":"2.0","id":1,"method":"m","params":{"a":tru}})") == kParseError);
  CHECK(code_or_zero(R"([{"id":1,"method":"m","params":[}]}])") == kParseError);
}

TEST_CASE("parse_body: a misplaced colon or bracket is -32700, not skipped over", "[jsonrpc]") {
  // Found by tests/fuzz (jsonrpc_request): On-Demand skips a value it is not asked for by counting
  // brackets, so "x":2,"y"} inside an array vanished and the rest parsed as items or params.
  CHECK(code_or_zero(R"([1,"x":2,"y"},{"jsonrpc":"2.0","id":1,"method":"m"}])") == kParseError);
  CHECK(code_or_zero(R"(["a":1}, {"jsonrpc":"2.0","id":1,"method":"m"}])") == kParseError);
  CHECK(code_or_zero(R"({"jsonrpc":"2.0","id":1,"method":"m","params":[{"a":1},"x":2,"y"},{"b":1}]})") ==
        kParseError);
  CHECK(code_or_zero(R"([{"jsonrpc":"2.0","id":"a","method":"eth_blockNumber"},"id":2,"methodkNumber"},)"
                     R"({"jsonrpc":"2.0","i$d":2,"method":"eth_gasPrice"}])") == kParseError);
  // Brackets and escapes inside strings are not structure.
  auto b = body_of(R"({"jsonrpc":"2.0","id":"a\"]}:,","method":"m","params":[{"x":"[{\\"}]})");
  REQUIRE(b.calls.size() == 1);
  CHECK(b.calls[0].id == R"("a\"]}:,")");
  CHECK(b.calls[0].params == R"([{"x":"[{\\"}])");

  // Long strings are crossed with memchr past their first 32 bytes: escaped quotes and runs of
  // backslashes on either side of that point still decide where a string ends.
  for (std::size_t pad : {0, 20, 29, 30, 31, 32, 33, 100}) {
    const std::string filler(pad, 'a');
    for (std::string tail : {R"(\")", R"(\\)", R"(\\\")", R"(x\"]}:,\\)"}) {  // escapes only
      const std::string str = "\"" + filler + tail + "\"";  // a valid JSON string
      auto ok = body_of(R"({"jsonrpc":"2.0","id":1,"method":"m","params":[)" + str + "]}");
      REQUIRE(ok.calls.size() == 1);
      CHECK(ok.calls[0].params == "[" + str + "]");
      // The same string followed by a grammar error is still caught.
      CHECK(code_or_zero(R"({"jsonrpc":"2.0","id":1,"method":"m","params":[)" + str + R"(:1]})") == kParseError);
    }
  }
}

TEST_CASE("parse_body: invalid items in a batch keep their own reason", "[jsonrpc]") {
  auto b = body_of(R"([
    1,
    {"jsonrpc":"2.0","id":1,"method":"eth_chainId"},
    {"jsonrpc":"2.0","id":2},
    {"jsonrpc":"2.0","id":3,"method":5},
    {"jsonrpc":"2.0","id":4,"method":"m","params":7},
    {"jsonrpc":"2.0","id":{"x":1},"method":"m"},
    {"jsonrpc":"1.0","id":6,"method":"m"},
    {"jsonrpc":"2.0","id":7,"method":""},
    "str",
    {"jsonrpc":"2.0","id":9,"method":"eth_blockNumber","extra":{"ignored":[1,2]}}
  ])");
  CHECK(b.batch);
  REQUIRE(b.calls.size() == 10);
  CHECK(b.calls[0].invalid_reason == "a batch item must be a request object");
  CHECK(b.calls[1].valid());
  CHECK(b.calls[1].method == "eth_chainId");
  CHECK(b.calls[2].invalid_reason == "missing method");
  CHECK(b.calls[2].id == "2");
  CHECK(b.calls[3].invalid_reason == "method must be a string");
  CHECK(b.calls[3].id == "3");
  CHECK(b.calls[4].invalid_reason == "params must be an array or an object");
  CHECK(b.calls[4].id == "4");
  CHECK(b.calls[5].invalid_reason == "id must be a string, a number or null");
  CHECK(b.calls[5].reply_id() == "null");
  CHECK(b.calls[6].invalid_reason == "jsonrpc must be \"2.0\"");
  CHECK(b.calls[7].invalid_reason == "empty method");
  CHECK(b.calls[8].invalid_reason == "a batch item must be a request object");
  CHECK(b.calls[9].valid());
  CHECK(b.calls[9].method == "eth_blockNumber");
  CHECK(b.calls[9].id == "9");
}

TEST_CASE("parse_body: an invalid single request keeps its reason and id", "[jsonrpc]") {
  auto b = body_of(R"({"jsonrpc":"2.0","id":"q","params":[]})");
  CHECK_FALSE(b.batch);
  REQUIRE(b.calls.size() == 1);
  CHECK_FALSE(b.calls[0].valid());
  CHECK(b.calls[0].invalid_reason == "missing method");
  CHECK(b.calls[0].id == R"("q")");
  auto boolean_id = body_of(R"({"jsonrpc":"2.0","id":true,"method":"m"})");
  CHECK(boolean_id.calls[0].invalid_reason == "id must be a string, a number or null");
}

TEST_CASE("parse_response: result, error and batch", "[jsonrpc]") {
  SECTION("result") {
    auto r = parse_response(R"({"jsonrpc":"2.0","id":1,"result":"0x1a"})");
    REQUIRE(r.has_value());
    CHECK_FALSE(r->batch);
    REQUIRE(r->replies.size() == 1);
    CHECK(r->replies[0].id == "1");
    CHECK(r->replies[0].result == std::optional<std::string>(R"("0x1a")"));
    CHECK_FALSE(r->replies[0].error.has_value());
  }
  SECTION("object result kept raw") {
    auto r = parse_response(R"({"jsonrpc":"2.0","id":"a","result":{"number":"0x1","txs":[]}})");
    REQUIRE(r.has_value());
    CHECK(r->replies[0].id == R"("a")");
    CHECK(r->replies[0].result == std::optional<std::string>(R"({"number":"0x1","txs":[]})"));
  }
  SECTION("null result is a result") {
    auto r = parse_response(R"({"jsonrpc":"2.0","id":1,"result":null})");
    REQUIRE(r.has_value());
    CHECK(r->replies[0].result == std::optional<std::string>("null"));
  }
  SECTION("error with data") {
    auto r = parse_response(
        R"({"jsonrpc":"2.0","id":2,"error":{"code":3,"message":"execution reverted","data":"0x08c379a0"}})");
    REQUIRE(r.has_value());
    const auto& rep = r->replies[0];
    CHECK_FALSE(rep.result.has_value());
    REQUIRE(rep.error.has_value());
    CHECK(rep.error->code == 3);
    CHECK(rep.error->message == "execution reverted");
    CHECK(rep.error->data == R"("0x08c379a0")");
  }
  SECTION("error without data, negative code, escaped message") {
    auto r =
        parse_response(R"({"jsonrpc":"2.0","id":2,"error":{"message":"bad \"x\"","code":-32602}})");
    REQUIRE(r.has_value());
    REQUIRE(r->replies[0].error.has_value());
    CHECK(r->replies[0].error->code == -32602);
    CHECK(r->replies[0].error->message == "bad \"x\"");
    CHECK(r->replies[0].error->data.empty());
  }
  SECTION("\"error\": null next to a result") {
    auto r = parse_response(R"({"jsonrpc":"2.0","id":1,"result":"0x1","error":null})");
    REQUIRE(r.has_value());
    CHECK(r->replies[0].result.has_value());
    CHECK_FALSE(r->replies[0].error.has_value());
  }
  SECTION("batch") {
    auto r = parse_response(
        R"([{"jsonrpc":"2.0","id":1,"result":"0x1"},{"jsonrpc":"2.0","id":0,"error":{"code":-32601,"message":"nope"}}])");
    REQUIRE(r.has_value());
    CHECK(r->batch);
    REQUIRE(r->replies.size() == 2);
    CHECK(r->replies[0].id == "1");
    CHECK(r->replies[0].result.has_value());
    CHECK(r->replies[1].id == "0");
    REQUIRE(r->replies[1].error.has_value());
    CHECK(r->replies[1].error->code == -32601);
  }
}

TEST_CASE("parse_response: anything else is an error", "[jsonrpc]") {
  const char* bad[] = {
      R"({"jsonrpc":"2.0","id":1})",               // neither result nor error
      R"({"jsonrpc":"2.0","id":1,"error":null})",  // only a null error
      R"({"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"x"}})",  // both
      R"({"jsonrpc":"2.0","id":1,"error":"boom"})",                // error not an object
      R"({"jsonrpc":"2.0","id":1,"result":"0x1")",                 // truncated
      R"({"jsonrpc":"2.0","id":1,"result":"0x1"} trailing)",       // trailing garbage
      "<html><head><title>502 Bad Gateway</title></head></html>",  // HTML
      "<!DOCTYPE html><html><body>Checking your browser</body></html>",
      "Too Many Requests",
      "",
      "   ",
      "42",
      R"("result")",
      R"([{"jsonrpc":"2.0","id":1,"result":"0x1"}, 5])",  // batch with a non-object
      R"({"jsonrpc":"2.0","id":1,"result":[1,"x":2},3]})",    // a colon in an array (found by fuzzing)
      R"([{"jsonrpc":"2.0","id":0,"result":1},"x":1},{"jsonrpc":"2.0","id":1,"result":2}])",
  };
  for (const char* body : bad) {
    INFO(body);
    auto r = parse_response(body);
    CHECK_FALSE(r.has_value());
    if (!r) CHECK_FALSE(r.error().empty());
  }
  auto neither = parse_response(R"({"jsonrpc":"2.0","id":1})");
  REQUIRE_FALSE(neither.has_value());
  CHECK(neither.error().find("neither result nor error") != std::string::npos);
  auto html = parse_response("<html></html>");
  REQUIRE_FALSE(html.has_value());
  CHECK(html.error().find("invalid JSON") != std::string::npos);
}

TEST_CASE("parse_response: a member given twice makes an answer ambiguous, not a response", "[jsonrpc]") {
  const char* bad[] = {
      R"({"jsonrpc":"2.0","id":1,"id":2,"result":"0x1"})",
      R"({"jsonrpc":"2.0","id":1,"result":"0x1","result":"0x2"})",
      R"({"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"},"error":{"code":2,"message":"y"}})",
      R"([{"jsonrpc":"2.0","id":1,"result":"0x1","id":3}])",
  };
  for (const char* body : bad) {
    INFO(body);
    auto r = parse_response(body);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().find("given twice") != std::string::npos);
  }
}

TEST_CASE("parse_response: an error code beyond 64 bits is clamped", "[jsonrpc]") {
  // Found by a fuzz seed under UBSan: casting 1e300 to int64 is undefined behaviour.
  auto r = parse_response(R"({"jsonrpc":"2.0","id":0,"error":{"code":1e300,"message":"x"}})");
  REQUIRE(r.has_value());
  CHECK(r->replies[0].error->code == 9'000'000'000'000'000'000);
  auto neg = parse_response(R"({"jsonrpc":"2.0","id":0,"error":{"code":-1e300,"message":"x"}})");
  REQUIRE(neg.has_value());
  CHECK(neg->replies[0].error->code == -9'000'000'000'000'000'000);
}

TEST_CASE("make_call, make_result and make_error round-trip", "[jsonrpc]") {
  SECTION("make_call parses back as the same call") {
    auto text = make_call(R"("id-1")", "eth_getBalance", R"(["0xabc","latest"])");
    auto b = body_of(text);
    REQUIRE(b.calls.size() == 1);
    CHECK(b.calls[0].id == R"("id-1")");
    CHECK(b.calls[0].method == "eth_getBalance");
    CHECK(b.calls[0].params == R"(["0xabc","latest"])");
    CHECK(b.calls[0].valid());
  }
  SECTION("make_call fills null id and [] params") {
    auto text = make_call("", "eth_blockNumber", "");
    CHECK(text == R"({"jsonrpc":"2.0","id":null,"method":"eth_blockNumber","params":[]})");
    auto b = body_of(text);
    CHECK(b.calls[0].id == "null");
    CHECK(b.calls[0].params == "[]");
  }
  SECTION("make_call escapes the method name") {
    auto b = body_of(make_call("1", "we\"ird\\name\n", "[]"));
    CHECK(b.calls[0].method == "we\"ird\\name\n");
  }
  SECTION("append_call builds batches") {
    std::string out = "[";
    append_call(out, "0", "a", "[]");
    out += ",";
    append_call(out, "1", "b", "[1]");
    out += "]";
    auto b = body_of(out);
    CHECK(b.batch);
    REQUIRE(b.calls.size() == 2);
    CHECK(b.calls[1].method == "b");
    CHECK(b.calls[1].params == "[1]");
  }
  SECTION("make_result") {
    auto text = make_result("7", R"({"a":[1,2]})");
    CHECK(text == R"({"jsonrpc":"2.0","id":7,"result":{"a":[1,2]}})");
    auto r = parse_response(text);
    REQUIRE(r.has_value());
    CHECK(r->replies[0].id == "7");
    CHECK(r->replies[0].result == std::optional<std::string>(R"({"a":[1,2]})"));
    auto null_id = parse_response(make_result("", "true"));
    REQUIRE(null_id.has_value());
    CHECK(null_id->replies[0].id == "null");
  }
  SECTION("make_result sizes its answer once") {
    // A large result becomes a response of exactly its size: an allocation one byte short made
    // the closing brace double the buffer (a 50 MiB answer briefly held three times over).
    const std::string result = "\"0x" + std::string(1 << 20, 'a') + "\"";
    for (std::string_view id : {"7", "", R"("a-long-string-id")"}) {
      const auto text = make_result(id, result);
      CHECK(text.size() == kResultHead.size() + (id.empty() ? 4 : id.size()) +
                               kResultMiddle.size() + result.size() + 1);
      CHECK(text.capacity() == text.size());
      CHECK(text.back() == '}');
    }
  }
  SECTION("make_error with and without data") {
    auto text =
        make_error(R"("abc")", kNoProvider, "no provider: \"all\" failed\n", R"({"attempts":[]})");
    auto r = parse_response(text);
    REQUIRE(r.has_value());
    const auto& rep = r->replies[0];
    CHECK(rep.id == R"("abc")");
    REQUIRE(rep.error.has_value());
    CHECK(rep.error->code == kNoProvider);
    CHECK(rep.error->message == "no provider: \"all\" failed\n");
    CHECK(rep.error->data == R"({"attempts":[]})");

    auto plain = parse_response(make_error("1", kInvalidParams, "bad"));
    REQUIRE(plain.has_value());
    REQUIRE(plain->replies[0].error.has_value());
    CHECK(plain->replies[0].error->code == kInvalidParams);
    CHECK(plain->replies[0].error->data.empty());
    CHECK(error_object(-32000, "x") == R"({"code":-32000,"message":"x"})");
  }
}

TEST_CASE("parse_quantity and to_quantity", "[jsonrpc]") {
  CHECK(parse_quantity(R"("0x1a")") == std::optional<std::uint64_t>(26));
  CHECK(parse_quantity(R"("0x0")") == std::optional<std::uint64_t>(0));
  CHECK(parse_quantity(R"("0X1A")") == std::optional<std::uint64_t>(26));
  CHECK(parse_quantity(R"( "0x10" )") == std::optional<std::uint64_t>(16));
  CHECK(parse_quantity(R"("0xffffffffffffffff")") ==
        std::optional<std::uint64_t>(std::numeric_limits<std::uint64_t>::max()));
  CHECK_FALSE(parse_quantity(R"("0x10000000000000000")").has_value());  // does not fit
  CHECK_FALSE(parse_quantity(R"("0x")").has_value());
  CHECK_FALSE(parse_quantity(R"("1a")").has_value());
  CHECK_FALSE(parse_quantity("0x1a").has_value());  // not a JSON string
  CHECK_FALSE(parse_quantity("26").has_value());
  CHECK_FALSE(parse_quantity(R"("0xg1")").has_value());
  CHECK_FALSE(parse_quantity(R"("0x1g")").has_value());
  CHECK_FALSE(parse_quantity(R"("0x-1")").has_value());
  CHECK_FALSE(parse_quantity(R"("0x 1")").has_value());
  CHECK_FALSE(parse_quantity("null").has_value());
  CHECK_FALSE(parse_quantity("").has_value());

  CHECK(to_quantity(26) == R"("0x1a")");
  CHECK(to_quantity(0) == R"("0x0")");
  for (std::uint64_t v : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{255},
                          std::uint64_t{19'000'000}, std::numeric_limits<std::uint64_t>::max()}) {
    CHECK(parse_quantity(to_quantity(v)) == std::optional<std::uint64_t>(v));
  }
}

TEST_CASE("same_id compares raw id tokens by value", "[jsonrpc]") {
  CHECK(same_id("1", "1"));
  CHECK(same_id("1", "1.0"));
  CHECK(same_id("1", "1e0"));
  CHECK(same_id(" 1", "1 "));
  CHECK(same_id(R"("abc")", R"("abc")"));
  CHECK(same_id("null", "null"));
  CHECK_FALSE(same_id(R"("1")", "1"));
  CHECK_FALSE(same_id("1", R"("1")"));
  CHECK_FALSE(same_id("1", "2"));
  CHECK_FALSE(same_id(R"("a")", R"("b")"));
  CHECK_FALSE(same_id(R"("1")", R"("1.0")"));
  CHECK_FALSE(same_id("null", "0"));
  CHECK_FALSE(same_id("1", ""));
}

TEST_CASE("same_id keeps large integer ids apart", "[jsonrpc]") {
  // Both tokens are converted to double, so integers above 2^53 that differ compare equal
  // (jsonrpc.cpp same_id). Harmless for the router's own small ids, wrong for the public contract.
  CHECK_FALSE(same_id("9007199254740993", "9007199254740992"));
  CHECK_FALSE(same_id("12345678901234567891", "12345678901234567890"));
}

}  // namespace unit_jsonrpc_test

// The plain path of parse_body/parse_response against the full path: whatever the plain path
// accepts, the full path must read the same way; everything else is declined, never judged.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "rpcroute/jsonrpc.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_plain_test {

using namespace rpcroute::jsonrpc;

namespace {

/// The text followed by 64 bytes of hostile padding ('"', '\\', controls): what a scan past the
/// end may load but must never count.
std::string padded(std::string_view text) {
  std::string buf(text);
  for (int i = 0; i < 64; ++i) buf.push_back("\"\\\x01}]"[i % 5]);
  return buf;
}

std::string body_difference(std::string_view text) {
  auto plain = detail::parse_plain_body(text);
  const std::string buf = padded(text);
  auto plain_padded = detail::parse_plain_body(std::string_view(buf.data(), text.size()), buf.size());
  if (plain.has_value() != plain_padded.has_value()) return "the padded scan decides otherwise";
  if (plain && plain->calls[0].params != plain_padded->calls[0].params) return "the padded scan reads otherwise";
  if (!plain) return {};
  auto full = detail::parse_full_body(text);
  if (!full) return "the full path rejects it: " + full.error().message;
  if (plain->batch != full->batch || plain->calls.size() != full->calls.size()) return "shape";
  for (std::size_t i = 0; i < plain->calls.size(); ++i) {
    const auto& a = plain->calls[i];
    const auto& b = full->calls[i];
    if (a.id != b.id) return "id " + a.id + " vs " + b.id;
    if (a.method != b.method) return "method";
    if (a.params != b.params) return "params " + a.params + " vs " + b.params;
    if (a.invalid_reason != b.invalid_reason) return "invalid_reason " + b.invalid_reason;
  }
  return {};
}

std::string response_difference(std::string_view text) {
  auto plain = detail::parse_plain_response(text);
  const std::string buf = padded(text);
  auto plain_padded = detail::parse_plain_response(std::string_view(buf.data(), text.size()), buf.size());
  if (plain.has_value() != plain_padded.has_value()) return "the padded scan decides otherwise";
  if (plain && *plain->replies[0].result != *plain_padded->replies[0].result) return "the padded scan reads otherwise";
  if (!plain) return {};
  auto full = detail::parse_full_response(text);
  if (!full) return "the full path rejects it: " + full.error();
  if (plain->batch != full->batch || plain->replies.size() != full->replies.size()) return "shape";
  for (std::size_t i = 0; i < plain->replies.size(); ++i) {
    const auto& a = plain->replies[i];
    const auto& b = full->replies[i];
    if (a.id != b.id) return "id";
    if (a.result.has_value() != b.result.has_value() || (a.result && *a.result != *b.result)) return "result";
    if (a.result && a.result->data() != b.result->data()) return "result is not a view into the text";
    if (a.error.has_value() != b.error.has_value()) return "error";
  }
  return {};
}

const std::vector<std::string> kBodies = {
    R"({"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]})",
    R"( { "jsonrpc" : "2.0" , "id" : "abc" , "method" : "eth_getBalance" , "params" : ["0xabc", "latest"] } )",
    R"({"method":"eth_call","params":[{"to":"0x00","data":"0x"},{"blockHash":"0x1"}],"id":-0.5})",
    R"({"jsonrpc":"2.0","method":"eth_subscribe","params":{"a":[1,2,{"b":null}],"c":true,"d":false}})",
    R"({"jsonrpc":"2.0","id":null,"method":"net_version","x":{"y":[[],{}]}})",
    "{\"id\":7,\n\t\"method\":\"m\"\r\n}",
};
const std::vector<std::string> kAnswers = {
    R"({"jsonrpc":"2.0","id":0,"result":"0x1"})",
    R"({"jsonrpc":"2.0","id":"a","result":{"number":"0x10","transactions":[],"uncles":[],"x":null}})",
    R"( {"id":1,"error":null,"result":[1,2.5,-3,true,false,null]} )",
    R"({"result":null,"id":{"odd":"but kept raw"},"jsonrpc":"2.0"})",
};

}  // namespace

TEST_CASE("plain path: the common request and answer shapes are read in one pass", "[jsonrpc]") {
  for (const auto& text : kBodies) {
    INFO(text);
    REQUIRE(detail::parse_plain_body(text).has_value());
    CHECK(body_difference(text).empty());
  }
  for (const auto& text : kAnswers) {
    INFO(text);
    REQUIRE(detail::parse_plain_response(text).has_value());
    CHECK(response_difference(text).empty());
  }
  auto body = detail::parse_plain_body(kBodies[1]);
  CHECK(body->calls[0].id == R"("abc")");
  CHECK(body->calls[0].params == R"(["0xabc", "latest"])");
  CHECK(detail::parse_plain_body(kBodies[4])->calls[0].params == "[]");
  auto answer = detail::parse_plain_response(kAnswers[1]);
  CHECK(*answer->replies[0].result == R"({"number":"0x10","transactions":[],"uncles":[],"x":null})");
}

TEST_CASE("plain path: anything unusual or wrong is declined, for the full path to judge", "[jsonrpc]") {
  const std::vector<std::string> bodies = {
      "",
      "   ",
      R"([{"jsonrpc":"2.0","id":1,"method":"m"}])",                 // batch
      R"({"jsonrpc":"2.0","id":1,"method":"eth_\u0062lockNumber"})", // escape
      R"({"jsonrpc":"2.0","id":1,"method":"m","params":["é"]})",     // non-ASCII
      R"({"jsonrpc":"2.0","id":1e3,"method":"m"})",                  // exponent
      R"({"jsonrpc":"2.0","id":12345678901234567890123456789012345678901,"method":"m"})",
      R"({"jsonrpc":"2.0","id":1,"id":2,"method":"m"})",             // duplicate member
      R"({"jsonrpc":"2.0","id":1,"method":"m","method":"n"})",
      R"({"jsonrpc":"1.0","id":1,"method":"m"})",
      R"({"jsonrpc":2,"id":1,"method":"m"})",
      R"({"jsonrpc":"2.0","id":[1],"method":"m"})",
      R"({"jsonrpc":"2.0","id":true,"method":"m"})",
      R"({"jsonrpc":"2.0","id":1,"method":""})",
      R"({"jsonrpc":"2.0","id":1,"method":7})",
      R"({"jsonrpc":"2.0","id":1})",                                 // no method
      R"({"jsonrpc":"2.0","id":1,"method":"m","params":"x"})",
      R"({"jsonrpc":"2.0","id":1,"method":"m"} x)",                  // trailing content
      R"({"jsonrpc":"2.0","id":1,"method":"m",})",
      R"({"jsonrpc":"2.0","id":01,"method":"m"})",
      R"({"jsonrpc":"2.0","id":1.,"method":"m"})",
      R"({"jsonrpc":"2.0","id":-,"method":"m"})",
      R"({"jsonrpc":"2.0","id":nul,"method":"m"})",
      R"({"jsonrpc":"2.0","id":nullx,"method":"m"})",
      R"({"jsonrpc":"2.0","id":1,"method":"m","params":[1,]})",
      R"({"jsonrpc":"2.0","id":1,"method":"m","params":[1 2]})",
      R"({"jsonrpc":"2.0","id":1,"method":"m","params":{"a" 1}})",
      R"({"jsonrpc":"2.0","id":1,"method":"m","params":[1}})",
      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\x01\"}",
      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\"",
      "42",
      "\"x\"",
  };
  for (const auto& text : bodies) {
    INFO(text);
    CHECK_FALSE(detail::parse_plain_body(text).has_value());
    const std::string buf = padded(text);  // quotes past the end must not close a string
    CHECK_FALSE(detail::parse_plain_body(std::string_view(buf.data(), text.size()), buf.size()).has_value());
  }
  const std::string cut = R"({"jsonrpc":"2.0","id":0,"result":"0x1)";
  const std::string cut_buf = padded(cut);
  CHECK_FALSE(detail::parse_plain_response(std::string_view(cut_buf.data(), cut.size()), cut_buf.size()).has_value());
  std::string deep = R"({"method":"m","params":)" + std::string(64, '[') + std::string(64, ']') + "}";
  CHECK_FALSE(detail::parse_plain_body(deep).has_value());
  std::string shallow = R"({"method":"m","params":)" + std::string(63, '[') + std::string(63, ']') + "}";
  CHECK(detail::parse_plain_body(shallow).has_value());

  const std::vector<std::string> answers = {
      R"([{"jsonrpc":"2.0","id":0,"result":"0x1"}])",
      R"({"jsonrpc":"2.0","id":0,"error":{"code":-32000,"message":"x"}})",
      R"({"jsonrpc":"2.0","id":0,"result":"0x1","error":{"code":1}})",
      R"({"jsonrpc":"2.0","id":0})",
      R"({"jsonrpc":"2.0","id":0,"result":"0x1","result":"0x2"})",
      R"({"jsonrpc":"2.0","id":0,"result":"0x1"}})",
      R"({"jsonrpc":"2.0","id":0,"result":"\u0030x1"})",
      R"(<html>502 Bad Gateway</html>)",
  };
  for (const auto& text : answers) {
    INFO(text);
    CHECK_FALSE(detail::parse_plain_response(text).has_value());
  }
}

TEST_CASE("plain path: parse_body and parse_response give what the full path gives", "[jsonrpc]") {
  // Through the public entry points: the plain path is taken, and the answer is the full path's.
  for (const auto& text : kBodies) {
    auto a = parse_body(text);
    auto b = detail::parse_full_body(text);
    REQUIRE(a.has_value());
    REQUIRE(b.has_value());
    CHECK(a->calls[0].params == b->calls[0].params);
  }
  // Declined documents still get the full path's errors.
  auto bad = parse_body(R"({"jsonrpc":"2.0","id":1,"method":"m","params":[1,]})");
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().code == kParseError);
  auto err = parse_response(R"({"jsonrpc":"2.0","id":0,"error":{"code":-32000,"message":"x"}})");
  REQUIRE(err.has_value());
  CHECK(err->replies[0].error->code == -32000);
}

TEST_CASE("plain path: differential against the full path on mutated documents", "[jsonrpc]") {
  std::mt19937 rng(1130);
  const std::string alphabet = "{}[],:\" \n0123456789.-eEtrufalsn\\x\x01\xc3";
  auto mutate = [&](std::string s) {
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      const auto at = rng() % s.size();
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0: s[at] = c; break;
        case 1: s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), c); break;
        default: s.erase(at, 1); break;
      }
    }
    return s;
  };
  std::size_t accepted = 0;
  for (int i = 0; i < 30000; ++i) {
    const auto text = mutate(kBodies[static_cast<std::size_t>(i) % kBodies.size()]);
    if (detail::parse_plain_body(text)) ++accepted;
    INFO(text);
    REQUIRE(body_difference(text).empty());
  }
  for (int i = 0; i < 30000; ++i) {
    const auto text = mutate(kAnswers[static_cast<std::size_t>(i) % kAnswers.size()]);
    if (detail::parse_plain_response(text)) ++accepted;
    INFO(text);
    REQUIRE(response_difference(text).empty());
  }
  CHECK(accepted > 5000);
}

}  // namespace unit_plain_test

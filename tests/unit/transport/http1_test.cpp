#include "rpcroute/http1.hpp"

#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "../support/http1_oracle.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_http1_test {

using namespace rpcroute;

namespace {

constexpr std::size_t kHead = 32 * 1024;
constexpr std::uint64_t kBody = 8 << 20;

const std::string kPost =
    "POST /rpc/local HTTP/1.1\r\nHost: 127.0.0.1:8545\r\nContent-Type: application/json\r\n"
    "Content-Length: 63\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"eth_blockNumber\",\"params\":[]}";
const std::string kAnswer =
    "HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Mon, 30 Nov 2026 14:00:00 GMT\r\nContent-Type: application/json\r\n"
    "Content-Length: 39\r\nConnection: keep-alive\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":\"0x1\"}";

// nginx's echo module (the perf harness's upstream) and most dynamic servers frame an answer so.
const std::string kChunkedAnswer =
    "HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
    "Connection: keep-alive\r\n\r\n1b\r\n{\"jsonrpc\":\"2.0\",\"id\":7,\"re\r\nc\r\nsult\":\"0x1\"}\r\n0\r\n\r\n";

std::vector<std::string> request_seeds() {
  return {
      kPost,
      "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n",
      "GET /status HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
      "HEAD /metrics HTTP/1.1\r\nhOsT: a\r\nHost: b\r\nConnection: close\r\n\r\n",
      "OPTIONS /rpc/x HTTP/1.1\r\nOrigin: http://localhost:3000\r\nAccess-Control-Request-Method: POST\r\n\r\n",
      "POST /rpc/x HTTP/1.1\r\nAuthorization:   Bearer abc  \r\ncontent-length: 2\r\n\r\n[]",
      "POST / HTTP/1.0\r\nContent-Length: 0\r\nConnection: Keep-Alive, close\r\n\r\n",
      "PUT /a?b=c&d=%20 HTTP/1.1\r\nX-Empty:\r\nX-Tab:\tv\t\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\n\r\n",
  };
}

std::vector<std::string> response_seeds() {
  return {
      kAnswer,
      "HTTP/1.1 429 Too Many Requests\r\nRetry-After:  7 \r\nRetry-After: 9\r\nContent-Length: 2\r\n\r\n{}",
      "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n1",
      "HTTP/1.0 503 Service Unavailable\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 500 \r\nContent-Length: 5\r\nConnection: close\r\n\r\nerrorHTTP/1.1",
      kChunkedAnswer,
      "HTTP/1.1 200 OK\r\ntransfer-encoding:  Chunked \r\n\r\n2\r\n{}\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
      "HTTP/1.1 503 x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n00a\r\n0123456789\r\n"
      "A\r\nabcdefghij\r\n000\r\n\r\nHTTP/1.1",
  };
}

}  // namespace

TEST_CASE("http1: a plain request is read whole, field by field") {
  http1::Message m;
  REQUIRE(http1::parse_request(kPost, kHead, kBody, m));
  CHECK(m.method == "POST");
  CHECK(m.target == "/rpc/local");
  CHECK(m.version == 11);
  CHECK(m.keep_alive);
  CHECK(m.host == "127.0.0.1:8545");
  CHECK(m.origin.empty());
  CHECK(m.size() == kPost.size());
  CHECK(m.body(kPost) == R"({"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]})");

  const std::string two = "HEAD /metrics HTTP/1.1\r\nhOsT: a\r\nHost: b\r\nConnection: close\r\n\r\n";
  const std::string pipelined = two + "GET /";  // a pipelined request follows (m views into it)
  REQUIRE(http1::parse_request(pipelined, kHead, kBody, m));
  CHECK(m.size() == two.size());
  CHECK(m.host == "a");
  CHECK_FALSE(m.keep_alive);

  REQUIRE(http1::parse_request("POST /x HTTP/1.1\r\nAuthorization:   Bearer abc  \r\nContent-Length: 0\r\n\r\n", kHead,
                               kBody, m));
  CHECK(m.authorization == "Bearer abc");
  REQUIRE(http1::parse_request("GET / HTTP/1.0\r\n\r\n", kHead, kBody, m));
  CHECK_FALSE(m.keep_alive);  // HTTP/1.0 without keep-alive
  REQUIRE(http1::parse_request("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", kHead, kBody, m));
  CHECK(m.keep_alive);
}

TEST_CASE("http1: anything not whole or not plain is left to Beast") {
  http1::Message m;
  const std::vector<std::string> declined = {
      "",
      "POST /rpc HTTP/1.1\r\nContent-Length: 10\r\n\r\n{}",               // body not all here
      "POST /rpc HTTP/1.1\r\nHost: a\r\n",                                  // head not all here
      "POST /rpc HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
      "POST /rpc HTTP/1.1\r\nTransfer-Encoding: chunked, identity\r\n\r\nGET / HTTP/1.1\r\n\r\n",
      "POST /rpc HTTP/1.1\r\nTransfer-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}",
      "POST /rpc HTTP/1.1\r\ntransfer-encoding: identity\r\n\r\n",
      "POST /rpc HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
      "POST /rpc HTTP/1.1\r\nContent-Length: +2\r\n\r\n{}",
      "POST /rpc HTTP/1.1\r\nContent-Length: 2, 2\r\n\r\n{}",
      "POST /rpc HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
      "POST /rpc HTTP/1.1\r\nX-A: b\r\n c\r\n\r\n",                           // obs-fold
      "POST /rpc HTTP/1.1\nHost: a\n\n",                                     // bare LF
      "POST /rpc HTTP/1.1\r\nHost : a\r\n\r\n",                              // space before colon
      "POST /rpc HTTP/1.1\r\n: a\r\n\r\n",                                   // empty name
      "POST /rpc HTTP/1.1\r\nX-A: b\x01\r\n\r\n",                             // control in value
      "POST /rpc HTTP/1.1\r\nX-A: b\x7f\r\n\r\n",
      "post /rpc HTTP/1.1\r\n\r\n",
      "BREW /pot HTTP/1.1\r\n\r\n",
      "GET /a b HTTP/1.1\r\n\r\n",
      "GET /\xc3\xa9 HTTP/1.1\r\n\r\n",
      "GET / HTTP/2.0\r\n\r\n",
      "GET / HTTP/1.1\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
      "GET / HTTP/1.1\r\nConnection: close\r\nConnection: close\r\n\r\n",
      "GET / HTTP/1.1\r\nConnection: close,,\r\n\r\n",
      "GET / HTTP/1.1\r\nProxy-Connection: close\r\n\r\n",
      "POST /rpc HTTP/1.1\r\nContent-Length: 9000000\r\n\r\n",              // over the body limit
  };
  for (const auto& in : declined) {
    INFO(in);
    CHECK_FALSE(http1::parse_request(in, kHead, kBody, m));
  }
  // The head limit: a head longer than it is declined, as Beast reports header_limit for it.
  const std::string big = "GET / HTTP/1.1\r\nX-Big: " + std::string(100, 'a') + "\r\n\r\n";
  CHECK(http1::parse_request(big, big.size(), kBody, m));
  CHECK_FALSE(http1::parse_request(big, big.size() - 1, kBody, m));

  const std::vector<std::string> declined_answers = {
      "HTTP/1.1 200 OK\r\n\r\n{}",                                            // read to close
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n",            // no last chunk yet
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n",       // nor its empty line
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{}",                  // a chunk cut short
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;x=y\r\n{}\r\n0\r\n\r\n",  // extension
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2 \r\n{}\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}x\r\n0\r\n\r\n",   // data overruns
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: 1\r\n\r\n",     // a trailer
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-2\r\n{}\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0000000000000001\r\nx\r\n0\r\n\r\n",  // 16 digits
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 100 Continue\r\n\r\n",
      "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 304 Not Modified\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",
      "HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200OK\r\nContent-Length: 0\r\n\r\n",
      "ICY 200 OK\r\nContent-Length: 0\r\n\r\n",
  };
  for (const auto& in : declined_answers) {
    INFO(in);
    CHECK_FALSE(http1::parse_response(in, kHead, m));
  }
}

TEST_CASE("http1: only a lone chunked coding frames a request body; any other list is refused") {
  for (std::string_view ok : {"chunked", "Chunked", "CHUNKED", " chunked\t", "\tchunked  "}) {
    INFO(ok);
    CHECK(http1::chunked_only(ok));
  }
  // RFC 9112 section 6.3: chunked not last, or a coding we do not know, cannot be framed (Beast
  // would read these as bodiless); chunked twice is a coding applied twice.
  for (std::string_view bad : {"", " ", "identity", "gzip", "chunked, identity", "chunked,identity", "gzip, chunked",
                               "chunked, chunked", "chunked;q=1", "chunkedx", "xchunked", "chunk", "chunked,",
                               ",chunked", "\"chunked\"", "chunked\x01"}) {
    INFO(bad);
    CHECK_FALSE(http1::chunked_only(bad));
  }
}

TEST_CASE("http1: a plain answer is read whole, Retry-After trimmed") {
  http1::Message m;
  REQUIRE(http1::parse_response(kAnswer, kHead, m));
  CHECK(m.status == 200);
  CHECK(m.keep_alive);
  CHECK(m.body(kAnswer) == R"({"jsonrpc":"2.0","id":0,"result":"0x1"})");
  const std::string limited = "HTTP/1.1 429 Too Many Requests\r\nRetry-After:  7 \r\nRetry-After: 9\r\nContent-Length: 2\r\n\r\n{}";
  REQUIRE(http1::parse_response(limited, kHead, m));
  CHECK(m.status == 429);
  CHECK(m.retry_after == "7");
  REQUIRE(http1::parse_response("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n1", kHead, m));
  CHECK_FALSE(m.keep_alive);
}

TEST_CASE("http1: an HTTP/1.0 answer with Transfer-Encoding is read, and its connection not kept") {
  // RFC 9112 6.1: its framing is faulty; the connection closes after it, keep-alive or not (Beast
  // would keep it).
  http1::Message m;
  const std::string in =
      "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
  REQUIRE(http1::parse_response(in, kHead, m));
  CHECK(m.chunked);
  CHECK_FALSE(m.keep_alive);
  std::string body;
  m.assign_body(in, body);
  CHECK(body == "hello");
  CHECK(testing::response_disagreement(in, kHead).empty());
  // The same with a Content-Length instead is kept.
  REQUIRE(http1::parse_response("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\n1", kHead, m));
  CHECK(m.keep_alive);
}

TEST_CASE("http1: a chunked answer is read whole and its chunks joined") {
  http1::Message m;
  const std::string next = "HTTP/1.1 200 OK\r\n";  // a pipelined answer's first bytes, left alone
  const std::string in = kChunkedAnswer + next;
  REQUIRE(http1::parse_response(in, kHead, m));
  CHECK(m.chunked);
  CHECK(m.status == 200);
  CHECK(m.keep_alive);
  CHECK(m.body_size == 39);
  CHECK(m.size() == kChunkedAnswer.size());
  std::string body = "left over";
  m.assign_body(in, body);
  CHECK(body == R"({"jsonrpc":"2.0","id":7,"result":"0x1"})");
  // A Content-Length answer through the same call: the body replaces what the string held.
  REQUIRE(http1::parse_response(kAnswer, kHead, m));
  CHECK_FALSE(m.chunked);
  m.assign_body(kAnswer, body);
  CHECK(body == R"({"jsonrpc":"2.0","id":0,"result":"0x1"})");
  // Upper-case hex and leading zeros; an empty chunked body.
  const std::string hex = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0B\r\nhello world\r\n00\r\n\r\n";
  REQUIRE(http1::parse_response(hex, kHead, m));
  m.assign_body(hex, body);
  CHECK(body == "hello world");
  REQUIRE(http1::parse_response("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", kHead, m));
  CHECK(m.body_size == 0);
  // A size line of 15 digits is the longest taken (16 are Beast's: the size could pass 2^60).
  const std::string fifteen = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n000000000000001\r\nx\r\n0\r\n\r\n";
  REQUIRE(http1::parse_response(fifteen, kHead, m));
  CHECK(m.body_size == 1);
  CHECK(testing::response_disagreement(fifteen, kHead).empty());
  // The head limit is the head's: a chunked body longer than it is still taken.
  const std::string long_body = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n100\r\n" + std::string(256, 'x') + "\r\n0\r\n\r\n";
  CHECK(http1::parse_response(long_body, 64, m));
  CHECK(testing::response_disagreement(long_body, 64).empty());
  // A chunked request stays Beast's (the sidecar refuses or reads it there).
  CHECK_FALSE(http1::parse_request("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", kHead, kBody, m));
}

TEST_CASE("http1: Beast agrees with every message the fast path accepts") {
  for (const auto& in : request_seeds()) {
    INFO(in);
    http1::Message m;
    CHECK(http1::parse_request(in, kHead, kBody, m));
    CHECK(testing::request_disagreement(in, kHead, kBody).empty());
  }
  for (const auto& in : response_seeds()) {
    INFO(in);
    http1::Message m;
    CHECK(http1::parse_response(in, kHead, m));
    CHECK(testing::response_disagreement(in, kHead).empty());
  }
}

TEST_CASE("http1: differential against Beast on mutated messages") {
  // Byte mutations biased toward what matters to an HTTP parser; every mutant the fast path still
  // accepts must mean the same to Beast.
  std::mt19937 rng(20261130);
  const std::string alphabet = "\r\n :,\t-0123456789aAcCkKlLeEhHoOsStT/\x01\x7f\x80\xff";
  auto mutate = [&](std::string s) {
    const int edits = 1 + static_cast<int>(rng() % 4);
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
  const auto requests = request_seeds();
  const auto answers = response_seeds();
  std::size_t accepted = 0;
  for (int i = 0; i < 40000; ++i) {
    const auto in = mutate(requests[static_cast<std::size_t>(i) % requests.size()]);
    http1::Message m;
    if (http1::parse_request(in, kHead, 64, m)) ++accepted;
    const auto why = testing::request_disagreement(in, kHead, 64);
    INFO(in);
    REQUIRE(why.empty());
  }
  for (int i = 0; i < 40000; ++i) {
    const auto in = mutate(answers[static_cast<std::size_t>(i) % answers.size()]);
    http1::Message m;
    if (http1::parse_response(in, kHead, m)) ++accepted;
    const auto why = testing::response_disagreement(in, kHead);
    INFO(in);
    REQUIRE(why.empty());
  }
  CHECK(accepted > 10000);  // the mutants exercise the accepting path, not only refusals
}

}  // namespace unit_http1_test

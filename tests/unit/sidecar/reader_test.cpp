#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <string_view>

#include "reader.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_reader_test {

using namespace rpcroute::sidecar;
namespace http = boost::beast::http;

namespace {

void fill(boost::beast::flat_buffer& buffer, std::string_view bytes) {
  auto out = buffer.prepare(bytes.size());
  std::memcpy(out.data(), bytes.data(), bytes.size());
  buffer.commit(bytes.size());
}

/// Reads one request from `bytes` the way a connection does: the fast path first, then Beast's.
struct Read {
  bool fast = false;
  bool complete = false;
  boost::beast::error_code ec;
};

Read read(std::string_view bytes, Request& req, BodyBudget& budget, std::size_t& held) {
  boost::beast::flat_buffer buffer;
  fill(buffer, bytes);
  Read r;
  r.fast = take_plain_request(buffer, 1 << 20, req);
  if (r.fast) {
    r.complete = true;
    return r;
  }
  RequestReader parser(req, budget, held);
  parser.eager(true);
  parser.header_limit(kHeaderLimit);
  parser.body_limit(1 << 20);
  r.complete = feed(parser, buffer, r.ec);
  return r;
}

}  // namespace

TEST_CASE("reader: a plain request takes the fast path and keeps only the fields answers need",
          "[sidecar][reader]") {
  Request req;
  BodyBudget budget;
  std::size_t held = 0;
  const auto r = read(
      "POST /rpc/local HTTP/1.1\r\nHost: localhost:8545\r\nUser-Agent: t\r\nContent-Type: application/json\r\n"
      "Content-Length: 2\r\n\r\n[]",
      req, budget, held);
  CHECK(r.fast);
  CHECK(req.method == http::verb::post);
  CHECK(req.target == "/rpc/local");
  CHECK(req.host == "localhost:8545");
  CHECK(req.body == "[]");
  CHECK_FALSE(req.upgrade);
  CHECK(req.fields().empty());
}

TEST_CASE("reader: a request with an Upgrade field goes to Beast's reader and keeps every field, in order",
          "[sidecar][reader]") {
  Request req;
  BodyBudget budget;
  std::size_t held = 0;
  const auto r = read(
      "GET /rpc/local HTTP/1.1\r\nHost: localhost:8545\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
      "Origin: http://localhost:3000\r\nX-Custom: a b\r\n\r\n",
      req, budget, held);
  CHECK_FALSE(r.fast);
  REQUIRE(r.complete);
  REQUIRE_FALSE(r.ec);
  CHECK(req.upgrade);
  CHECK(req.method == http::verb::get);
  CHECK(req.host == "localhost:8545");
  CHECK(req.origin == "http://localhost:3000");
  const auto fields = req.fields();
  REQUIRE(fields.size() == 7);
  CHECK(fields[0] == Request::Field{"Host", "localhost:8545"});
  CHECK(fields[1] == Request::Field{"Upgrade", "websocket"});
  CHECK(fields[2] == Request::Field{"Connection", "Upgrade"});
  CHECK(fields[3] == Request::Field{"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="});
  CHECK(fields[4] == Request::Field{"Sec-WebSocket-Version", "13"});
  CHECK(fields[5] == Request::Field{"Origin", "http://localhost:3000"});
  CHECK(fields[6] == Request::Field{"X-Custom", "a b"});

  // The next request on the connection starts empty again.
  const auto next = read("GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: keep-alive\r\n\r\n", req, budget, held);
  CHECK(next.complete);
  CHECK_FALSE(req.upgrade);
  CHECK(req.fields().empty());
}

TEST_CASE("reader: without an Upgrade field, Beast's reader keeps no field list", "[sidecar][reader]") {
  Request req;
  BodyBudget budget;
  std::size_t held = 0;
  // Chunked: the fast path declines it.
  const auto r = read(
      "POST /rpc/local HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n[]\r\n0\r\n\r\n", req,
      budget, held);
  CHECK_FALSE(r.fast);
  REQUIRE(r.complete);
  REQUIRE_FALSE(r.ec);
  CHECK(req.body == "[]");
  CHECK_FALSE(req.upgrade);
  CHECK(req.fields().empty());
  budget.give_back(held);
  CHECK(budget.used == 0);
}

TEST_CASE("reader: an HTTP/1.0 request with Transfer-Encoding is read and its connection not kept",
          "[sidecar][reader]") {
  // RFC 9112 6.1: its framing is faulty; the connection closes after the answer even with
  // keep-alive (Beast would keep it: a smuggling risk behind a proxy that frames it otherwise).
  Request req;
  BodyBudget budget;
  std::size_t held = 0;
  const auto r = read(
      "POST /rpc/local HTTP/1.0\r\nHost: localhost\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n"
      "2\r\n[]\r\n0\r\n\r\n",
      req, budget, held);
  CHECK_FALSE(r.fast);
  REQUIRE(r.complete);
  REQUIRE_FALSE(r.ec);
  CHECK(req.body == "[]");
  CHECK_FALSE(req.keep_alive);
  budget.give_back(held);
  // HTTP/1.0 with keep-alive and a Content-Length is kept.
  const auto kept =
      read("POST /rpc/local HTTP/1.0\r\nHost: localhost\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n[]", req,
           budget, held);
  REQUIRE(kept.complete);
  CHECK(req.keep_alive);
}

}  // namespace unit_reader_test

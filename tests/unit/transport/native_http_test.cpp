// The engine's own HTTP/1.1 client (plain http:// to an address): keep-alive reuse, chunked
// answers, a stale pooled connection retried once, refused connections and timeouts.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "rpcroute/jsonrpc.hpp"
#include "rpcroute/transport.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_native_http_test {

using namespace rpcroute;
using tcp = asio::ip::tcp;

namespace {

enum class Mode { plain, chunked, close_after, hang, http10_kept, http10_chunked, http10_chunked_ext };

struct FakeServer {
  explicit FakeServer(asio::io_context& io) : acceptor(io, {asio::ip::make_address("127.0.0.1"), 0}) {}
  tcp::acceptor acceptor;
  Mode mode = Mode::plain;
  int connections = 0;
  std::vector<std::string> heads;

  asio::awaitable<void> serve(tcp::socket socket) {
    std::string in;
    for (;;) {
      boost::system::error_code ec;
      auto n = co_await asio::async_read_until(socket, asio::dynamic_buffer(in), "\r\n\r\n",
                                               asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      std::string head = in.substr(0, n);
      heads.push_back(head);
      std::size_t length = 0;
      if (auto p = head.find("Content-Length: "); p != std::string::npos) length = std::stoul(head.substr(p + 16));
      if (in.size() < n + length) {
        co_await asio::async_read(socket, asio::dynamic_buffer(in), asio::transfer_exactly(n + length - in.size()),
                                  asio::redirect_error(asio::use_awaitable, ec));
        if (ec) co_return;
      }
      in.erase(0, n + length);
      std::string out;
      const std::string body = R"({"jsonrpc":"2.0","id":0,"result":"0x1"})";
      switch (mode) {
        case Mode::hang: {
          asio::steady_timer t(socket.get_executor());
          t.expires_after(std::chrono::seconds(2));
          co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
          co_return;
        }
        case Mode::chunked:
          out = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nRetry-After:  7 \r\n\r\n5\r\nhello\r\n0\r\n\r\n";
          break;
        case Mode::http10_kept:
          out = "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 5\r\n\r\nhello";
          break;
        case Mode::http10_chunked:  // the client's fast path reads it
          out = "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
          break;
        case Mode::http10_chunked_ext:  // a chunk extension: Beast's reader reads it
          out = "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n0\r\n\r\n";
          break;
        default:
          out = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                "\r\n\r\n" + body;
      }
      co_await asio::async_write(socket, asio::buffer(out), asio::redirect_error(asio::use_awaitable, ec));
      if (ec || mode == Mode::close_after) co_return;  // closes without saying so: a stale pooled socket
    }
  }

  asio::awaitable<void> run() {
    for (;;) {
      boost::system::error_code ec;
      auto socket = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      ++connections;
      asio::co_spawn(acceptor.get_executor(), serve(std::move(socket)), asio::detached);
    }
  }
};

}  // namespace

TEST_CASE("native http client: reuse, chunked, stale retry, refused, timeout", "[transport]") {
  asio::io_context io;
  FakeServer server(io);
  const auto port = server.acceptor.local_endpoint().port();
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/rpc?key=1";
  std::uint16_t dead_port = 0;
  {
    tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
    dead_port = a.local_endpoint().port();
  }
  std::vector<HttpResponse> got;
  std::vector<int> connections;
  std::vector<Header> extra{{"X-Api-Key", "secret"}};
  Engine engine(io);
  asio::co_spawn(io, server.run(), asio::detached);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        const std::string body = R"({"jsonrpc":"2.0","id":0,"method":"eth_blockNumber","params":[]})";
        HttpRequest a{url, body, &extra, 2000};
        got.push_back(co_await engine.perform(a));
        connections.push_back(server.connections);
        HttpRequest b{url, body, nullptr, 2000};
        got.push_back(co_await engine.perform(b));
        connections.push_back(server.connections);
        server.mode = Mode::chunked;
        HttpRequest c{url, body, nullptr, 2000};
        got.push_back(co_await engine.perform(c));
        connections.push_back(server.connections);
        server.mode = Mode::close_after;
        HttpRequest d{url, body, nullptr, 2000};
        got.push_back(co_await engine.perform(d));  // answered, then the server closes
        HttpRequest e{url, body, nullptr, 2000};
        got.push_back(co_await engine.perform(e));  // the pooled socket is dead: retried on a new one
        connections.push_back(server.connections);
        HttpRequest f{"http://127.0.0.1:" + std::to_string(dead_port) + "/", body, nullptr, 2000};
        got.push_back(co_await engine.perform(f));
        server.mode = Mode::hang;
        HttpRequest g{url, body, nullptr, 200};
        got.push_back(co_await engine.perform(g));
        server.acceptor.close();
      },
      asio::detached);
  io.run_for(std::chrono::seconds(20));

  REQUIRE(got.size() == 7);
  for (int i = 0; i < 5; ++i) {
    INFO(i << " " << got[i].error_message);
    CHECK(got[i].error == TransportError::none);
    CHECK(got[i].status == 200);
  }
  CHECK(got[0].body == R"({"jsonrpc":"2.0","id":0,"result":"0x1"})");
  CHECK(got[0].body.capacity() >= got[0].body.size() + 64);  // simdjson's padding: parsed in place
  CHECK(got[0].connect_us > 0);
  CHECK(got[1].connect_us == 0);
  REQUIRE(!server.heads.empty());
  CHECK(server.heads[0].starts_with("POST /rpc?key=1 HTTP/1.1\r\n"));
  CHECK(server.heads[0].find("\r\nX-Api-Key: secret\r\n") != std::string::npos);
  CHECK(server.heads[0].find("\r\nContent-Type: application/json\r\n") != std::string::npos);
  CHECK(connections == std::vector<int>{1, 1, 1, 2});
  CHECK(got[2].body == "hello");
  CHECK(got[2].retry_after == "7");
  CHECK(got[5].error == TransportError::connect);
  CHECK(got[6].error == TransportError::timeout);
}

TEST_CASE("parse_response: results are views into the caller's text, also when it was copied", "[jsonrpc]") {
  const std::string text = R"({"jsonrpc":"2.0","id":1,"result":{"a":"\u0041","b":"0x1a"}})";
  auto r = jsonrpc::parse_response(text);  // no padding: parsed from a copy
  REQUIRE(r.has_value());
  REQUIRE(r->replies[0].result.has_value());
  const auto view = *r->replies[0].result;
  CHECK(view == R"({"a":"\u0041","b":"0x1a"})");
  CHECK(view.data() >= text.data());
  CHECK(view.data() + view.size() <= text.data() + text.size());
}

TEST_CASE("parse_response: strings are still validated without being unescaped", "[jsonrpc]") {
  CHECK_FALSE(jsonrpc::parse_response(std::string("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"a\x01z\"}")).has_value());
  CHECK_FALSE(jsonrpc::parse_response(R"({"jsonrpc":"2.0","id":1,"result":"a\qz"})").has_value());
  CHECK_FALSE(jsonrpc::parse_response(std::string("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"a\xff\"}")).has_value());
  CHECK(jsonrpc::parse_response(R"({"jsonrpc":"2.0","id":1,"result":"0xabc"})").has_value());
  // A large result: the parser's buffers are released afterwards, the answer is intact.
  std::string big = R"({"jsonrpc":"2.0","id":1,"result":"0x)" + std::string(3 << 20, 'a') + "\"}";
  auto r = jsonrpc::parse_response(big);
  REQUIRE(r.has_value());
  CHECK(r->replies[0].result->size() == (3u << 20) + 4);
  CHECK(jsonrpc::parse_response(R"({"jsonrpc":"2.0","id":1,"result":"0x1"})").has_value());
}

TEST_CASE("native http client: an HTTP/1.0 answer with Transfer-Encoding closes its connection",
          "[transport]") {
  // RFC 9112 6.1: its framing is faulty, so the connection is not reused whatever it says, on the
  // fast path and on Beast's; an HTTP/1.0 answer with keep-alive and a Content-Length is reused.
  asio::io_context io;
  FakeServer server(io);
  const std::string url = "http://127.0.0.1:" + std::to_string(server.acceptor.local_endpoint().port()) + "/";
  std::vector<HttpResponse> got;
  std::vector<int> connections;
  Engine engine(io);
  asio::co_spawn(io, server.run(), asio::detached);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        const std::string body = R"({"jsonrpc":"2.0","id":0,"method":"eth_blockNumber","params":[]})";
        for (Mode mode : {Mode::http10_kept, Mode::http10_chunked, Mode::http10_chunked_ext}) {
          server.mode = mode;
          for (int i = 0; i < 2; ++i) {
            HttpRequest r{url, body, nullptr, 2000};
            got.push_back(co_await engine.perform(r));
            connections.push_back(server.connections);
          }
        }
        server.acceptor.close();
      },
      asio::detached);
  io.run_for(std::chrono::seconds(20));
  REQUIRE(got.size() == 6);
  for (const auto& r : got) {
    INFO(r.error_message);
    CHECK(r.error == TransportError::none);
    CHECK(r.status == 200);
    CHECK(r.body == "hello");
  }
  // Kept: one connection for both. Then each chunked HTTP/1.0 answer's connection is closed, so
  // the next request opens another (the first chunked answer came on the kept one).
  CHECK(connections == std::vector<int>{1, 1, 1, 2, 3, 4});
}

}  // namespace unit_native_http_test

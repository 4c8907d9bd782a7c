// Cancelling a transfer in flight (rpcroute/cancel.hpp), as the sidecar does when its client
// leaves: both clients (native and curl) stop at once, report TransportError::cancelled and close
// the connection, so the provider sees the request abandoned.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <functional>
#include <optional>
#include <string>

#include "rpcroute/cancel.hpp"
#include "rpcroute/transport.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_cancel_test {

using namespace rpcroute;
using tcp = asio::ip::tcp;

namespace {

/// Reads a request and never answers; counts the connections that the client closed.
struct HangingServer {
  explicit HangingServer(asio::io_context& io) : acceptor(io, {asio::ip::make_address("127.0.0.1"), 0}) {}
  tcp::acceptor acceptor;
  int requests = 0;
  int closed_by_client = 0;

  asio::awaitable<void> serve(tcp::socket socket) {
    std::string in;
    boost::system::error_code ec;
    co_await asio::async_read_until(socket, asio::dynamic_buffer(in), "\r\n\r\n",
                                    asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
    ++requests;
    char sink[4096];
    while (!ec) co_await socket.async_read_some(asio::buffer(sink), asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::eof || ec == asio::error::connection_reset) ++closed_by_client;
  }

  asio::awaitable<void> run() {
    for (;;) {
      boost::system::error_code ec;
      auto socket = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      asio::co_spawn(acceptor.get_executor(), serve(std::move(socket)), asio::detached);
    }
  }
};

}  // namespace

TEST_CASE("cancel: a transfer to a provider that never answers stops at once, as cancelled", "[transport]") {
  const bool curl = GENERATE(false, true);
  INFO((curl ? "curl" : "native"));
  if (curl) setenv("RPCROUTE_HTTP_CLIENT", "curl", 1);
  asio::io_context io;
  HangingServer server(io);
  Engine engine(io);  // reads RPCROUTE_HTTP_CLIENT here
  unsetenv("RPCROUTE_HTTP_CLIENT");
  const std::string url = "http://127.0.0.1:" + std::to_string(server.acceptor.local_endpoint().port()) + "/";
  Cancellation cancel;
  std::optional<HttpResponse> got;
  asio::co_spawn(io, server.run(), asio::detached);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        HttpRequest request{url, R"({"jsonrpc":"2.0","id":0,"method":"eth_blockNumber","params":[]})", nullptr, 30'000};
        request.cancel = &cancel;
        got = co_await engine.perform(std::move(request));
      },
      asio::detached);
  // The client leaves once the provider holds the request.
  asio::steady_timer poll(io);
  std::function<void()> watch = [&] {
    poll.expires_after(std::chrono::milliseconds(20));
    poll.async_wait([&](const boost::system::error_code& ec) {
      if (ec) return;
      if (server.requests == 0) return watch();
      cancel.request();
    });
  };
  watch();
  // Far less than the transfer's 30 s timeout: only a hang would reach it.
  const auto stop = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < stop && !(got && server.closed_by_client == 1)) {
    io.run_for(std::chrono::milliseconds(50));
  }
  REQUIRE(got.has_value());
  CHECK(got->error == TransportError::cancelled);
  CHECK(server.requests == 1);
  CHECK(server.closed_by_client == 1);  // the connection is closed, not kept for the pool
  CHECK(cancel.requested());
  server.acceptor.close();
}

TEST_CASE("cancel: request() runs the registered hook once; reset() starts over", "[transport]") {
  Cancellation cancel;
  int stopped = 0;
  cancel.on_request([&] { ++stopped; });
  cancel.request();
  cancel.request();
  CHECK(stopped == 1);
  CHECK(cancel.requested());
  cancel.reset();
  CHECK_FALSE(cancel.requested());
  cancel.on_request([&] { ++stopped; });
  cancel.clear_hook();  // the operation ended before the client left
  cancel.request();
  CHECK(stopped == 1);
}

}  // namespace unit_cancel_test

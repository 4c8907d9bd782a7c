// async_read_some_edge: a read that empties the socket (TCP_INQ says nothing is left) makes the
// socket's next read wait for epoll without a recv first; a read that leaves bytes or a FIN behind
// does not. Counted with the operation's own recvmsg counter; every case also checks the data.
#include "rpcroute/edge_read.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <thread>

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_edge_read_test {

using namespace rpcroute;
using tcp = asio::ip::tcp;

#if defined(RPCROUTE_HAS_EDGE_READ)

namespace {

struct Pair {
  explicit Pair(asio::io_context& io) : reader(io), writer(io) {
    tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
    writer.connect(acceptor.local_endpoint());
    acceptor.accept(reader);
    enable_edge_reads(reader);
  }
  void send(const std::string& text) { asio::write(writer, asio::buffer(text)); }
  tcp::socket reader;
  tcp::socket writer;
};

struct Result {
  boost::system::error_code ec;
  std::size_t n = 0;
};

/// Starts one read into `buffer`; the result lands in `out` when it completes.
void start_read(tcp::socket& socket, std::string& buffer, std::optional<Result>& out) {
  out.reset();
  async_read_some_edge(socket, asio::buffer(buffer), [&out](boost::system::error_code ec, std::size_t n) {
    out = Result{ec, n};
  });
}

/// Runs the loop until `out` is set or `ms` pass.
void run_until(asio::io_context& io, std::optional<Result>& out, int ms = 2000) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  io.restart();
  while (!out && std::chrono::steady_clock::now() < end) io.run_for(std::chrono::milliseconds(10));
}

/// One read, run to its end (or `ms`).
std::optional<Result> read_once(asio::io_context& io, tcp::socket& socket, std::string& buffer, int ms = 2000) {
  std::optional<Result> r;
  start_read(socket, buffer, r);
  run_until(io, r, ms);
  return r;
}

/// Starts a read and runs what is ready without waiting: a read on an empty socket stays queued.
void queue_read(asio::io_context& io, tcp::socket& socket, std::string& buffer, std::optional<Result>& out) {
  start_read(socket, buffer, out);
  io.restart();
  io.poll();
}

/// A connected pair on its own loop, a 64-byte read buffer and the last read's result.
struct Fixture {
  asio::io_context io;
  Pair p{io};
  std::string buffer = std::string(64, '\0');
  std::optional<Result> r;

  /// The last read completed without error and read `text`.
  void expect_read(const std::string& text) const {
    REQUIRE(r);
    CHECK(!r->ec);
    CHECK(buffer.substr(0, r->n) == text);
  }
};

}  // namespace

TEST_CASE_METHOD(Fixture, "edge read: a read that empties the socket makes the next one wait for epoll, no recv first") {
  p.send("hello");
  const auto before = edge_read_detail::recv_calls;
  r = read_once(io, p.reader, buffer);
  expect_read("hello");
  CHECK(edge_read_detail::recv_calls - before == 1);

  // Nothing has arrived: the read is queued without trying a recv ...
  queue_read(io, p.reader, buffer, r);
  CHECK(!r);
  CHECK(edge_read_detail::recv_calls - before == 1);
  // ... and bytes that arrive later raise the event that performs it: one recv, not two.
  p.send("world!");
  run_until(io, r);
  expect_read("world!");
  CHECK(edge_read_detail::recv_calls - before == 2);
}

TEST_CASE_METHOD(Fixture, "edge read: bytes that arrived while no read was queued are still read") {
  p.send("one");
  r = read_once(io, p.reader, buffer);
  REQUIRE(r);
  // More bytes arrive and their event is consumed by the loop while no read is queued.
  p.send("two");
  io.restart();
  io.run_for(std::chrono::milliseconds(50));
  r = read_once(io, p.reader, buffer, 1000);
  expect_read("two");
}

TEST_CASE_METHOD(Fixture, "edge read: a read that leaves bytes behind does not mark the socket empty") {
  buffer.resize(4);
  p.send("abcdefgh");
  const auto before = edge_read_detail::recv_calls;
  r = read_once(io, p.reader, buffer);
  expect_read("abcd");
  r = read_once(io, p.reader, buffer, 1000);  // no new event will come: it must try at once
  expect_read("efgh");
  CHECK(edge_read_detail::recv_calls - before == 2);
}

// A short read is not proof of an empty socket: data and FIN raise one event, the read takes the
// data, and no event is left for the FIN. TCP_INQ counts the FIN, so the next read tries at once.
TEST_CASE_METHOD(Fixture, "edge read: a FIN that arrived with the last bytes is read as eof at once, not waited for") {
  p.send("x");
  r = read_once(io, p.reader, buffer);
  REQUIRE(r);
  queue_read(io, p.reader, buffer, r);  // queued on the empty socket
  CHECK(!r);
  p.send("partial answer");
  p.writer.shutdown(tcp::socket::shutdown_send);
  run_until(io, r);
  REQUIRE(r);
  CHECK(buffer.substr(0, r->n) == "partial answer");
  r = read_once(io, p.reader, buffer, 1000);
  REQUIRE(r);
  CHECK(r->ec == asio::error::eof);
}

TEST_CASE_METHOD(Fixture, "edge read: a FIN after an emptying read raises the event that reads eof") {
  p.send("x");
  r = read_once(io, p.reader, buffer);
  REQUIRE(r);
  queue_read(io, p.reader, buffer, r);
  CHECK(!r);
  p.writer.shutdown(tcp::socket::shutdown_send);
  run_until(io, r, 1000);
  REQUIRE(r);
  CHECK(r->ec == asio::error::eof);
  CHECK(r->n == 0);
}

TEST_CASE_METHOD(Fixture, "edge read: a queued read is cancelled by cancel() and by close()") {
  queue_read(io, p.reader, buffer, r);
  CHECK(!r);
  p.reader.cancel();
  run_until(io, r, 1000);
  REQUIRE(r);
  CHECK(r->ec == asio::error::operation_aborted);

  queue_read(io, p.reader, buffer, r);
  p.reader.close();
  run_until(io, r, 1000);
  REQUIRE(r);
  CHECK(r->ec == asio::error::operation_aborted);
}

TEST_CASE_METHOD(Fixture, "edge read: an empty buffer completes at once; a reset peer is an error") {
  std::string empty;
  r = read_once(io, p.reader, empty, 1000);
  REQUIRE(r);
  CHECK(!r->ec);
  CHECK(r->n == 0);

  start_read(p.reader, buffer, r);
  p.writer.set_option(asio::socket_base::linger(true, 0));
  p.writer.close();  // RST
  run_until(io, r, 1000);
  REQUIRE(r);
  CHECK(r->ec == asio::error::connection_reset);
}

TEST_CASE("edge read: works from a coroutine, and a pending read goes away with the io_context") {
  std::string got;
  {
    asio::io_context io;
    Pair p(io);
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          std::string buffer(64, '\0');
          boost::system::error_code ec;
          auto n = co_await async_read_some_edge(p.reader, asio::buffer(buffer),
                                                 asio::redirect_error(asio::use_awaitable, ec));
          got.assign(buffer.data(), n);
          // Nothing more comes: this read is still queued when the io_context is destroyed.
          co_await async_read_some_edge(p.reader, asio::buffer(buffer), asio::redirect_error(asio::use_awaitable, ec));
          got += "unreachable";
        },
        asio::detached);
    p.send("from a coroutine");
    io.run_for(std::chrono::milliseconds(100));
  }
  CHECK(got == "from a coroutine");
}

TEST_CASE("edge read: without enable_edge_reads it behaves like async_read_some") {
  asio::io_context io;
  tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  tcp::socket writer(io);
  tcp::socket reader(io);
  writer.connect(acceptor.local_endpoint());
  acceptor.accept(reader);
  std::string buffer(64, '\0');
  std::optional<Result> r;

  asio::write(writer, asio::buffer(std::string("abc")));
  const auto before = edge_read_detail::recv_calls;
  r = read_once(io, reader, buffer);
  REQUIRE(r);
  queue_read(io, reader, buffer, r);  // no TCP_INQ answer: the socket is not known empty, so it tries
  CHECK(edge_read_detail::recv_calls - before == 2);
  asio::write(writer, asio::buffer(std::string("def")));
  run_until(io, r);
  REQUIRE(r);
  CHECK(buffer.substr(0, r->n) == "def");
}

namespace {

/// Starts a drained wait and runs what is ready without waiting; the result lands in `out`.
void queue_wait(asio::io_context& io, tcp::socket& socket, std::optional<Result>& out) {
  out.reset();
  async_wait_drained(socket, [&out](boost::system::error_code ec) { out = Result{ec, 0}; });
  io.restart();
  io.poll();
}

/// What the socket holds now, read without the reactor.
std::string drain(tcp::socket& socket) {
  std::string got(64, '\0');
  const auto n = socket.read_some(asio::buffer(got));
  got.resize(n);
  return got;
}

}  // namespace

// The TLS client's wait for an answer (native_tls.cpp): OpenSSL reads the socket itself, so the
// wait must complete on the next readiness event and never on an event already taken.
TEST_CASE_METHOD(Fixture, "drained wait: queued on an empty socket, completed by the bytes that arrive, which it leaves") {
  const auto before = edge_read_detail::edge_waits;
  queue_wait(io, p.reader, r);
  CHECK(!r);  // not tried at once: nothing is there
  CHECK(edge_read_detail::edge_waits - before == 1);
  p.send("answer");
  run_until(io, r);
  REQUIRE(r);
  CHECK(!r->ec);
  CHECK(drain(p.reader) == "answer");
}

TEST_CASE_METHOD(Fixture, "drained wait: bytes that arrive before it is queued, their event not yet taken, complete it") {
  p.send("early");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  r.reset();
  async_wait_drained(p.reader, [this](boost::system::error_code ec) { r = Result{ec, 0}; });
  run_until(io, r, 1000);
  REQUIRE(r);
  CHECK(!r->ec);
  CHECK(drain(p.reader) == "early");
}

TEST_CASE_METHOD(Fixture, "drained wait: an event taken for bytes already read does not complete it; the next bytes do") {
  p.send("old");
  io.restart();
  io.run_for(std::chrono::milliseconds(50));  // the loop takes the event; nothing is queued
  CHECK(drain(p.reader) == "old");            // the caller reads them (as OpenSSL does)
  queue_wait(io, p.reader, r);
  io.restart();
  io.run_for(std::chrono::milliseconds(50));
  CHECK(!r);  // Asio's speculative flag from the old event is not taken for readiness
  p.send("new");
  run_until(io, r);
  REQUIRE(r);
  CHECK(!r->ec);
  CHECK(drain(p.reader) == "new");
}

TEST_CASE_METHOD(Fixture, "drained wait: a FIN completes it; cancel() ends it with operation_aborted") {
  queue_wait(io, p.reader, r);
  CHECK(!r);
  p.reader.cancel();
  run_until(io, r, 1000);
  REQUIRE(r);
  CHECK(r->ec == asio::error::operation_aborted);

  queue_wait(io, p.reader, r);
  CHECK(!r);
  p.writer.shutdown(tcp::socket::shutdown_send);
  run_until(io, r, 1000);
  REQUIRE(r);
  CHECK(!r->ec);
  std::string byte(1, '\0');
  boost::system::error_code ec;
  CHECK(p.reader.read_some(asio::buffer(byte), ec) == 0);
  CHECK(ec == asio::error::eof);
}

#else

TEST_CASE("edge read: not built for this Boost; async_read_some_edge is async_read_some") { SUCCEED(); }

#endif

}  // namespace unit_edge_read_test

// GET /dashboard/events: the decision feed as Server-Sent Events. Each stream polls the ring on its
// own timer, so recording a decision does no work for the streams, and a slow reader only delays
// itself: its writes have a deadline (the server's sweeper), its buffer at most a ring's worth.
#include <fmt/format.h>

#include <chrono>

#include "connection.hpp"
#include "dashboard.hpp"

namespace rpcroute::sidecar {

namespace {

/// The decisions from `cursor` on as SSE events, appended to `out`; a reader whose cursor was
/// overwritten (more than a ring's worth in one tick) is told how many it missed.
void append_events(const DecisionRing& ring, std::uint64_t& cursor, std::string& out) {
  if (cursor < ring.first_seq()) {
    out += fmt::format("event: gap\ndata: {{\"missed\":{}}}\n\n", ring.first_seq() - cursor);
    cursor = ring.first_seq();
  }
  for (; cursor < ring.next_seq(); ++cursor) {
    const Decision* d = ring.at(cursor);
    if (d == nullptr) break;
    json::Writer w;
    write_decision_json(w, *d);
    out += fmt::format("id: {}\nevent: decision\ndata: ", d->seq);
    out += w.str();
    out += "\n\n";
  }
}

}  // namespace

asio::awaitable<void> Dashboard::stream(asio::ip::tcp::socket& socket, Connection& conn,
                                        std::string header_lines, const bool& draining,
                                        std::int64_t now_ms) {
  ++streams_;
  watched(now_ms);
  std::string out = fmt::format(
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n"
      "X-Content-Type-Options: nosniff\r\n{}Connection: close\r\n\r\nretry: 2000\n\n",
      header_lines);
  // A new reader starts with the recent past (the page fills its feed at once).
  constexpr std::uint64_t kBacklog = 100;
  std::uint64_t cursor =
      std::max(ring_.first_seq(),
               ring_.next_seq() > kBacklog ? ring_.next_seq() - kBacklog : std::uint64_t{1});
  // The kernel's buffer for this reader is bounded too (autotuning would let it grow to megabytes):
  // a reader that stops reading reaches the write deadline after at most a tick's chunk and this.
  boost::system::error_code ignored;
  socket.set_option(asio::socket_base::send_buffer_size(kStreamSocketBuffer), ignored);
  asio::steady_timer timer(socket.get_executor());
  auto last_write = steady_us();
  boost::system::error_code ec;
  try {
    while (!draining && !client_left(socket)) {
      append_events(ring_, cursor, out);
      if (out.empty() && steady_us() - last_write > std::int64_t{kHeartbeatMs} * 1000)
        out = ": keep-alive\n\n";
      if (!out.empty()) {
        conn.expire_in(kStreamWriteMs);
        co_await asio::async_write(socket, asio::buffer(out),
                                   asio::redirect_error(asio::use_awaitable, ec));
        conn.deadline_us = 0;
        if (ec) {
          if (conn.timed_out) ++dropped_streams_;  // a reader that does not read: dropped
          break;
        }
        out.clear();
        if (out.capacity() > 256 * 1024) std::string().swap(out);
        last_write = steady_us();
      }
      timer.expires_after(std::chrono::milliseconds(kStreamTickMs));
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
  } catch (const std::exception&) {
    // Out of memory building a chunk: this stream ends, the sidecar goes on.
  }
  --streams_;
}

}  // namespace rpcroute::sidecar

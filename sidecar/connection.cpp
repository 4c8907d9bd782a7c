// One client connection: requests read off the socket (reader.hpp), answered by the handlers,
// written back (response_head.hpp), logged. The Beast-heavy unit of the sidecar: it compiles
// slowly.
#include "connection.hpp"

#include <fmt/format.h>
#include <sys/socket.h>

#include <array>
#include <boost/beast/core.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <optional>

#include "reader.hpp"
#include "response_head.hpp"
#include "rpcroute/edge_read.hpp"
#include "rpcroute/json.hpp"
#include "server.hpp"
#include "ws_session.hpp"

namespace rpcroute::sidecar {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

bool client_left(tcp::socket& socket) {
  char byte;
  const auto n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/// What a connection keeps from one request to the next: its buffers are reused, not reallocated.
struct ConnectionState {
  tcp::socket& socket;
  std::string remote;
  Cancellation cancel;  // the request being routed, when its client leaves
  Connection conn;
  beast::flat_buffer buffer;
  Request req;
  std::string head;                     // each response's status line and headers
  Reply reply;                          // each response's status, body and extra headers
  RpcJob job;                           // a JSON-RPC request being routed
  std::optional<RequestReader> parser;  // a request the fast path did not take
  bool over_budget = false;             // read whole, but its body would pass --max-inflight-mb
  bool answered_early = false;  // refused on its head: the answer is in `reply`, the body unread

  explicit ConnectionState(tcp::socket& s) : socket(s), conn{&s, &cancel} {}
};

namespace {

constexpr std::string_view kBusyBytes =
    "too many request bytes in flight (--max-inflight-mb); retry later";

std::string iso_now() {
  auto now = std::chrono::system_clock::now();
  auto t = std::chrono::system_clock::to_time_t(now);
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

/// Drops `n` sent bytes from the front of a two-buffer sequence; true when something is left.
bool advance(std::array<asio::const_buffer, 2>& out, std::size_t n) {
  for (auto& b : out) {
    const auto k = std::min(n, b.size());
    b += k;
    n -= k;
  }
  return out[0].size() + out[1].size() > 0;
}

/// The answer to a request that could not be read, if one is due (not when the client left).
std::optional<http::status> read_error_status(const beast::error_code& ec, bool timed_out) {
  if (timed_out) return http::status::request_timeout;
  if (ec == http::error::body_limit) return http::status::payload_too_large;
  if (ec == http::error::header_limit) return http::status::request_header_fields_too_large;
  if (ec == asio::error::no_buffer_space) return http::status::service_unavailable;
  if (ec != http::error::end_of_stream && ec != asio::error::eof &&
      ec != asio::error::connection_reset && ec != asio::error::operation_aborted)
    return http::status::bad_request;
  return std::nullopt;
}

/// The request is whole in the buffer: taken by the fast path (when on), or by Beast's parser
/// from what has arrived. False: more bytes are needed (or `ec` is set).
bool start_request(ConnectionState& s, const ServerConfig& config, BodyBudget& budget,
                   beast::error_code& ec) {
  s.parser.reset();
  s.answered_early = false;
  bool complete = config.fast_http1 && take_plain_request(s.buffer, config.max_body, s.req);
  // A whole request read in one pass already holds its body: past the budget it is refused
  // with the same 503, and the connection goes on.
  s.over_budget = complete && !budget.take(s.conn.held, s.req.body.size());
  if (complete) return true;
  s.parser.emplace(s.req, budget, s.conn.held);
  s.parser->eager(true);
  s.parser->body_limit(config.max_body);
  s.parser->header_limit(kHeaderLimit);
  return feed(*s.parser, s.buffer, ec);
}

/// Writes s.reply with the hand-written head (HEAD: headers only, with the length a GET would
/// get) in one gathered non-blocking send: most answers fit the socket's send buffer. True when
/// something is left to write, in `out`.
bool send_now(ConnectionState& s, bool keep_alive, std::array<asio::const_buffer, 2>& out,
              beast::error_code& ec) {
  const Reply& reply = s.reply;
  response_head(s.head, reply.status, s.req.version, keep_alive,
                !reply.body.empty() || reply.status != http::status::no_content
                    ? reply.content_type
                    : std::string_view(),
                reply.header_lines, reply.body.size());
  out = {asio::buffer(s.head),
         s.req.method == http::verb::head ? asio::const_buffer() : asio::buffer(reply.body)};
  const auto sent = s.socket.write_some(out, ec);
  if (ec && ec != asio::error::would_block) return false;
  ec = {};
  return advance(out, sent);
}

/// After an answer: a large request's buffer is not kept for the life of a keep-alive connection,
/// and the answer's body (the provider's buffer, moved in) is let go once written: 256 idle
/// connections must not each hold their last 200 KB answer.
void release_buffers(ConnectionState& s, BodyBudget& budget) {
  if (s.req.body.capacity() > 64 * 1024) std::string().swap(s.req.body);
  std::string().swap(s.reply.body);
  s.job.parsed.calls.clear();  // a batch's params, copied out of the request, go with it
  budget.give_back(s.conn.held);
}

}  // namespace

// The loop's steps share the connection's deadline and busy state, and a JSON-RPC request is
// routed here, in this frame (a coroutine level less per request); the steps that need no await of
// their own are functions, the rare paths (partial reads, refusals) are coroutines of their own.
// NOLINTNEXTLINE(readability-function-size): one frame per connection, see above
asio::awaitable<void> Server::serve_connection(tcp::socket socket) {
  ConnectionState s(socket);
  {
    boost::system::error_code ec;
    auto ep = socket.remote_endpoint(ec);
    if (!ec) s.remote = fmt::format("{}:{}", ep.address().to_string(), ep.port());
    socket.non_blocking(true, ec);  // write_some below never blocks the loop
  }
  s.req.remote = s.remote;
  Connection& conn = s.conn;
  connections_.insert(&conn);
  enable_edge_reads(socket);
  s.buffer.max_size(config_.max_body + 64 * 1024);

  // Whatever happens in the loop, the connection leaves the set the sweeper and shutdown walk
  // (an exception escaping this frame would leave a dangling pointer there). Not an RAII guard:
  // a frame destroyed with the io_context at exit must not touch the Server.
  try {
    for (;;) {
      if (draining_) break;
      boost::system::error_code ec;
      // Wait for the next request as long as an idle connection may live, then give it the read
      // timeout for its headers and body (slow clients cannot hold a connection forever).
      if (s.buffer.size() == 0) {
        conn.expire_in(config_.idle_timeout_ms);
        // After an answer the client's next request has seldom arrived: a drained socket waits for
        // epoll instead of trying a recv that fails (rpcroute/edge_read.hpp).
        auto n = co_await async_read_some_edge(socket, s.buffer.prepare(16 * 1024),
                                               asio::redirect_error(asio::use_awaitable, ec));
        conn.deadline_us = 0;
        if (ec) break;
        s.buffer.commit(n);
      }
      conn.busy = true;
      metrics_.in_flight(+1);
      // A slow client is cancelled by the sweeper and still told 408. A request that has arrived
      // whole (the common case) is parsed from the buffer at once: no read operation for it, and
      // a plain one not even Beast's parser.
      conn.expire_in(config_.read_timeout_ms);
      if (!start_request(s, config_, body_budget_, ec) && !ec) co_await read_request(s, ec);
      conn.deadline_us = 0;
      if (ec) {
        co_await refuse_request(s, ec);
        metrics_.in_flight(-1);
        conn.busy = false;
        break;
      }
      // A WebSocket upgrade that passes the checks of any request leaves this loop with its
      // socket (ws_session.hpp); refused, it is answered below like any refusal, and closed.
      if (s.req.upgrade && !s.answered_early && is_websocket_upgrade(s.req)) {
        s.reply.reset();
        if (Route route; handlers_.prepare_upgrade(s.req, s.reply, route)) {
          metrics_.in_flight(-1);
          body_budget_.give_back(conn.held);
          connections_.erase(&conn);
          if (config_.verbose) log_request(s, "WebSocket");
          websockets_.start(std::move(socket), s.req, std::move(route), s.remote);
          co_return;
        }
        s.answered_early = true;
      }
      const auto started = steady_us();
      if (!s.answered_early) s.reply.reset();
      try {
        // What needs no provider is answered at once; a JSON-RPC request is routed here.
        if (answer_locally(s)) {
          const std::span<const jsonrpc::Call> calls(s.job.parsed.calls.data(), s.job.routed);
          // The sweeper watches the client meanwhile: if it leaves, the routing stops and its
          // upstream transfer is aborted, instead of holding the request until the provider
          // answers.
          s.cancel.reset();
          s.job.options.cancel = &s.cancel;
          conn.routing = true;
          std::vector<CallOutcome> outs;
          if (s.job.shared) {  // may share a flight with identical calls (coalesce.hpp)
            outs =
                co_await handlers_.coalescer().route(*s.job.rt->router, *s.job.chain, calls,
                                                     s.job.options, s.job.key, s.job.finality.head);
          } else {
            outs = co_await s.job.rt->router->route(*s.job.chain, calls, s.job.options);
          }
          conn.routing = false;
          if (s.cancel.requested()) {
            metrics_.on_cancelled();
            if (config_.verbose) log_request(s, "client left; request cancelled");
            break;
          }
          handlers_.finish_rpc(s.job, outs, s.reply);
        }
      } catch (const std::exception& e) {
        // Every request gets an answer: an unexpected failure (out of memory, say) is a 500, and
        // the connection goes on.
        conn.routing = false;
        answer_internal_error(s, e.what());
      }

      if (s.reply.event_stream) {  // GET /dashboard/events: the stream keeps the connection
        metrics_.on_http(200);
        metrics_.in_flight(-1);
        conn.busy = false;
        release_buffers(s, body_budget_);
        if (config_.verbose) log_request(s, "event stream");
        co_await handlers_.dashboard().stream(socket, conn, std::move(s.reply.header_lines),
                                              draining_, clock_.now_ms());
        break;
      }
      // The status line and headers are written by hand next to the body (one gathered send):
      // what Beast's serializer would produce (response_head.hpp), at a fraction of its cost.
      const bool keep_alive = s.req.keep_alive && !draining_ && !s.answered_early;
      metrics_.on_http(static_cast<int>(s.reply.status));
      conn.expire_in(config_.read_timeout_ms);
      if (!config_.fast_http1) {
        co_await write_with_beast(s, keep_alive, ec);
      } else if (std::array<asio::const_buffer, 2> out; send_now(s, keep_alive, out, ec)) {
        co_await asio::async_write(socket, out, asio::redirect_error(asio::use_awaitable, ec));
      }
      conn.deadline_us = 0;
      metrics_.in_flight(-1);
      conn.busy = false;
      release_buffers(s, body_budget_);
      if (config_.verbose) log_request(s, static_cast<double>(steady_us() - started) / 1000.0);
      if (ec || !keep_alive) break;
    }
  } catch (const std::exception& e) {
    log(fmt::format("rpcroute: internal error on a connection from {}: {}", s.remote, e.what()));
  }
  if (conn.busy) metrics_.in_flight(-1);
  body_budget_.give_back(conn.held);
  connections_.erase(&conn);
  boost::system::error_code ignored;
  socket.shutdown(tcp::socket::shutdown_both, ignored);
}

asio::awaitable<void> Server::read_request(ConnectionState& s, boost::system::error_code& ec) {
  bool continued = false;  // 100 Continue sent for this request
  bool complete = false;
  while (!complete && !ec) {
    if (s.conn.timed_out) {  // the sweeper's cancel came after the last read had completed
      ec = asio::error::operation_aborted;
      break;
    }
    // The head is in and accepted (a body over --max-body was refused at its Content-Length):
    // a client that waits for 100 Continue before its body (curl above 1 MiB) gets it now
    // rather than sending after its own timeout (curl: a whole second).
    if (s.req.expect_continue && !continued && s.req.version >= 11 && s.parser->is_header_done()) {
      continued = true;
      // What its head alone decides (Host, Origin, token, route, method) is answered now,
      // before the client sends a body for nothing. prepare() sees an empty body then: a
      // JSON-RPC route answers that with 200 and -32700, which is not a refusal.
      s.reply.reset();
      if (!handlers_.prepare(s.req, s.reply, s.job, edge()) && s.reply.status != http::status::ok) {
        s.answered_early = true;
        break;
      }
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      co_await asio::async_write(s.socket, asio::buffer(kContinue),
                                 asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;
    }
    const auto size = beast::read_size(s.buffer, 64 * 1024);
    if (size == 0) {
      ec = http::error::buffer_overflow;
      break;
    }
    auto n = co_await s.socket.async_read_some(s.buffer.prepare(size),
                                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::eof) {
      // As http::async_read reports it: nothing at all, or a message cut short.
      ec = s.parser->got_some() ? beast::error_code(http::error::partial_message)
                                : beast::error_code(http::error::end_of_stream);
      break;
    }
    if (ec) break;
    s.buffer.commit(n);
    complete = feed(*s.parser, s.buffer, ec);
  }
}

asio::awaitable<void> Server::refuse_request(ConnectionState& s, boost::system::error_code ec) {
  const bool timed_out = s.conn.timed_out;
  const auto status = read_error_status(ec, timed_out);
  if (!status) co_return;
  http::response<http::string_body> res{*status, 11};
  res.set(http::field::content_type, "application/json");
  res.set(http::field::connection, "close");
  if (*status == http::status::service_unavailable) {
    res.set(http::field::retry_after, "1");
    metrics_.on_refused("memory");
  }
  res.body() = json_error_body(
      ec == http::error::body_limit
          ? fmt::format("request body larger than {} bytes", config_.max_body)
      : ec == asio::error::no_buffer_space ? std::string(kBusyBytes)
      : timed_out
          ? fmt::format("request not received within the read timeout ({} ms; see --read-timeout)",
                        config_.read_timeout_ms)
          : ec.message());
  res.prepare_payload();
  metrics_.on_http(static_cast<int>(*status));
  s.conn.expire_in(5'000);
  const auto why = timed_out ? std::string("read timeout")
                   : ec == asio::error::no_buffer_space
                       ? std::string("--max-inflight-mb reached")
                       : ec.message();  // before the write reuses ec
  co_await http::async_write(s.socket, res, asio::redirect_error(asio::use_awaitable, ec));
  // A refused body may still be on its way: closing on unread bytes would reset the connection,
  // and a reset can discard the answer before the client reads it. The client sees the end of
  // the answer at once; what it still sends is read and dropped, for a second at most.
  if (!ec) s.socket.shutdown(tcp::socket::shutdown_send, ec);
  s.conn.expire_in(1'000);
  while (!ec && !s.conn.timed_out) {
    co_await s.socket.async_read_some(s.buffer.prepare(64 * 1024),
                                      asio::redirect_error(asio::use_awaitable, ec));
  }
  s.conn.deadline_us = 0;
  if (config_.verbose)
    log(fmt::format("{} {} - {} {}", iso_now(), s.remote, static_cast<int>(*status), why));
}

bool Server::answer_locally(ConnectionState& s) {
  if (s.answered_early) return false;  // refused on its head, before its body (100 Continue)
  if (s.over_budget) {
    metrics_.on_refused("memory");
    s.reply.status = http::status::service_unavailable;
    s.reply.body = json_error_body(kBusyBytes);
    s.reply.header("Retry-After", "1");
    return false;
  }
  return handlers_.prepare(s.req, s.reply, s.job, edge());
}

asio::awaitable<void> Server::write_with_beast(ConnectionState& s, bool keep_alive,
                                               boost::system::error_code& ec) {
  const bool no_type = s.reply.body.empty() && s.reply.status == http::status::no_content;
  auto res = beast_response(s.reply.status, s.req.version, keep_alive,
                            no_type ? std::string_view() : s.reply.content_type,
                            s.reply.header_lines, std::move(s.reply.body));
  if (s.req.method == http::verb::head) {  // headers only, with the length a GET would get
    http::response_serializer<http::string_body> sr(res);
    co_await http::async_write_header(s.socket, sr, asio::redirect_error(asio::use_awaitable, ec));
  } else {
    co_await http::async_write(s.socket, res, asio::redirect_error(asio::use_awaitable, ec));
  }
}

void Server::answer_internal_error(ConnectionState& s, std::string_view what) {
  s.reply.reset();
  s.reply.status = http::status::internal_server_error;
  s.reply.body = json_error_body("internal error while answering this request");
  log(fmt::format("rpcroute: internal error answering {} {}: {}", s.req.method_string,
                  s.req.target.substr(0, 200), what));
}

void Server::log_request(const ConnectionState& s, std::string_view note) {
  log(fmt::format("{} {} {} {} - {}", iso_now(), s.remote, s.req.method_string,
                  s.req.target.substr(0, 200), note));
}

void Server::log_request(const ConnectionState& s, double ms) {
  const std::string target = s.req.target.substr(0, 200);
  const Reply& reply = s.reply;
  if (!config_.json_logs) {
    log(fmt::format("{} {} {} {} {} {} provider={} attempts={} {:.2f}ms", iso_now(), s.remote,
                    s.req.method_string, target, static_cast<int>(reply.status),
                    reply.rpc_method.empty() ? "-" : reply.rpc_method,
                    reply.provider.empty() ? "-" : reply.provider, reply.attempts, ms));
    return;
  }
  json::Writer w;
  w.begin_object();
  w.key("ts");
  w.value(iso_now());
  w.key("remote");
  w.value(s.remote);
  w.key("method");
  w.value(s.req.method_string);
  w.key("path");
  w.value(target);
  w.key("status");
  w.value(static_cast<int>(reply.status));
  w.key("rpc_method");
  w.value(reply.rpc_method);
  w.key("provider");
  w.value(reply.provider);
  w.key("attempts");
  w.value(static_cast<std::int64_t>(reply.attempts));
  w.key("ms");
  w.value(ms);
  w.end_object();
  log(w.take());
}

}  // namespace rpcroute::sidecar

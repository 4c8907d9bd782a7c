// One WebSocket client: the handshake, a read loop that hands each message to a coroutine of its
// own (answered as it is ready), one writer draining a bounded queue, and the close.
#include "ws_session.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "handlers.hpp"
#include "metrics.hpp"
#include "reply.hpp"
#include "rpcroute/cancel.hpp"
#include "rpcroute/jsonrpc.hpp"
#include "rpcroute/transport.hpp"
#include "server_config.hpp"

namespace rpcroute::sidecar {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

bool is_websocket_upgrade(const Request& req) {
  for (const auto& [name, value] : req.fields()) {
    if (beast::iequals(name, "upgrade") &&
        beast::iequals(beast::string_view(value.data(), std::min<std::size_t>(value.size(), 9)),
                       "websocket"))
      return true;
  }
  return false;
}

namespace {

/// A close that a client does not complete (it is not reading) ends with the socket after this.
constexpr auto kCloseLimit = std::chrono::seconds(5);

bool subscription_method(std::string_view method) {
  return method == "eth_subscribe" || method == "eth_unsubscribe";
}

/// A subscription refused on this side (the connection's limit).
CallOutcome subscription_refused(const jsonrpc::Call& call, std::string_view message) {
  CallOutcome o;
  o.status = CallOutcome::Status::local;
  o.error = jsonrpc::error_object(jsonrpc::kInvalidRequest, message);
  if (call.has_id()) o.response = jsonrpc::make_error(call.id, jsonrpc::kInvalidRequest, message);
  return o;
}

}  // namespace

class WsSession : public std::enable_shared_from_this<WsSession> {
 public:
  WsSession(WsClients& hub, tcp::socket socket, Route route, std::string remote)
      : hub_(hub),
        ws_(std::move(socket)),
        route_(std::move(route)),
        remote_(std::move(remote)),
        slot_(ws_.get_executor()),
        id_(++hub.next_session_) {}

  /// The handshake, then the client's messages until it closes or is closed.
  asio::awaitable<void> run(std::shared_ptr<WsSession> self, http::request<http::empty_body> req);
  [[nodiscard]] auto executor() { return ws_.get_executor(); }
  void going_away() {
    going_away_ = true;
    close_when_done();
  }
  void close_socket() {
    boost::system::error_code ignored;
    beast::get_lowest_layer(ws_).close(ignored);
  }

 private:
  /// Reads messages until the client or the server closes; each is answered by answer().
  asio::awaitable<void> read_loop();
  asio::awaitable<void> answer(std::shared_ptr<WsSession> self, std::string body);
  /// The calls of one message: subscriptions answered here, the rest routed as over HTTP.
  asio::awaitable<std::vector<CallOutcome>> route_calls(RpcJob& job, Cancellation& cancel);
  /// eth_subscribe and eth_unsubscribe, through the shared subscriptions.
  asio::awaitable<CallOutcome> subscription_call(const jsonrpc::Call& call, RpcJob& job);
  /// Queues an answer; a client with too much queued is not reading: closed with 1008.
  void send(std::string message);
  asio::awaitable<void> write_loop(std::shared_ptr<WsSession> self);
  /// Starts the closing handshake (once); calls being routed are cancelled, queued answers
  /// behind the one being written dropped.
  void close(websocket::close_code code, std::string reason);
  /// A subscription ended (no provider can serve it): its error notification, queued already,
  /// goes out, then the close with 1013 and `reason`; nothing more is queued meanwhile.
  void end(std::string reason);
  asio::awaitable<void> close_handshake(std::shared_ptr<WsSession> self,
                                        websocket::close_reason reason);
  /// Shutting down: closes with 1001 once nothing is routed, queued or being written.
  void close_when_done() {
    if (!ending_.empty() && out_.empty() && !writing_)
      close(websocket::close_code::try_again_later, ending_);
    else if (going_away_ && in_flight_ == 0 && out_.empty() && !writing_)
      close(websocket::close_code::going_away, "server shutting down");
  }
  void log(std::string_view what) const;

  WsClients& hub_;
  websocket::stream<tcp::socket> ws_;
  Route route_;
  std::string remote_;
  std::deque<std::string> out_;  // answers to write, the first one being written when writing_
  std::size_t out_bytes_ = 0;
  bool writing_ = false;
  bool closing_ = false;
  bool going_away_ = false;
  std::string ending_;         // a subscription ended: the close's reason, once the queue is out
  int close_code_ = 0;         // the close the server started, for the metrics
  std::size_t in_flight_ = 0;  // messages being answered
  asio::steady_timer slot_;    // the read loop waits here while in_flight_ is at the cap
  std::set<Cancellation*> routing_;  // the calls being routed, cancelled when the client goes
  std::uint64_t id_;                 // for the subscriptions (WsSubscriptions)
  std::size_t subscriptions_ = 0;    // this client's, against ws_max_subscriptions
};

asio::awaitable<void> WsSession::run(std::shared_ptr<WsSession> self,
                                     http::request<http::empty_body> req) {
  const ServerConfig& config = hub_.config_;
  websocket::stream_base::timeout limits{};
  limits.handshake_timeout = std::chrono::milliseconds(config.read_timeout_ms);
  limits.idle_timeout = std::chrono::milliseconds(config.ws_ping_timeout_ms);
  limits.keep_alive_pings = true;  // a ping after half the idle time: a live client answers it
  ws_.set_option(limits);
  ws_.set_option(websocket::stream_base::decorator(
      [](websocket::response_type& res) { res.set(http::field::server, "rpcroute"); }));
  ws_.read_message_max(config.max_body);
  ws_.auto_fragment(false);  // an answer goes out as one frame
  ws_.text(true);
  boost::system::error_code ec;
  co_await ws_.async_accept(req, asio::redirect_error(asio::use_awaitable, ec));
  hub_.metrics_.on_http(ec ? 400 : 101);
  if (!ec) {
    hub_.metrics_.websocket_open(+1);
    if (hub_.going_away_) going_away();
    co_await read_loop();
    hub_.metrics_.websocket_open(-1);
    hub_.metrics_.on_websocket_close(close_code_);
  } else if (config.verbose) {
    log(fmt::format("WebSocket handshake failed: {}", ec.message()));
  }
  closing_ = true;
  for (auto* c : std::vector<Cancellation*>(routing_.begin(), routing_.end())) c->request();
  hub_.subscriptions_.drop_session(id_);
  hub_.sessions_.erase(this);
  (void)self;  // held until the read loop ends; answers and the writer hold their own
}

asio::awaitable<void> WsSession::read_loop() {
  const ServerConfig& config = hub_.config_;
  beast::flat_buffer buffer;
  for (;;) {
    boost::system::error_code ec;
    // Past the calls one client may have routed at once, its next message waits in the socket.
    while (in_flight_ >= config.ws_max_in_flight && !closing_) {
      slot_.expires_at(asio::steady_timer::time_point::max());
      co_await slot_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    co_await ws_.async_read(buffer, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      // The code the server sent, else the client's, else none came (1006).
      if (close_code_ == 0) {
        close_code_ = ec == websocket::error::closed
                          ? static_cast<int>(ws_.reason().code)
                          : static_cast<int>(websocket::close_code::abnormal);
      }
      if (config.verbose) {
        const auto& why = ws_.reason();
        log(ec == websocket::error::closed
                ? fmt::format("closed {} {}", static_cast<int>(why.code),
                              std::string_view(why.reason.data(), why.reason.size()))
            : closing_ ? std::string("closed by the sidecar")
                       : fmt::format("ended: {}", ec.message()));
      }
      break;
    }
    if (closing_) {  // closing: what still arrives is not answered; the close says why
      buffer.consume(buffer.size());
      continue;
    }
    // With simdjson's padding to spare, the body is parsed in place.
    std::string body;
    body.reserve(buffer.size() + kBodySlack);
    body.assign(static_cast<const char*>(buffer.data().data()), buffer.size());
    buffer.consume(buffer.size());
    if (buffer.capacity() > 64 * 1024) buffer = beast::flat_buffer();  // a large message's room
    ++in_flight_;
    hub_.metrics_.in_flight(+1);
    asio::co_spawn(ws_.get_executor(), answer(shared_from_this(), std::move(body)), asio::detached);
  }
}

asio::awaitable<void> WsSession::answer(std::shared_ptr<WsSession> /*self: held*/,
                                        std::string body) {
  Handlers& handlers = hub_.handlers_;
  RpcJob job;
  Reply reply;
  Cancellation cancel;
  const auto started = steady_us();
  try {
    if (handlers.prepare_message(body, route_, reply, job)) {
      std::string().swap(body);  // the calls hold copies of what they need
      std::vector<CallOutcome> outs = co_await route_calls(job, cancel);
      if (!cancel.requested()) handlers.finish_rpc(job, outs, reply);
    } else if (reply.status != http::status::ok) {  // not JSON-RPC's own error: made one
      reply.body = jsonrpc::make_error("null", jsonrpc::kInvalidRequest, reply.body);
    }
  } catch (const std::exception& e) {
    log(fmt::format("internal error answering a message: {}", e.what()));
    reply.body = jsonrpc::make_error("null", jsonrpc::kInternalError,
                                     "internal error while answering this message");
  }
  if (hub_.config_.verbose && !cancel.requested()) {
    log(fmt::format("message {} provider={} attempts={} {:.2f}ms",
                    reply.rpc_method.empty() ? "-" : reply.rpc_method,
                    reply.provider.empty() ? "-" : reply.provider, reply.attempts,
                    static_cast<double>(steady_us() - started) / 1000.0));
  }
  if (!reply.body.empty() && !cancel.requested()) send(std::move(reply.body));
  --in_flight_;
  hub_.metrics_.in_flight(-1);
  slot_.cancel();
  close_when_done();
}

asio::awaitable<std::vector<CallOutcome>> WsSession::route_calls(RpcJob& job,
                                                                 Cancellation& cancel) {
  const std::span<const jsonrpc::Call> calls(job.parsed.calls.data(), job.routed);
  job.options.cancel = &cancel;
  routing_.insert(&cancel);
  std::vector<CallOutcome> outs;
  const bool any_subscription = std::any_of(
      calls.begin(), calls.end(), [](const auto& c) { return subscription_method(c.method); });
  if (job.shared) {  // a single read that may share a flight (coalesce.hpp), as over HTTP
    outs = co_await hub_.handlers_.coalescer().route(*job.rt->router, *job.chain, calls,
                                                     job.options, job.key, job.finality.head);
  } else if (!any_subscription) {
    outs = co_await job.rt->router->route(*job.chain, calls, job.options);
  } else {
    outs.resize(calls.size());
    std::vector<jsonrpc::Call> others;
    std::vector<std::size_t> where;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      if (subscription_method(calls[i].method) && calls[i].valid()) {
        outs[i] = co_await subscription_call(calls[i], job);
      } else {
        others.push_back(calls[i]);
        where.push_back(i);
      }
    }
    if (!others.empty()) {
      const std::span<const jsonrpc::Call> routed(others);
      std::vector<CallOutcome> answers =
          co_await job.rt->router->route(*job.chain, routed, job.options);
      for (std::size_t k = 0; k < answers.size(); ++k) outs[where[k]] = std::move(answers[k]);
    }
  }
  routing_.erase(&cancel);
  co_return outs;
}

asio::awaitable<CallOutcome> WsSession::subscription_call(const jsonrpc::Call& call, RpcJob& job) {
  WsSubscriptions& subscriptions = hub_.subscriptions_;
  if (call.method == "eth_unsubscribe") {
    CallOutcome o = subscriptions.unsubscribe(id_, call);
    if (o.result == "true") --subscriptions_;
    co_return o;
  }
  if (subscriptions_ >= hub_.config_.ws_max_subscriptions) {
    co_return subscription_refused(
        call, fmt::format("too many subscriptions on this connection (at most {})",
                          hub_.config_.ws_max_subscriptions));
  }
  ++subscriptions_;  // counted before the wait: a burst of subscribes cannot pass the limit
  WsSubscriptions::Listener listener;
  listener.sink = [weak = weak_from_this()](std::string message) {
    if (auto self = weak.lock()) self->send(std::move(message));
  };
  listener.ended = [weak = weak_from_this()](const std::string& reason) {
    if (auto self = weak.lock()) self->end(reason);
  };
  CallOutcome o =
      co_await subscriptions.subscribe(id_, job.rt, *job.chain, call, std::move(listener));
  if (o.result.empty()) --subscriptions_;
  co_return o;
}

void WsSession::send(std::string message) {
  if (closing_ || !ending_.empty()) return;
  const ServerConfig& config = hub_.config_;
  // One answer is always taken, however large (it is what the client asked for); past that, a
  // queue that grows is a client that does not read.
  if (!out_.empty() && (out_bytes_ + message.size() > config.ws_max_buffered ||
                        out_.size() >= config.ws_max_queued)) {
    close(websocket::close_code::policy_error,
          fmt::format("client is not reading: over {} bytes or {} answers waiting",
                      config.ws_max_buffered, config.ws_max_queued));
    return;
  }
  out_bytes_ += message.size();
  out_.push_back(std::move(message));
  if (!writing_) {
    writing_ = true;
    asio::co_spawn(ws_.get_executor(), write_loop(shared_from_this()), asio::detached);
  }
}

asio::awaitable<void> WsSession::write_loop(std::shared_ptr<WsSession> /*self: held*/) {
  while (!out_.empty()) {
    boost::system::error_code ec;
    co_await ws_.async_write(asio::buffer(out_.front()),
                             asio::redirect_error(asio::use_awaitable, ec));
    out_bytes_ -= out_.front().size();
    out_.pop_front();
    if (ec) {
      out_.clear();
      out_bytes_ = 0;
      closing_ = true;
    }
  }
  writing_ = false;
  close_when_done();
}

void WsSession::end(std::string reason) {
  if (closing_ || !ending_.empty()) return;
  // A close reason holds 123 bytes at most: the error notification before it has the whole why.
  ending_ = "no provider can serve a subscription of this connection";
  log(fmt::format("a subscription ended, closing with 1013: {}", reason));
  close_when_done();
}

void WsSession::close(websocket::close_code code, std::string reason) {
  if (closing_) return;
  closing_ = true;
  close_code_ = static_cast<int>(code);
  if (hub_.config_.verbose) log(fmt::format("closing {} {}", static_cast<int>(code), reason));
  for (auto* c : std::vector<Cancellation*>(routing_.begin(), routing_.end())) c->request();
  // The answer being written stays (Beast finishes its frame before the close frame); the others
  // are dropped.
  while (out_.size() > (writing_ ? 1U : 0U)) {
    out_bytes_ -= out_.back().size();
    out_.pop_back();
  }
  slot_.cancel();
  // A close frame's reason: 123 bytes at most.
  const websocket::close_reason why(
      code, beast::string_view(reason.data(), std::min<std::size_t>(reason.size(), 120)));
  asio::co_spawn(ws_.get_executor(), close_handshake(shared_from_this(), why), asio::detached);
}

asio::awaitable<void> WsSession::close_handshake(std::shared_ptr<WsSession> self,
                                                 websocket::close_reason reason) {
  // A client that reads nothing never lets the close frame out: its socket goes after a while.
  asio::steady_timer limit(ws_.get_executor(), kCloseLimit);
  limit.async_wait([weak = std::weak_ptr<WsSession>(self)](const boost::system::error_code& e) {
    if (auto s = weak.lock(); s && !e) s->close_socket();
  });
  boost::system::error_code ec;
  co_await ws_.async_close(reason, asio::redirect_error(asio::use_awaitable, ec));
  limit.cancel();
}

void WsSession::log(std::string_view what) const {
  fmt::print(stderr, "rpcroute: websocket {} {}: {}\n", remote_, route_.target.chain, what);
}

WsClients::WsClients(const ServerConfig& config, Handlers& handlers, Metrics& metrics)
    : config_(config),
      handlers_(handlers),
      metrics_(metrics),
      subscriptions_(config.max_body,
                     {[&handlers]() -> const HealthView& { return handlers.health(); },
                      [&metrics](std::size_t n) { metrics.websocket_upstream_subscriptions(n); },
                      [&handlers]() { return handlers.clock().now_ms(); }}) {}

void WsClients::start(tcp::socket socket, const Request& req, Route route, std::string remote) {
  http::request<http::empty_body> upgrade(req.method, req.target, static_cast<int>(req.version));
  for (const auto& [name, value] : req.fields()) upgrade.insert(name, value);
  auto session =
      std::make_shared<WsSession>(*this, std::move(socket), std::move(route), std::move(remote));
  sessions_.insert(session.get());
  asio::co_spawn(session->executor(), session->run(session, std::move(upgrade)), asio::detached);
}

void WsClients::going_away() {
  going_away_ = true;
  // A copy: a close may end a session (and take it out of the set) before this loop is done.
  const std::vector<WsSession*> sessions(sessions_.begin(), sessions_.end());
  for (auto* s : sessions) s->going_away();
}

void WsClients::close_all() {
  for (auto* s : sessions_) s->close_socket();
}

}  // namespace rpcroute::sidecar

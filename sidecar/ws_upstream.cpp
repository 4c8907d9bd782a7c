// A provider's WebSocket: connect, one writer, one reader that matches answers to calls and hands
// subscription events on.
#include "ws_upstream.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <boost/asio/ssl.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <charconv>
#include <chrono>
#include <deque>
#include <mutex>
#include <optional>
#include <variant>
#include <vector>

#include "native_tls.hpp"
#include "rpcroute/jsonrpc.hpp"
#include "ws_dial.hpp"

namespace rpcroute::sidecar {

namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
namespace ssl = asio::ssl;

namespace {

constexpr auto kConnectLimit = std::chrono::seconds(5);
constexpr auto kPingTimeout = std::chrono::seconds(20);
// A socket given up for a message over the limit: its closing handshake (1009) gets this long.
constexpr auto kTooBigCloseLimit = std::chrono::seconds(2);
// Read at most this much of a message at a time: its size is checked as it comes (and from each
// frame's header).
constexpr std::size_t kReadChunk = 64 * 1024;

using PlainWs = websocket::stream<tcp::socket>;
using TlsWs = websocket::stream<ssl::stream<tcp::socket>>;

/// Connects the link's socket and, for wss://, does the TLS handshake: empty, or why not (`step`
/// says where). A connect or TLS handshake that hangs (a black-holed address, a server that never
/// answers the ClientHello) ends with the socket after kConnectLimit.
template <class LinkT>
asio::awaitable<std::string> open_transport(asio::any_io_executor ex, std::shared_ptr<LinkT> link,
                                            const WsTarget& t, std::string& step) {
  boost::system::error_code ec;
  const auto found = endpoints_of(ex, t, ec);
  if (ec) co_return ec.message();
  auto timed_out = std::make_shared<bool>(false);
  asio::steady_timer limit(ex, kConnectLimit);
  limit.async_wait(
      [weak = std::weak_ptr<LinkT>(link), timed_out](const boost::system::error_code& e) {
        if (auto l = weak.lock(); l && !e) {
          *timed_out = true;
          boost::system::error_code ignored;
          l->socket().close(ignored);
        }
      });
  step = "connect";
  co_await asio::async_connect(link->socket(), found,
                               asio::redirect_error(asio::use_awaitable, ec));
  std::string why;  // a TLS failure's cause, else ec's message
  if (!ec && t.tls) {
    step = "tls";
    auto& tls = std::get<TlsWs>(link->ws).next_layer();
    co_await tls.async_handshake(ssl::stream_base::client,
                                 asio::redirect_error(asio::use_awaitable, ec));
    if (ec && !*timed_out) why = detail::tls_handshake_error(tls.native_handle(), ec);
  }
  limit.cancel();
  if (ec && *timed_out)
    co_return fmt::format("no {} within {} s", step == "tls" ? "TLS handshake" : step,
                          std::chrono::duration_cast<std::chrono::seconds>(kConnectLimit).count());
  if (ec && why.empty()) why = ec.message();
  co_return why;
}

/// The WebSocket handshake, the socket's bounds set first: empty, or why not. The upgrade request
/// carries the provider's headers (each replaces a field of the same name, User-Agent
/// included, but for the handshake's own); a declined upgrade's answer goes to `refusal`.
template <class LinkT>
asio::awaitable<std::string> ws_handshake(LinkT& link, const WsTarget& t,
                                          const std::vector<Header>& headers,
                                          WsUpstream::Refusal& refusal) {
  websocket::stream_base::timeout limits{};
  limits.handshake_timeout = kConnectLimit;
  limits.idle_timeout = kPingTimeout;
  limits.keep_alive_pings = true;
  const std::string host =
      t.host.find(':') != std::string::npos ? "[" + t.host + "]:" + t.port : t.host + ":" + t.port;
  boost::system::error_code ec;
  websocket::response_type response;
  co_await link.with([&](auto& ws) {
    ws.set_option(limits);
    // Names and values were checked when the profile was read (no line break, a token name).
    ws.set_option(websocket::stream_base::decorator([headers](websocket::request_type& request) {
      request.set(beast::http::field::user_agent, "rpcroute/0.1");  // as over HTTP
      for (const auto& h : headers) {
        if (!handshake_field(h.name)) request.set(h.name, h.value);
      }
    }));
    // The read loop bounds messages itself (max_message_): Beast's own bound would close with
    // 1009 and then wait for the provider's side of the closing handshake before the read ends.
    ws.read_message_max(0);
    ws.auto_fragment(false);
    ws.text(true);
    return ws.async_handshake(response, host, t.target,
                              asio::redirect_error(asio::use_awaitable, ec));
  });
  if (!ec) co_return std::string();
  if (ec == websocket::error::upgrade_declined) {
    // The provider answered, with something else than 101: its status says why (the body is the
    // provider's text: it goes to the router, which scrubs and cuts what it shows of it).
    refusal.status = response.result_int();
    if (auto it = response.find(beast::http::field::retry_after); it != response.end())
      refusal.retry_after = std::string(it->value());
    refusal.body = response.body().substr(0, WsUpstream::kMaxRefusalBody);
    co_return fmt::format("upgrade declined with HTTP {}", refusal.status);
  }
  // A TLS 1.3 server refuses a client certificate after the client's handshake: its alert comes
  // with the first read.
  if (t.tls) {
    if (auto alert = detail::tls_alert_message(ec); !alert.empty()) co_return alert;
  }
  co_return ec.message();
}

/// A link given up for a message over the limit: the closing handshake with 1009 ("message too
/// big"), which drains what the provider still sends, then the socket closes; within
/// kTooBigCloseLimit whatever the provider does.
template <class LinkT>
asio::awaitable<void> close_too_big(asio::any_io_executor ex, std::shared_ptr<LinkT> link) {
  asio::steady_timer limit(ex, kTooBigCloseLimit);
  limit.async_wait([weak = std::weak_ptr<LinkT>(link)](const boost::system::error_code& e) {
    if (auto l = weak.lock(); l && !e) {
      boost::system::error_code ignored;
      l->socket().close(ignored);
    }
  });
  boost::system::error_code ec;
  co_await link->with([&](auto& ws) {
    return ws.async_close(websocket::close_code::too_big,
                          asio::redirect_error(asio::use_awaitable, ec));
  });
  limit.cancel();
  boost::system::error_code ignored;
  link->socket().close(ignored);
}

}  // namespace

struct WsUpstream::Link {
  explicit Link(const asio::any_io_executor& ex) : ws(std::in_place_type<PlainWs>, ex) {}
  Link(const asio::any_io_executor& ex, ssl::context& context)
      : ws(std::in_place_type<TlsWs>, ex, context) {}
  std::variant<PlainWs, TlsWs> ws;
  std::deque<std::string> out;
  bool writing = false;
  bool alive = true;

  tcp::socket& socket() {
    return std::visit([](auto& w) -> tcp::socket& { return beast::get_lowest_layer(w); }, ws);
  }
  template <class F>
  decltype(auto) with(F&& f) {
    return std::visit(std::forward<F>(f), ws);
  }
};

struct WsUpstream::Pending {
  explicit Pending(const asio::any_io_executor& ex) : wake(ex) {}
  asio::steady_timer wake;
  std::optional<tl::expected<std::string, std::string>> answer;
};

WsUpstream::WsUpstream(asio::any_io_executor ex, const Provider& provider, std::size_t max_message,
                       OnEvent on_event, OnDrop on_drop)
    : ex_(std::move(ex)),
      provider_(provider),
      max_message_(max_message),
      on_event_(std::move(on_event)),
      on_drop_(std::move(on_drop)) {}

WsUpstream::~WsUpstream() { close(); }

void WsUpstream::close() {
  if (!link_) return;
  link_->alive = false;
  boost::system::error_code ignored;
  link_->socket().close(ignored);
  link_.reset();
}

asio::awaitable<bool> WsUpstream::connect(std::string& error, Refusal& refusal) {
  const auto target = parse_ws_url(provider_.ws_url);
  if (!target) {
    error = fmt::format("WebSocket to provider {} failed: its ws_url is not a ws:// or wss:// URL",
                        provider_.id);
    co_return false;
  }
  std::shared_ptr<Link> link;
  if (target->tls) {
    // The provider's tls: settings, through the native client's context builder; Asio's
    // ssl::context holds a reference of its own on the shared SSL_CTX.
    std::unique_lock<std::mutex> lock;
    const auto& context = ws_tls_contexts(lock).get(&provider_.tls);
    if (!context.error.empty()) {
      error = fmt::format("WebSocket to provider {} failed (tls): {}", provider_.id, context.error);
      co_return false;
    }
    SSL_CTX_up_ref(context.ctx);
    ssl::context shared(context.ctx);
    link = std::make_shared<Link>(ex_, shared);
    auto& tls = std::get<TlsWs>(link->ws).next_layer();
    detail::set_peer_host(tls.native_handle(), target->host, provider_.tls.insecure);
  } else {
    link = std::make_shared<Link>(ex_);
  }
  std::string step = "resolve";
  std::string why = co_await open_transport(ex_, link, *target, step);
  if (why.empty()) {
    step = "handshake";
    why = co_await ws_handshake(*link, *target, provider_.headers, refusal);
  }
  if (!why.empty()) {
    // Neither the URL nor its path (where a key may be) is named: the provider's id is.
    error = fmt::format("WebSocket to provider {} failed ({}): {}", provider_.id, step, why);
    co_return false;
  }
  link_ = link;
  asio::co_spawn(ex_, read_loop(link), asio::detached);
  co_return true;
}

// The connect runs on its own: whoever waits for it may give up (a request at the end of its
// attempt's time) while it goes on for the next.

struct WsUpstream::ConnectWait {
  explicit ConnectWait(const asio::any_io_executor& ex) : timer(ex) {}
  asio::steady_timer timer;
  bool ended = false;  // the connect waited for has ended, either way
};

void WsUpstream::start_connect() {
  if (link_ || connecting_) return;
  connecting_ = true;
  asio::co_spawn(ex_, connect_task(), asio::detached);
}

asio::awaitable<void> WsUpstream::connect_task() {
  std::string error;
  Refusal refusal;
  bool ok = false;
  try {
    ok = co_await connect(error, refusal);
  } catch (const std::exception& e) {  // bad_alloc: the waiters must still hear of the end
    error = fmt::format("WebSocket to provider {} failed: {}", provider_.id, e.what());
  }
  connecting_ = false;
  connect_error_ = ok ? std::string() : std::move(error);
  connect_refusal_ = ok ? Refusal{} : std::move(refusal);
  // Each waiter resumes later (a cancelled wait is posted), and then leaves the list itself.
  for (ConnectWait* wait : connect_waiters_) {
    wait->ended = true;
    wait->timer.cancel();
  }
}

asio::awaitable<WsUpstream::Opened> WsUpstream::wait_open(
    std::chrono::steady_clock::time_point deadline, Cancellation* cancel) {
  if (link_) co_return Opened::open;
  start_connect();
  ConnectWait wait(ex_);
  connect_waiters_.push_back(&wait);
  bool cancelled = false;
  if (cancel != nullptr) {
    cancel->on_request([&] {
      cancelled = true;
      wait.timer.cancel();
    });
  }
  wait.timer.expires_at(deadline);
  boost::system::error_code ignored;
  co_await wait.timer.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  if (cancel != nullptr) cancel->clear_hook();
  connect_waiters_.erase(std::find(connect_waiters_.begin(), connect_waiters_.end(), &wait));
  if (cancelled) co_return Opened::cancelled;
  if (link_) co_return Opened::open;
  co_return wait.ended ? Opened::failed : Opened::timeout;
}

std::string WsUpstream::connect_failure() const {
  return connect_error_.empty()
             ? fmt::format("provider {}'s WebSocket closed as it opened", provider_.id)
             : connect_error_;
}

asio::awaitable<tl::expected<std::string, std::string>> WsUpstream::call(std::string_view method,
                                                                         std::string_view params) {
  // One connection attempt at a time; the others wait for its outcome (the connect's own limits
  // bound the wait).
  if (!link_) {
    const Opened opened = co_await wait_open(std::chrono::steady_clock::time_point::max(), nullptr);
    if (opened != Opened::open) co_return tl::unexpected(connect_failure());
  }
  const auto id = next_id_++;
  Pending pending(ex_);
  pending_[id] = &pending;
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof digits, id).ptr;
  send(jsonrpc::make_call(std::string_view(digits, static_cast<std::size_t>(end - digits)), method,
                          params));
  pending.wake.expires_after(std::chrono::milliseconds(provider_.timeout_ms));
  boost::system::error_code ec;
  co_await pending.wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  pending_.erase(id);
  if (!pending.answer)
    co_return tl::unexpected(fmt::format("provider {} did not answer {} within {} ms", provider_.id,
                                         method, provider_.timeout_ms));
  co_return std::move(*pending.answer);
}

void WsUpstream::notify(std::string_view method, std::string_view params) {
  if (!link_) return;
  send(jsonrpc::make_call(std::to_string(next_id_++), method, params));
}

void WsUpstream::send(std::string message) {
  link_->out.push_back(std::move(message));
  if (!link_->writing) {
    link_->writing = true;
    asio::co_spawn(ex_, write_loop(link_), asio::detached);
  }
}

asio::awaitable<void> WsUpstream::write_loop(std::shared_ptr<Link> link) {
  while (link->alive && !link->out.empty()) {
    boost::system::error_code ec;
    co_await link->with([&](auto& ws) {
      return ws.async_write(asio::buffer(link->out.front()),
                            asio::redirect_error(asio::use_awaitable, ec));
    });
    link->out.pop_front();
    if (ec) break;
  }
  link->writing = false;
}

asio::awaitable<void> WsUpstream::read_loop(std::shared_ptr<Link> link) {
  beast::flat_buffer buffer;
  bool too_big = false;
  while (link->alive) {
    // A message a part at a time, never more than max_message_ + 1 bytes of it held.
    boost::system::error_code ec;
    const std::size_t room = max_message_ + 1 - buffer.size();
    co_await link->with([&](auto& ws) {
      return ws.async_read_some(buffer, std::min(room, kReadChunk),
                                asio::redirect_error(asio::use_awaitable, ec));
    });
    if (ec) break;
    if (!link->alive) break;
    // The rest of the frame being read is known from its header (at least that much is to come):
    // a message that cannot fit is refused now, not once it has all come.
    const std::size_t rest = link->with([](auto& ws) -> std::size_t {
      return ws.is_message_done() ? 0 : ws.read_size_hint(std::size_t{1});
    });
    if (buffer.size() > max_message_ || rest > max_message_ - buffer.size()) {
      too_big = true;
      break;
    }
    if (rest > 0) continue;
    dispatch(std::string_view(static_cast<const char*>(buffer.data().data()), buffer.size()));
    buffer.consume(buffer.size());
  }
  if (too_big) {
    // A drop at once: the subscriptions move on now, while this socket closes with 1009 behind
    // them (the provider's side of the handshake is not waited for).
    fmt::print(stderr,
               "rpcroute: websocket: provider {} sent a message over the {}-byte limit: closed "
               "with 1009, treated as dropped\n",
               provider_.id, max_message_);
    link->alive = false;
    const bool current = link_ == link;
    if (current) link_.reset();  // dropped() leaves the socket to close_too_big
    asio::co_spawn(ex_, close_too_big(ex_, link), asio::detached);
    if (current) dropped();
    co_return;
  }
  if (link_ == link) dropped();
}

void WsUpstream::dropped() {
  close();
  // The calls waiting for an answer end now, without one.
  for (auto& [id, p] : pending_) p->wake.cancel();
  if (on_drop_) on_drop_();
}

void WsUpstream::dispatch(std::string_view message) {
  if (!raw_ids_.empty() && deliver_raw(message)) return;  // a routed request's answer
  // An event: {"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":ID,
  // "result":R}}. Anything else is an answer to a call of ours, matched by id.
  static thread_local simdjson::ondemand::parser parser;
  const simdjson::padded_string text(message);
  auto doc = parser.iterate(text);
  std::string_view method;
  if (!doc.find_field_unordered("method").get_string().get(method) &&
      method == "eth_subscription") {
    simdjson::ondemand::object params;
    if (doc.find_field_unordered("params").get_object().get(params)) return;
    std::string_view id;
    if (params.find_field_unordered("subscription").get_string().get(id)) return;
    std::string copy_of_id(id);  // the string buffer is reused by the next field
    simdjson::ondemand::value value;
    simdjson::ondemand::json_type type;
    if (params.find_field_unordered("result").get(value) || value.type().get(type)) return;
    std::string_view result;
    if (type == simdjson::ondemand::json_type::object) {
      simdjson::ondemand::object o;
      if (value.get_object().get(o) || o.raw_json().get(result)) return;
    } else if (type == simdjson::ondemand::json_type::array) {
      simdjson::ondemand::array a;
      if (value.get_array().get(a) || a.raw_json().get(result)) return;
    } else {
      result = value.raw_json_token();  // a scalar (a transaction hash): its token as sent
    }
    while (!result.empty() && (result.back() == ' ' || result.back() == '\n'))
      result.remove_suffix(1);
    on_event_(copy_of_id, result);
    return;
  }
  auto parsed = jsonrpc::parse_response(message);
  if (!parsed) return;
  for (const auto& reply : parsed->replies) {
    std::uint64_t id = 0;
    const auto [ptr, err] = std::from_chars(reply.id.data(), reply.id.data() + reply.id.size(), id);
    if (err != std::errc()) continue;
    auto it = pending_.find(id);
    if (it == pending_.end()) continue;
    if (reply.result)
      it->second->answer = std::string(*reply.result);
    else
      it->second->answer = tl::unexpected(reply.error ? reply.error->message : "no result");
    it->second->wake.cancel();
  }
}

// Single requests routed over the socket (issue 18): the whole answer goes back to the router,
// which classifies it as it does an HTTP body.

bool WsUpstream::deliver_raw(std::string_view message) {
  // Only a single answer whose id is exactly one of ours (the plain decimal token) is taken; the
  // router checks the id again, with the rest of the answer.
  static thread_local simdjson::ondemand::parser parser;
  const simdjson::padded_string text(message);
  simdjson::ondemand::document doc;
  if (parser.iterate(text).get(doc)) return false;
  simdjson::ondemand::object object;
  if (doc.get_object().get(object)) return false;
  simdjson::ondemand::value value;
  if (object.find_field_unordered("id").get(value)) return false;
  std::string_view token = value.raw_json_token();
  while (!token.empty() && (token.back() == ' ' || token.back() == '\n' || token.back() == '\r' ||
                            token.back() == '\t'))
    token.remove_suffix(1);
  std::uint64_t id = 0;
  const auto [end, err] = std::from_chars(token.data(), token.data() + token.size(), id);
  if (err != std::errc() || end != token.data() + token.size()) return false;
  auto raw = raw_ids_.find(id);
  if (raw == raw_ids_.end()) return false;
  auto it = pending_.find(id);
  if (it == pending_.end()) return false;
  raw->second = true;  // delivered whole
  it->second->answer = std::string(message);
  it->second->wake.cancel();
  return true;
}

asio::awaitable<bool> WsUpstream::open_for_request(RawAnswer& out,
                                                   std::chrono::steady_clock::time_point deadline,
                                                   std::int64_t timeout_ms, Cancellation* cancel) {
  using Status = RawAnswer::Status;
  if (cancel != nullptr && cancel->requested()) {
    out.status = Status::cancelled;
    out.error = "cancelled";
    co_return false;
  }
  if (link_) co_return true;
  // The wait ends with the attempt's time: a silent or black-holed port costs the request no more
  // than its timeout, whatever the connect's own limits (the connect goes on for the next one).
  const auto start = std::chrono::steady_clock::now();
  const Opened opened = co_await wait_open(deadline, cancel);
  out.connect_us = std::chrono::duration_cast<std::chrono::microseconds>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  switch (opened) {
    case Opened::open:
      co_return true;
    case Opened::cancelled:
      out.status = Status::cancelled;
      out.error = "cancelled";
      break;
    case Opened::timeout:
      out.status = Status::timeout;
      out.error = fmt::format("provider {}'s WebSocket did not open within the attempt's {} ms",
                              provider_.id, timeout_ms);
      break;
    case Opened::failed:
      if (connect_error_.empty()) {  // it opened, and dropped before this request resumed
        out.status = Status::closed;
        out.error = connect_failure();
      } else {
        out.status = Status::connect_failed;
        out.error = connect_error_;
        out.refusal = connect_refusal_;
      }
      break;
  }
  co_return false;
}

asio::awaitable<WsUpstream::RawAnswer> WsUpstream::request(std::uint64_t id, std::string message,
                                                           std::int64_t timeout_ms,
                                                           Cancellation* cancel) {
  using Status = RawAnswer::Status;
  RawAnswer out;
  const auto start = std::chrono::steady_clock::now();
  if (pending_.count(id) != 0) {
    out.status = Status::id_in_use;
    out.error =
        fmt::format("request id {} already waits on provider {}'s WebSocket", id, provider_.id);
    co_return out;
  }
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  if (!co_await open_for_request(out, deadline, timeout_ms, cancel)) co_return out;
  if (cancel != nullptr && cancel->requested()) {  // its hook went with the wait
    out.status = Status::cancelled;
    out.error = "cancelled";
    co_return out;
  }
  if (std::chrono::steady_clock::now() >= deadline) {
    out.status = Status::timeout;
    out.error = fmt::format("provider {} did not answer within {} ms (WebSocket)", provider_.id,
                            timeout_ms);
    co_return out;
  }
  if (!link_) {  // it dropped while this request waited for another's connect
    out.status = Status::closed;
    out.error = fmt::format("provider {}'s WebSocket closed before the request", provider_.id);
    co_return out;
  }
  Pending pending(ex_);
  pending_[id] = &pending;
  raw_ids_[id] = false;
  bool cancelled = false;
  if (cancel != nullptr) {
    cancel->on_request([&] {
      cancelled = true;
      pending.wake.cancel();
    });
  }
  send(std::move(message));
  pending.wake.expires_at(deadline);
  boost::system::error_code ec;
  co_await pending.wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  if (cancel != nullptr) cancel->clear_hook();
  pending_.erase(id);
  const bool whole = raw_ids_[id];
  raw_ids_.erase(id);
  if (whole && pending.answer && pending.answer->has_value()) {
    out.message = std::move(**pending.answer);
  } else if (pending.answer) {  // matched loosely by the subscription reader ("7.0" for 7)
    out.status = Status::bad_answer;
    out.error =
        fmt::format("provider {} answered over WebSocket with an id not as sent", provider_.id);
  } else if (cancelled) {
    out.status = Status::cancelled;
    out.error = "cancelled";
  } else if (ec == asio::error::operation_aborted) {  // woken without an answer: the socket went
    out.status = Status::closed;
    out.error = fmt::format("provider {}'s WebSocket closed before the answer", provider_.id);
  } else {
    out.status = Status::timeout;
    out.error = fmt::format("provider {} did not answer within {} ms (WebSocket)", provider_.id,
                            timeout_ms);
  }
  co_return out;
}

}  // namespace rpcroute::sidecar

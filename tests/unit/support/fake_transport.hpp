#pragma once
// A scripted Transport for unit tests of routing: no sockets, answers decided per URL by a
// handler, optionally after a delay on the io_context's timer, and every request logged.
//
//   asio::io_context io;
//   test::FakeTransport transport(io);
//   transport.on("http://a", test::FakeTransport::results("\"0x10\""));
//   transport.on("http://b", test::FakeTransport::status(503), 50);  // answers after 50 ms
//   Router router(profile, transport, store, clock, rng);
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <simdjson.h>

#include "rpcroute/asio_compat.hpp"
#include "rpcroute/clock.hpp"
#include "rpcroute/transport.hpp"

namespace rpcroute::test {

class FakeTransport final : public Transport {
 public:
  /// What a handler sees of one call in the request: its upstream id (raw JSON), method, params.
  struct Call {
    std::string id;
    std::string method;
    std::string params;
  };
  using Handler = std::function<HttpResponse(const HttpRequest&, const std::vector<Call>&)>;

  struct Sent {
    std::string url;
    std::string body;
    std::vector<Call> calls;
    std::int64_t timeout_ms = 0;
  };

  /// With a FakeClock, a delay also advances it (wall and monotonic time), so that deadlines and
  /// latency figures see the delay without the test sleeping long.
  explicit FakeTransport(asio::io_context& io, FakeClock* clock = nullptr) : io_(io), clock_(clock) {}

  /// Requests to `url` are answered by `handler` after `delay_ms`. A delay beyond the request's
  /// timeout ends the request with TransportError::timeout at the timeout. URLs without a handler
  /// fail with TransportError::connect.
  void on(std::string url, Handler handler, std::int64_t delay_ms = 0) {
    routes_[std::move(url)] = Route{std::move(handler), delay_ms};
  }

  [[nodiscard]] asio::awaitable<HttpResponse> perform(HttpRequest request) override {
    Sent sent{request.url, request.body, parse_calls(request.body), request.timeout_ms};
    log.push_back(sent);
    auto it = routes_.find(request.url);
    if (it == routes_.end()) {
      HttpResponse r;
      r.error = TransportError::connect;
      r.error_message = "connection refused";
      co_return r;
    }
    const Route& route = it->second;
    const bool times_out = route.delay_ms > request.timeout_ms;
    const std::int64_t wait_ms = times_out ? request.timeout_ms : route.delay_ms;
    if (wait_ms > 0) {
      if (clock_ != nullptr) clock_->advance(wait_ms);
      asio::steady_timer timer(io_, std::chrono::milliseconds(clock_ != nullptr ? 0 : wait_ms));
      // Like the real clients: a cancellation ends the wait at once.
      if (request.cancel != nullptr) request.cancel->on_request([&timer] { timer.cancel(); });
      boost::system::error_code ec;
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      if (request.cancel != nullptr) request.cancel->clear_hook();
    }
    if (request.cancel != nullptr && request.cancel->requested()) {
      ++cancelled;
      HttpResponse r;
      r.error = TransportError::cancelled;
      co_return r;
    }
    if (times_out) {
      HttpResponse r;
      r.error = TransportError::timeout;
      r.error_message = "timed out";
      r.latency_us = wait_ms * 1000;
      co_return r;
    }
    HttpResponse r = route.handler(request, sent.calls);
    r.latency_us = std::max<std::int64_t>(wait_ms * 1000, 1);
    co_return r;
  }

  void close_connection(const ConnectionRef&) override { ++closed; }

  /// How many requests went to `url`.
  [[nodiscard]] std::size_t count(std::string_view url) const {
    std::size_t n = 0;
    for (const auto& s : log) n += s.url == url;
    return n;
  }

  // Handlers for the usual answers. Each call of a request gets its own reply, with its id.

  /// Every call answered with `result` (raw JSON).
  static Handler results(std::string result) {
    return [result = std::move(result)](const HttpRequest&, const std::vector<Call>& calls) {
      return reply(calls, [&](const Call&) { return fmt::format("\"result\":{}", result); });
    };
  }
  /// Every call answered with the JSON-RPC error {code, message}.
  static Handler rpc_error(int code, std::string message) {
    return [code, message = std::move(message)](const HttpRequest&, const std::vector<Call>& calls) {
      return reply(calls, [&](const Call&) {
        return fmt::format(R"("error":{{"code":{},"message":"{}"}})", code, message);
      });
    };
  }
  /// An HTTP status with a small non-JSON-RPC body.
  static Handler status(long code, std::string body = "{}") {
    return [code, body = std::move(body)](const HttpRequest&, const std::vector<Call>&) {
      HttpResponse r;
      r.status = code;
      r.body = body;
      return r;
    };
  }
  /// A failure below HTTP (reset, truncated...).
  static Handler transport_error(TransportError error) {
    return [error](const HttpRequest&, const std::vector<Call>&) {
      HttpResponse r;
      r.error = error;
      r.error_message = "scripted transport error";
      return r;
    };
  }
  /// A 200 answer whose calls get `member(call)` ("\"result\":..." or "\"error\":{...}") each, as
  /// an object for one call and a batch for several.
  static HttpResponse reply(const std::vector<Call>& calls, const std::function<std::string(const Call&)>& member) {
    HttpResponse r;
    r.status = 200;
    if (calls.size() != 1) r.body.push_back('[');
    for (std::size_t i = 0; i < calls.size(); ++i) {
      if (i > 0) r.body.push_back(',');
      r.body += fmt::format(R"({{"jsonrpc":"2.0","id":{},{}}})", calls[i].id, member(calls[i]));
    }
    if (calls.size() != 1) r.body.push_back(']');
    return r;
  }

  /// The calls of an upstream body: one object or a batch.
  static std::vector<Call> parse_calls(std::string_view body) {
    std::vector<Call> calls;
    simdjson::dom::parser parser;
    simdjson::dom::element doc;
    if (parser.parse(body.data(), body.size()).get(doc)) return calls;
    auto one = [&](simdjson::dom::element e) {
      Call c;
      simdjson::dom::element v;
      if (!e["id"].get(v)) c.id = simdjson::minify(v);
      std::string_view m;
      if (!e["method"].get(m)) c.method = std::string(m);
      c.params = e["params"].get(v) ? "[]" : simdjson::minify(v);
      calls.push_back(std::move(c));
    };
    if (doc.is_array()) {
      for (auto e : doc.get_array()) one(e);
    } else {
      one(doc);
    }
    return calls;
  }

  std::vector<Sent> log;
  std::size_t closed = 0;
  std::size_t cancelled = 0;  // requests that ended cancelled

 private:
  struct Route {
    Handler handler;
    std::int64_t delay_ms = 0;
  };
  asio::io_context& io_;
  FakeClock* clock_;
  std::map<std::string, Route, std::less<>> routes_;
};

}  // namespace rpcroute::test

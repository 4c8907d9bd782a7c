// Single requests over providers' WebSockets (issue 18): see ws_transport.hpp.
#include "ws_transport.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <optional>

#include "ws_upstream.hpp"

namespace rpcroute::sidecar {

namespace {

/// The id of a single JSON-RPC request as the router writes it (a plain unsigned integer), or
/// nullopt.
std::optional<std::uint64_t> ws_request_id(const std::string& body) {
  static thread_local simdjson::ondemand::parser parser;
  const simdjson::padded_string text(body);
  simdjson::ondemand::document doc;
  if (parser.iterate(text).get(doc)) return std::nullopt;
  simdjson::ondemand::object object;
  if (doc.get_object().get(object)) return std::nullopt;
  std::uint64_t id = 0;
  if (object.find_field_unordered("id").get_uint64().get(id)) return std::nullopt;
  return id;
}

TransportError ws_transport_error(const WsUpstream::RawAnswer& a) {
  using Status = WsUpstream::RawAnswer::Status;
  switch (a.status) {
    case Status::ok:
      return TransportError::none;
    case Status::connect_failed:
      // WsUpstream names the step that failed: "(resolve)", "(connect)", "(tls)", "(handshake)".
      if (a.error.find("(tls)") != std::string::npos) return TransportError::tls;
      if (a.error.find("(resolve)") != std::string::npos) return TransportError::dns;
      return TransportError::connect;
    case Status::closed:
      return TransportError::reset;
    case Status::timeout:
      return TransportError::timeout;
    case Status::cancelled:
      return TransportError::cancelled;
    case Status::id_in_use:
    case Status::bad_answer:
      return TransportError::other;
  }
  return TransportError::other;
}

}  // namespace

struct WsTransport::Socket {
  Provider provider;  // a copy: a reload may replace the profile while the socket lives
  std::unique_ptr<WsUpstream> upstream;
};

WsTransport::WsTransport() = default;
WsTransport::~WsTransport() = default;

asio::awaitable<HttpResponse> WsTransport::perform(HttpRequest request) {
  HttpResponse out;
  const auto start = std::chrono::steady_clock::now();
  const auto id = ws_request_id(request.body);
  if (request.provider == nullptr || !id) {
    out.error = TransportError::other;
    out.error_message =
        "the WebSocket transport takes single calls with the router's numeric ids, for a provider";
    co_return out;
  }
  auto& socket = sockets_[{request.provider->id, request.url}];
  if (!socket) {
    socket = std::make_unique<Socket>();
    socket->provider = *request.provider;
    socket->provider.ws_url = request.url;
    // The socket's message bound: the default response cap or this request's, if larger (a later
    // request with a lower cap is held to it below).
    const auto bound = std::max(request.max_response_bytes, kDefaultMaxResponseBytes);
    const asio::any_io_executor ex = co_await asio::this_coro::executor;
    socket->upstream = std::make_unique<WsUpstream>(
        ex, socket->provider, static_cast<std::size_t>(bound),
        [](std::string_view, std::string_view) {}, nullptr);
  }
  // Sockets are never erased: `socket` stays valid across the wait (std::map nodes do not move).
  WsUpstream::RawAnswer answer = co_await socket->upstream->request(
      *id, std::move(request.body), request.timeout_ms, request.cancel);
  out.latency_us = std::chrono::duration_cast<std::chrono::microseconds>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  out.connect_us = answer.connect_us;
  if (answer.status == WsUpstream::RawAnswer::Status::connect_failed &&
      answer.refusal.status >= 300) {
    // The provider declined the upgrade with an HTTP answer (401: a key missing or wrong; 429:
    // too many sockets): classified as that answer over HTTP would be, its Retry-After included.
    // (A 1xx or 2xx that is not an upgrade is no such answer: a connect failure, below.)
    out.status = answer.refusal.status;
    out.retry_after = std::move(answer.refusal.retry_after);
    out.body = std::move(answer.refusal.body);
    out.body.reserve(out.body.size() + kBodySlack);
    co_return out;
  }
  out.error = ws_transport_error(answer);
  if (out.error != TransportError::none) {
    out.error_message = std::move(answer.error);
    co_return out;
  }
  if (answer.message.size() > request.max_response_bytes) {
    out.error = TransportError::too_large;
    out.error_message = fmt::format("answer of {} bytes over the cap of {} bytes (WebSocket)",
                                    answer.message.size(), request.max_response_bytes);
    co_return out;
  }
  out.status = 200;  // an answer message: classified as an HTTP body is
  out.body = std::move(answer.message);
  out.body.reserve(out.body.size() + kBodySlack);
  co_return out;
}

bool SplitTransport::websocket_url(std::string_view url) {
  auto starts = [&](std::string_view scheme) {
    return url.size() >= scheme.size() &&
           std::equal(scheme.begin(), scheme.end(), url.begin(), [](char a, char b) {
             return a == static_cast<char>(std::tolower(static_cast<unsigned char>(b)));
           });
  };
  return starts("ws://") || starts("wss://");
}

asio::awaitable<HttpResponse> SplitTransport::perform(HttpRequest request) {
  // Named locals: g++ 12 destroys temporaries inside a co_await expression twice.
  if (websocket_url(request.url)) {
    HttpResponse answer = co_await ws_.perform(std::move(request));
    co_return answer;
  }
  HttpResponse answer = co_await http_.perform(std::move(request));
  co_return answer;
}

}  // namespace rpcroute::sidecar

#pragma once
// What the steps of the native client share (native_http.cpp reads and writes answers,
// native_connect.cpp opens connections): a pooled connection, the transfer's deadline and state.
// Internal to the transport.
#include <fmt/format.h>

#include <algorithm>
#include <boost/beast/core/flat_buffer.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "native_http.hpp"
#include "native_tls.hpp"
#include "rpcroute/clock.hpp"

namespace rpcroute::detail {

namespace beast = boost::beast;
using tcp = asio::ip::tcp;

struct NativeHttp::Conn {
  Conn(asio::io_context& io, std::uint64_t serial) : socket(io), serial(serial) {}
  tcp::socket socket;
  SslPtr ssl;  // over https: OpenSSL on the socket's descriptor (freed before the socket closes it)
  beast::flat_buffer buffer;
  std::int64_t idle_since_us = 0;
  std::uint64_t serial;  // names it in a ConnectionRef
  std::string tls_out;   // over https: the request head and body, written as one TLS record
};

/// One deadline for a whole transfer (shorter while connecting, like curl's CONNECTTIMEOUT): it
/// cancels whatever socket operation is pending. Shared, so a late handler never touches a frame.
struct Deadline {
  explicit Deadline(asio::io_context& io) : timer(io) {}
  asio::steady_timer timer;
  tcp::socket* socket = nullptr;  // the socket to cancel, while an operation may be pending on it
  asio::steady_timer* waiting = nullptr;  // a wait to cut short (a name being resolved)
  bool fired = false;
  bool cancelled = false;  // fired by the caller's Cancellation, not the clock
  std::uint64_t generation = 0;

  void stop() {
    fired = true;
    if (socket != nullptr) {
      boost::system::error_code ignored;
      socket->cancel(ignored);
    }
    if (waiting != nullptr) waiting->cancel();
  }
};

/// (Re)arms the deadline; a handler of an earlier arming does nothing.
inline void arm(const std::shared_ptr<Deadline>& deadline,
                std::chrono::steady_clock::time_point at) {
  deadline->timer.expires_at(at);
  const auto generation = ++deadline->generation;
  deadline->timer.async_wait([d = deadline, generation](const boost::system::error_code& ec) {
    if (ec || d->generation != generation) return;
    d->stop();
  });
}

/// What the steps of one perform() share: the request and its head, the answer being built, the
/// clock and the deadline. It lives in perform's frame.
struct Transfer {
  Transfer(asio::io_context& io, const HttpRequest& request, const NativeHttp::Target& target)
      : request(request),
        target(target),
        start_point(std::chrono::steady_clock::now()),
        started(
            std::chrono::duration_cast<std::chrono::microseconds>(start_point.time_since_epoch())
                .count()),
        timeout_ms(std::max<std::int64_t>(1, request.timeout_ms)),
        connect_timeout_ms(std::clamp<std::int64_t>(request.timeout_ms, 1, 5'000)),
        head(request_head(target, request)),
        deadline(std::make_shared<Deadline>(io)) {
    // Cancelled: stop like at the deadline (the connection is not given back), report cancelled.
    if (request.cancel != nullptr) {
      request.cancel->on_request([d = deadline] {
        d->cancelled = true;
        d->stop();
      });
    }
    arm(deadline, start_point + std::chrono::milliseconds(timeout_ms));
  }

  /// The target's head, the extra headers and Content-Length.
  static std::string request_head(const NativeHttp::Target& target, const HttpRequest& request) {
    std::string head;
    head.reserve(target.head.size() + 40 +
                 (request.headers != nullptr ? request.headers->size() * 64 : 0));
    head = target.head;
    if (request.headers != nullptr) {
      for (const auto& h : *request.headers) {
        head += h.name;
        head += ": ";
        head += h.value;
        head += "\r\n";
      }
    }
    head += "Content-Length: ";
    head += std::to_string(request.body.size());
    head += "\r\n\r\n";
    return head;
  }

  void fail(TransportError error, std::string message) {
    r.error = error;
    r.error_message = std::move(message);
  }
  void too_large() {
    fail(TransportError::too_large,
         fmt::format("answer larger than the response cap ({} bytes)", request.max_response_bytes));
  }
  void timed_out(std::size_t received) {
    fail(TransportError::timeout,
         fmt::format("Operation timed out after {} milliseconds with {} bytes received",
                     (steady_us() - started) / 1000, received));
  }

  /// The answer, once the transfer is over: the deadline and the cancellation hook let go.
  HttpResponse done() {
    deadline->socket = nullptr;
    deadline->timer.cancel();
    if (request.cancel != nullptr) request.cancel->clear_hook();
    if (deadline->cancelled && r.error != TransportError::none) {
      r.error = TransportError::cancelled;
      r.error_message = "cancelled";
    }
    r.latency_us = steady_us() - started;
    return std::move(r);
  }

  const HttpRequest& request;
  const NativeHttp::Target& target;
  HttpResponse r;
  const std::chrono::steady_clock::time_point start_point;  // read once: `started` is the same
  const std::int64_t started;                               // instant in microseconds
  const std::int64_t timeout_ms;
  const std::int64_t connect_timeout_ms;
  const std::string head;
  const std::shared_ptr<Deadline> deadline;
};

/// Addresses of host names, kept for a minute like curl's DNS cache (getaddrinfo gives no TTL):
/// a new connection to a named provider does not wait on the resolver each time. Names are looked
/// up by glibc's getaddrinfo_a (its own thread), polled from the event loop: the loop runs without
/// Asio's locks (BOOST_ASIO_CONCURRENCY_HINT_UNSAFE), so no other thread may post to it, which
/// rules out Asio's resolver.
class NameCache {
 public:
  NameCache();
  ~NameCache();
  NameCache(const NameCache&) = delete;
  NameCache& operator=(const NameCache&) = delete;

  /// The addresses of host:port, from the cache while fresh, else asked of the system (cut short
  /// by the transfer's deadline). Empty, the Transfer holding the error, when the name does not
  /// resolve.
  asio::awaitable<std::vector<tcp::endpoint>> resolve(Transfer& t);

 private:
  struct Lookup;
  struct Entry {
    std::vector<tcp::endpoint> endpoints;
    std::int64_t expires_us = 0;
  };
  void reap();

  std::unordered_map<std::string, Entry> entries_;  // by "host:port"
  std::vector<std::unique_ptr<Lookup>> abandoned_;  // cut short while glibc still works on them
};

/// Opens a new connection for the transfer under the connect deadline: the name resolved (or the
/// literal address), each address tried in turn, and over https the TLS handshake. False, the
/// Transfer holding the error, when it fails.
asio::awaitable<bool> open_connection(NativeHttp::Conn& conn, Transfer& t, NameCache& names,
                                      TlsContexts& tls);

}  // namespace rpcroute::detail

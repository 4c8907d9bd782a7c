#include "native_http.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <optional>

#include <sys/socket.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <fmt/format.h>

#include "rpcroute/clock.hpp"
#include "rpcroute/edge_read.hpp"
#include "rpcroute/http1.hpp"

namespace rpcroute::detail {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr std::size_t kMaxIdle = 256;                 // like curl's CURLMOPT_MAXCONNECTS
constexpr std::int64_t kMaxIdleUs = 60'000'000;       // older idle connections are not reused
constexpr std::size_t kReadChunk = 16 * 1024;         // like curl's receive buffer
constexpr std::size_t kLargeReadChunk = 256 * 1024;   // once a large body is on its way
constexpr std::uint64_t kReserveLimit = std::uint64_t{1} << 31;
constexpr std::uint64_t kReserveUpFront = std::uint64_t{256} << 20;  // reserved before any byte arrives
constexpr std::size_t kHeaderLimit = 64 * 1024;

bool iequals(std::string_view a, std::string_view b);

/// Beast's HTTP/1.1 response parser (status line, framing, chunked bodies, limits) keeping only
/// what the router reads: the status, Retry-After and the body. The body is one std::string,
/// reserved once from Content-Length with kBodySlack on top, so that the answer is parsed in place
/// and never copied to grow; no header field is stored (response_parser would allocate each one).
class ResponseReader final : public bhttp::basic_parser<false> {
 public:
  int status = 0;
  std::string retry_after;  // the first Retry-After, trimmed
  std::string body;
  bool encoded = false;     // a Content-Encoding other than identity (which is all we ask for)

 private:
  void on_request_impl(bhttp::verb, beast::string_view, beast::string_view, int, beast::error_code&) override {}
  void on_response_impl(int code, beast::string_view, int, beast::error_code&) override { status = code; }
  void on_field_impl(bhttp::field name, beast::string_view, beast::string_view value, beast::error_code&) override {
    if (name == bhttp::field::content_encoding) {
      std::string_view v(value.data(), value.size());
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
      while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
      if (!v.empty() && !iequals(v, "identity")) encoded = true;
      return;
    }
    if (name != bhttp::field::retry_after || seen_retry_after_) return;
    seen_retry_after_ = true;
    std::string_view v(value.data(), value.size());
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    retry_after.assign(v);
  }
  void on_header_impl(beast::error_code& ec) override {
    // A coded success is refused before its body is read: no decoder ever inflates a provider's
    // bytes. An error status keeps its meaning (a 429 is still a rate limit); its body is dropped.
    if (encoded && status >= 200 && status <= 299) ec = bhttp::error::bad_transfer_encoding;
  }
  void on_body_init_impl(const boost::optional<std::uint64_t>& length, beast::error_code&) override {
    // Reserved once, up to a bound: a claimed length beyond it grows as the bytes arrive.
    if (length) {
      const auto want = static_cast<std::size_t>(std::min(*length, kReserveUpFront)) + kBodySlack;
      check_body_capacity(want);
      body.reserve(want);
    }
  }
  std::size_t on_body_impl(beast::string_view piece, beast::error_code&) override { return append(piece); }
  void on_chunk_header_impl(std::uint64_t, beast::string_view, beast::error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, beast::string_view piece, beast::error_code&) override {
    return append(piece);
  }
  void on_finish_impl(beast::error_code&) override {}

  std::size_t append(beast::string_view piece) {
    const auto old = body.size();
    if (old + piece.size() + kBodySlack > body.capacity()) {
      const auto want = std::max(body.capacity() * 2, old + piece.size() + kBodySlack);
      check_body_capacity(want);
      body.reserve(want);
    }
    body.append(piece.data(), piece.size());
    return piece.size();
  }

  bool seen_retry_after_ = false;
};

std::size_t test_body_limit() {
  static const std::size_t limit = [] {
    const char* v = std::getenv("RPCROUTE_TEST_ALLOC_LIMIT");
    if (v == nullptr || *v == '\0') return std::numeric_limits<std::size_t>::max();
    std::size_t n = 0;
    auto [p, ec] = std::from_chars(v, v + std::strlen(v), n);
    return ec == std::errc() && *p == '\0' ? n : std::numeric_limits<std::size_t>::max();
  }();
  return limit;
}

bool proxy_configured() {
  // curl reads http_proxy (lower case only, for http://), all_proxy and ALL_PROXY: with any of them
  // set, every request stays with curl so the proxy is honoured exactly as before.
  for (const char* name : {"http_proxy", "all_proxy", "ALL_PROXY"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return true;
  }
  return false;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

bool clean_header_text(std::string_view s) { return s.find_first_of("\r\n") == std::string_view::npos; }

}  // namespace

void check_body_capacity(std::size_t bytes) {
  if (bytes > test_body_limit()) throw std::bad_alloc();
}

struct NativeHttp::Target {
  std::vector<tcp::endpoint> endpoints;
  std::string host;  // for messages
  std::uint16_t port = 80;
  std::string key;   // pool key: "host:port"
  std::string head;  // "POST path HTTP/1.1\r\nHost: …\r\n…" without Content-Length and extra headers
};

struct NativeHttp::Conn {
  Conn(asio::io_context& io, std::uint64_t serial) : socket(io), serial(serial) {}
  tcp::socket socket;
  beast::flat_buffer buffer;
  std::int64_t idle_since_us = 0;
  std::uint64_t serial;  // names it in a ConnectionRef
};

NativeHttp::NativeHttp(asio::io_context& io) : io_(io) {
  enabled_ = !proxy_configured();
  if (const char* v = std::getenv("RPCROUTE_HTTP_CLIENT"); v != nullptr && std::string_view(v) == "curl") enabled_ = false;
}

NativeHttp::~NativeHttp() { close_idle(); }

void NativeHttp::close_idle() {
  for (auto& [key, conns] : idle_) {
    for (auto& c : conns) {
      boost::system::error_code ec;
      c->socket.close(ec);
    }
  }
  idle_.clear();
  idle_count_ = 0;
}

std::shared_ptr<const NativeHttp::Target> NativeHttp::target_for(const HttpRequest& request) {
  if (!enabled_) return nullptr;
  if (request.headers != nullptr) {
    for (const auto& h : *request.headers) {
      if (!clean_header_text(h.name) || !clean_header_text(h.value)) return nullptr;
    }
  }
  if (auto it = targets_.find(request.url); it != targets_.end()) return it->second;
  if (targets_.size() > 4096) targets_.clear();
  auto parse = [&]() -> std::shared_ptr<const Target> {
    std::string_view url = request.url;
    constexpr std::string_view scheme = "http://";
    if (url.size() <= scheme.size() || !iequals(url.substr(0, scheme.size()), scheme)) return nullptr;
    url.remove_prefix(scheme.size());
    const auto authority_end = url.find_first_of("/?#");
    std::string_view authority = url.substr(0, authority_end);
    std::string_view rest = authority_end == std::string_view::npos ? std::string_view() : url.substr(authority_end);
    if (authority.empty() || authority.find('@') != std::string_view::npos) return nullptr;
    if (auto hash = rest.find('#'); hash != std::string_view::npos) rest = rest.substr(0, hash);
    for (char c : rest) {
      if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f) return nullptr;
    }
    std::string path = rest.empty() || rest.front() == '?' ? "/" + std::string(rest) : std::string(rest);
    std::string_view host;
    std::string_view port_text;
    if (authority.front() == '[') {
      const auto close = authority.find(']');
      if (close == std::string_view::npos) return nullptr;
      host = authority.substr(1, close - 1);
      auto after = authority.substr(close + 1);
      if (!after.empty()) {
        if (after.front() != ':') return nullptr;
        port_text = after.substr(1);
      }
    } else {
      const auto colon = authority.find(':');
      host = authority.substr(0, colon);
      if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
    }
    unsigned port = 80;
    if (!port_text.empty()) {
      auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
      if (ec != std::errc() || p != port_text.data() + port_text.size() || port == 0 || port > 65535) return nullptr;
    }
    auto target = std::make_shared<Target>();
    boost::system::error_code ec;
    auto address = asio::ip::make_address(std::string(host), ec);
    if (!ec) {
      if (address.is_v6() && address.to_v6().scope_id() != 0) return nullptr;
      target->endpoints.emplace_back(address, static_cast<std::uint16_t>(port));
    } else if (iequals(host, "localhost")) {
      // curl tries both; an IPv4-only node is the common case.
      target->endpoints.emplace_back(asio::ip::make_address_v4("127.0.0.1"), static_cast<std::uint16_t>(port));
      target->endpoints.emplace_back(asio::ip::make_address_v6("::1"), static_cast<std::uint16_t>(port));
    } else {
      return nullptr;  // a name to resolve: curl does it (and its DNS cache)
    }
    target->host = std::string(host);
    target->port = static_cast<std::uint16_t>(port);
    target->key = fmt::format("{}:{}", host, port);
    target->head = fmt::format(
        "POST {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: rpcroute/0.1\r\nContent-Type: application/json\r\n"
        "Accept: application/json\r\nAccept-Encoding: identity\r\n",
        path, authority);
    return target;
  };
  auto target = parse();
  targets_.emplace(request.url, target);
  return target;
}

std::unique_ptr<NativeHttp::Conn> NativeHttp::take_idle(const std::string& key) {
  auto it = idle_.find(key);
  if (it == idle_.end()) return nullptr;
  auto& list = it->second;
  const auto now = steady_us();
  while (!list.empty()) {
    auto conn = std::move(list.back());
    list.pop_back();
    --idle_count_;
    if (now - conn->idle_since_us <= kMaxIdleUs && quiet(*conn)) return conn;
    boost::system::error_code ec;
    conn->socket.close(ec);
  }
  return nullptr;
}

bool NativeHttp::quiet(Conn& conn) {
  // An idle connection must hold nothing: bytes that arrived unasked (an extra response, a late
  // answer) would be read as the answer to the next request, and a FIN means the server closed it.
  // One non-blocking peek per reuse; EAGAIN is the only good answer.
  char byte;
  const auto n = ::recv(conn.socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

void NativeHttp::close_connection(std::uint64_t serial) {
  for (auto& [key, conns] : idle_) {
    for (auto it = conns.begin(); it != conns.end(); ++it) {
      if ((*it)->serial != serial) continue;
      boost::system::error_code ec;
      (*it)->socket.close(ec);
      conns.erase(it);
      --idle_count_;
      return;
    }
  }
}

ConnectionRef NativeHttp::give_back(const std::string& key, std::unique_ptr<Conn> conn) {
  if (idle_count_ >= kMaxIdle) return {};  // closed by its destructor
  if (conn->buffer.capacity() > kReadChunk) conn->buffer = beast::flat_buffer();  // after a large body
  conn->idle_since_us = steady_us();
  const ConnectionRef ref{ConnectionRef::Client::native, conn->serial};
  idle_[key].push_back(std::move(conn));
  ++idle_count_;
  return ref;
}

asio::awaitable<HttpResponse> NativeHttp::perform(HttpRequest request, std::shared_ptr<const Target> target) {
  auto self = shared_from_this();
  struct InFlight {
    std::size_t& n;
    explicit InFlight(std::size_t& count) : n(count) { ++n; }
    ~InFlight() { --n; }
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;
  } in_flight(in_flight_);
  HttpResponse r;
  const auto started = steady_us();
  const auto timeout_ms = std::max<std::int64_t>(1, request.timeout_ms);
  const auto connect_timeout_ms = std::clamp<std::int64_t>(request.timeout_ms, 1, 5'000);

  std::string head;
  head.reserve(target->head.size() + 40 + (request.headers != nullptr ? request.headers->size() * 64 : 0));
  head = target->head;
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

  // One deadline for the whole transfer (shorter while connecting, like curl's CONNECTTIMEOUT); it
  // cancels whatever socket operation is pending. Shared, so a late handler never touches a frame.
  struct Deadline {
    explicit Deadline(asio::io_context& io) : timer(io) {}
    asio::steady_timer timer;
    tcp::socket* socket = nullptr;
    bool fired = false;
    bool cancelled = false;  // fired by the caller's Cancellation, not the clock
    std::uint64_t generation = 0;
  };
  auto deadline = std::make_shared<Deadline>(io_);
  // Cancelled: stop like at the deadline (the connection is not given back), report cancelled.
  if (request.cancel != nullptr) {
    request.cancel->on_request([d = deadline] {
      d->fired = d->cancelled = true;
      if (d->socket != nullptr) {
        boost::system::error_code ignored;
        d->socket->cancel(ignored);
      }
    });
  }
  const auto start_point = std::chrono::steady_clock::now();
  auto arm = [&deadline](std::chrono::steady_clock::time_point at) {
    deadline->timer.expires_at(at);
    const auto generation = ++deadline->generation;
    deadline->timer.async_wait([d = deadline, generation](const boost::system::error_code& ec) {
      if (ec || d->generation != generation) return;
      d->fired = true;
      if (d->socket != nullptr) {
        boost::system::error_code ignored;
        d->socket->cancel(ignored);
      }
    });
  };
  arm(start_point + std::chrono::milliseconds(timeout_ms));
  auto finish = [&](TransportError error, std::string message) {
    r.error = error;
    r.error_message = std::move(message);
  };
  auto too_large = [&] {
    finish(TransportError::too_large,
           fmt::format("answer larger than the response cap ({} bytes)", request.max_response_bytes));
  };
  auto timed_out = [&](std::size_t received) {
    finish(TransportError::timeout, fmt::format("Operation timed out after {} milliseconds with {} bytes received",
                                                (steady_us() - started) / 1000, received));
  };

  // Out of memory while taking the answer (its body is the one allocation a provider controls)
  // fails this attempt at once, like any transfer failure; the router goes on to the next provider.
  try {
    for (int attempt = 0;; ++attempt) {
      std::unique_ptr<Conn> conn = take_idle(target->key);
      const bool reused = conn != nullptr;
      boost::system::error_code ec;
      if (!reused) {
        conn = std::make_unique<Conn>(io_, next_serial_++);
        deadline->socket = &conn->socket;
        const auto connect_started = steady_us();
        const bool short_connect = connect_timeout_ms < timeout_ms;
        if (short_connect) arm(start_point + std::chrono::milliseconds(connect_timeout_ms));
        for (const auto& endpoint : target->endpoints) {
          if (conn->socket.is_open()) conn->socket.close(ec);
          ec = {};
          co_await conn->socket.async_connect(endpoint, asio::redirect_error(asio::use_awaitable, ec));
          if (!ec || deadline->fired) break;
        }
        if (deadline->fired) {
          deadline->socket = nullptr;
          finish(TransportError::timeout,
                 fmt::format("Connection timed out after {} milliseconds", (steady_us() - started) / 1000));
          break;
        }
        if (short_connect) arm(start_point + std::chrono::milliseconds(timeout_ms));
        if (ec) {
          deadline->socket = nullptr;
          finish(TransportError::connect, fmt::format("Failed to connect to {} port {}: {}", target->host, target->port,
                                                      ec.message()));
          break;
        }
        conn->socket.set_option(tcp::no_delay(true), ec);
        conn->socket.set_option(asio::socket_base::keep_alive(true), ec);
        conn->socket.non_blocking(true, ec);
        enable_edge_reads(conn->socket);
        r.connect_us = steady_us() - connect_started;
      }
      deadline->socket = &conn->socket;

      // One non-blocking send first (the socket is in non-blocking mode): a request almost always
      // fits the send buffer, and then no write operation is needed.
      std::array<asio::const_buffer, 2> out{asio::buffer(head), asio::buffer(request.body)};
      std::size_t sent = conn->socket.write_some(out, ec);
      if (ec == asio::error::would_block) {
        ec = {};
        sent = 0;
      }
      if (!ec && sent < head.size() + request.body.size()) {
        for (auto& b : out) {
          const auto k = std::min(sent, b.size());
          b += k;
          sent -= k;
        }
        co_await asio::async_write(conn->socket, out, asio::redirect_error(asio::use_awaitable, ec));
      }
      if (deadline->fired) {
        timed_out(0);
        break;
      }
      if (ec) {
        deadline->socket = nullptr;
        if (reused && attempt == 0) continue;  // a stale keep-alive connection: once more on a new one
        finish(TransportError::reset, fmt::format("Send failure: {}", ec.message()));
        break;
      }

      std::optional<ResponseReader> parser;
      parser.emplace();
      parser->eager(true);
      parser->header_limit(kHeaderLimit);
      parser->body_limit(request.max_response_bytes);
      std::size_t received = 0;
      bool retry = false;
      bool failed = false;
      bool direct_done = false;  // the body was read past the parser, to its Content-Length
      bool parser_used = false;  // Beast's parser has consumed bytes of this answer
      bool plain_done = false;   // the answer was taken whole by the fast path
      bool plain_reusable = false;
      for (;;) {
        // A whole, plain answer (the usual small one) is taken in one pass, without the parser.
        if (!parser_used && conn->buffer.size() > 0) {
          const std::string_view in(static_cast<const char*>(conn->buffer.data().data()), conn->buffer.size());
          http1::Message m;
          if (http1::parse_response(in, kHeaderLimit, m)) {
            if (m.body_size > request.max_response_bytes) {
              too_large();
              failed = true;
              break;
            }
            r.status = m.status;
            r.retry_after.assign(m.retry_after);
            const auto body = m.body(in);
            check_body_capacity(body.size() + kBodySlack);
            r.body.reserve(body.size() + kBodySlack);
            r.body.assign(body);
            plain_reusable = m.keep_alive && in.size() == m.size();
            conn->buffer.consume(m.size());
            plain_done = true;
            break;
          }
        }
        // Feed what is buffered.
        while (conn->buffer.size() > 0 && !parser->is_done()) {
          const auto used = parser->put(conn->buffer.data(), ec);
          conn->buffer.consume(used);
          if (used > 0) parser_used = true;
          if (ec == bhttp::error::need_more) {
            ec = {};
            break;
          }
          if (ec) break;
          if (used == 0) break;
        }
        if (ec == bhttp::error::body_limit) {
          too_large();
        } else if (ec && parser->encoded) {
          finish(TransportError::encoded, "answer has a Content-Encoding other than the identity asked for");
        } else if (ec) {
          finish(TransportError::other, fmt::format("Weird server reply: {}", ec.message()));
        }
        if (ec) {
          failed = true;
          break;
        }
        if (parser->is_done()) {
          const auto status = parser->status;
          if (status >= 100 && status < 200 && status != 101) {  // an interim answer: the real one follows
            parser.emplace();
            parser->eager(true);
            parser->header_limit(kHeaderLimit);
            parser->body_limit(request.max_response_bytes);
            continue;
          }
          break;
        }
        std::size_t want = kReadChunk;
        if (parser->is_header_done()) {
          const auto length = parser->content_length_remaining();
          if (length && *length > kReadChunk && *length <= kReserveLimit && !parser->chunked() &&
              conn->buffer.size() == 0) {
            // A large body of known length: read straight into the body (reserved at the header),
            // not through the connection's buffer and the parser: one copy less, and no large
            // read buffer allocated, faulted in and freed per answer. The body grows with what
            // arrives (doubling), never to a length the provider only claims.
            auto& body = parser->body;
            auto left = static_cast<std::size_t>(*length);
            while (left > 0) {
              const auto old = body.size();
              const auto chunk = std::min(left, std::max(kLargeReadChunk, old));
              check_body_capacity(old + chunk);
              body.resize(old + chunk);
              const auto n = co_await conn->socket.async_read_some(asio::buffer(body.data() + old, chunk),
                                                                   asio::redirect_error(asio::use_awaitable, ec));
              body.resize(old + n);
              received += n;
              left -= n;
              if (ec || deadline->fired) break;
            }
            if (left == 0) {
              ec = {};
              direct_done = true;
              break;
            }
            if (deadline->fired) break;
            if (ec == asio::error::eof) {
              finish(TransportError::truncated, "transfer closed with outstanding read data remaining");
            } else {
              finish(TransportError::reset, fmt::format("Recv failure: {}", ec.message()));
            }
            failed = true;
            break;
          }
          if (length && *length > kReadChunk) {
            want = static_cast<std::size_t>(std::min<std::uint64_t>(*length, kLargeReadChunk));
          } else if (!length && received > kLargeReadChunk) {
            want = kLargeReadChunk;
          }
        }
        // The socket is usually drained here (the answer to what was just sent has not arrived): the
        // read waits for epoll instead of trying a recv that fails (rpcroute/edge_read.hpp).
        const auto n = co_await async_read_some_edge(conn->socket, conn->buffer.prepare(want),
                                                     asio::redirect_error(asio::use_awaitable, ec));
        if (deadline->fired) break;
        if (ec == asio::error::eof) {
          if (received == 0 && reused && attempt == 0) {
            retry = true;
            break;
          }
          if (parser->is_header_done()) {
            parser->put_eof(ec);  // a body that ends with the connection is complete now
            if (!ec && parser->is_done()) break;
            finish(TransportError::truncated, "transfer closed with outstanding read data remaining");
          } else if (received == 0) {
            finish(TransportError::reset, "Empty reply from server");
          } else {
            finish(TransportError::reset, "Connection closed in the middle of the response header");
          }
          failed = true;
          break;
        }
        if (ec) {
          if (received == 0 && reused && attempt == 0) {
            retry = true;
            break;
          }
          finish(TransportError::reset, fmt::format("Recv failure: {}", ec.message()));
          failed = true;
          break;
        }
        conn->buffer.commit(n);
        received += n;
      }
      deadline->socket = nullptr;
      if (plain_done) {
        if (plain_reusable) r.connection = give_back(target->key, std::move(conn));
        break;
      }
      if (retry) continue;
      if (deadline->fired && !failed && !parser->is_done() && !direct_done) {
        timed_out(received);
        break;
      }
      if (failed) break;

      r.status = static_cast<long>(parser->status);
      r.retry_after = std::move(parser->retry_after);
      const bool reusable = parser->keep_alive() && conn->buffer.size() == 0;
      r.body = std::move(parser->body);
      if (parser->encoded) r.body.clear();  // an error status's coded body: not ours to read
      if (reusable) r.connection = give_back(target->key, std::move(conn));
      break;
    }
  } catch (const std::bad_alloc&) {
    deadline->socket = nullptr;  // the connection is gone with the frame's locals
    r.body = std::string();
    finish(TransportError::out_of_memory, "out of memory while receiving the answer");
  }
  deadline->socket = nullptr;
  deadline->timer.cancel();
  if (request.cancel != nullptr) request.cancel->clear_hook();
  if (deadline->cancelled && r.error != TransportError::none) {
    r.error = TransportError::cancelled;
    r.error_message = "cancelled";
  }
  r.latency_us = steady_us() - started;
  co_return r;
}

}  // namespace rpcroute::detail

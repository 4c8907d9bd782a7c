#include "native_http.hpp"

#include <fmt/format.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <boost/beast/core/flat_buffer.hpp>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <optional>

#include "native_transfer.hpp"
#include "response_reader.hpp"
#include "rpcroute/clock.hpp"
#include "rpcroute/edge_read.hpp"
#include "rpcroute/http1.hpp"

namespace rpcroute::detail {

namespace bhttp = boost::beast::http;

namespace {

constexpr std::size_t kMaxIdle = 256;                // like curl's CURLMOPT_MAXCONNECTS
constexpr std::int64_t kMaxIdleUs = 60'000'000;      // older idle connections are not reused
constexpr std::size_t kReadChunk = 16 * 1024;        // like curl's receive buffer
constexpr std::size_t kLargeReadChunk = 256 * 1024;  // once a large body is on its way
constexpr std::uint64_t kReserveLimit = std::uint64_t{1} << 31;
constexpr std::size_t kTlsFirstRead = 4 * 1024;  // kept per pooled TLS connection

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

bool set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

// curl reads http_proxy (lower case only) for http://, https_proxy or HTTPS_PROXY for https://,
// and all_proxy or ALL_PROXY for both: with one of them set, that scheme's requests stay with curl
// so that the proxy is honoured exactly as before.
bool plain_proxy_configured() { return set("http_proxy") || set("all_proxy") || set("ALL_PROXY"); }
bool tls_proxy_configured() {
  return set("https_proxy") || set("HTTPS_PROXY") || set("all_proxy") || set("ALL_PROXY");
}

bool clean_header_text(std::string_view s) {
  return s.find_first_of("\r\n") == std::string_view::npos;
}

}  // namespace

void check_body_capacity(std::size_t bytes) {
  if (bytes > test_body_limit()) throw std::bad_alloc();
}

NativeHttp::NativeHttp(asio::io_context& io) : io_(io), names_(std::make_unique<NameCache>()) {
  const char* client = std::getenv("RPCROUTE_HTTP_CLIENT");
  const bool curl_only = client != nullptr && std::string_view(client) == "curl";
  const char* native_tls = std::getenv("RPCROUTE_NATIVE_TLS");
  enabled_ = !curl_only && !plain_proxy_configured();
  tls_enabled_ = !curl_only && !tls_proxy_configured() &&
                 !(native_tls != nullptr && std::string_view(native_tls) == "0");
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
  if (!enabled_ && !tls_enabled_) return nullptr;
  if (request.headers != nullptr) {
    for (const auto& h : *request.headers) {
      if (!clean_header_text(h.name) || !clean_header_text(h.value)) return nullptr;
    }
  }
  auto it = targets_.find(request.url);
  if (it == targets_.end()) {
    if (targets_.size() > 4096) targets_.clear();
    it = targets_.try_emplace(request.url).first;
  }
  auto& known = it->second;
  if (known.empty()) known.push_back(parse_native_target(request.url));  // context-free
  const auto& first = known.front();
  if (first == nullptr || !first->https) return enabled_ ? first : nullptr;
  // https://: HTTP/2 stays with curl; one target per tls: settings (a pool of its own each).
  if (!tls_enabled_ || request.http == HttpVersion::http2) return nullptr;
  const auto& context = tls_.get(request.tls);
  for (const auto& t : known) {
    if (t->context == &context) return t;
  }
  auto target = std::make_shared<Target>(*first);
  target->context = &context;
  target->key = fmt::format("{}#{}", target->key_host, context.index);
  known.push_back(target);
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
  // Over TLS, bytes waiting are a record nobody asked for: the connection is not reused either,
  // and that counts what OpenSSL read ahead and has not opened yet (read_ahead is on).
  if (conn.ssl && SSL_has_pending(conn.ssl.get()) != 0) return false;
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
  if (conn->buffer.capacity() > kReadChunk)
    conn->buffer = beast::flat_buffer();  // after a large body
  if (conn->tls_out.capacity() > kReadChunk) conn->tls_out = std::string();
  conn->idle_since_us = steady_us();
  const ConnectionRef ref{ConnectionRef::Client::native, conn->serial};
  idle_[key].push_back(std::move(conn));
  ++idle_count_;
  return ref;
}

namespace {

/// One non-blocking send first (the socket is in non-blocking mode): a request almost always fits
/// the send buffer, and then no write operation is needed. False when `out` (advanced past what
/// was sent) remains to be written.
bool write_now(tcp::socket& socket, std::array<asio::const_buffer, 2>& out,
               boost::system::error_code& ec) {
  std::size_t sent = socket.write_some(out, ec);
  if (ec == asio::error::would_block) {
    ec = {};
    sent = 0;
  }
  if (ec || sent == out[0].size() + out[1].size()) return true;
  for (auto& b : out) {
    const auto k = std::min(sent, b.size());
    b += k;
    sent -= k;
  }
  return false;
}

/// How the reading of one answer ended.
enum class ReadEnd {
  reading,
  whole,    // taken whole by the fast path
  parsed,   // Beast's parser is done
  direct,   // the body was read past the parser, to its Content-Length
  retry,    // a stale pooled connection said nothing: once more on a new one
  failed,   // the Transfer holds the error
  stopped,  // the deadline fired first
};

/// Reading one answer off a connection: the fast path for a whole plain answer in the buffer,
/// else Beast's parser fed as bytes arrive. Each step is synchronous; perform() does the awaits.
struct AnswerReading {
  AnswerReading(Transfer& t, NativeHttp::Conn& conn, bool may_retry)
      : t(t),
        conn(conn),
        may_retry(may_retry),
        parser(std::in_place, t.request.max_response_bytes) {}

  /// The usual small answer, whole in the buffer (Content-Length or chunked), taken in one pass
  /// without the parser.
  bool take_whole() {
    if (parser_used || conn.buffer.size() == 0) return false;
    const std::string_view in(static_cast<const char*>(conn.buffer.data().data()),
                              conn.buffer.size());
    http1::Message m;
    if (!http1::parse_response(in, kHeaderLimit, m)) return false;
    if (m.body_size > t.request.max_response_bytes) {
      t.too_large();
      end = ReadEnd::failed;
      return true;
    }
    t.r.status = m.status;
    t.r.retry_after.assign(m.retry_after);
    const auto body_size = static_cast<std::size_t>(m.body_size);
    check_body_capacity(body_size + kBodySlack);
    t.r.body.reserve(body_size + kBodySlack);
    m.assign_body(in, t.r.body);
    whole_reusable = m.keep_alive && in.size() == m.size();
    conn.buffer.consume(m.size());
    end = ReadEnd::whole;
    return true;
  }

  /// Feeds the parser what is buffered. False when the answer is over (parsed or failed); an
  /// interim answer (1xx) is passed over, the real one follows.
  bool feed() {
    for (;;) {
      boost::system::error_code ec;
      while (conn.buffer.size() > 0 && !parser->is_done()) {
        const auto used = parser->put(conn.buffer.data(), ec);
        conn.buffer.consume(used);
        if (used > 0) parser_used = true;
        if (ec == bhttp::error::need_more) {
          ec = {};
          break;
        }
        if (ec || used == 0) break;
      }
      if (ec) {
        if (ec == bhttp::error::body_limit) {
          t.too_large();
        } else if (parser->encoded) {
          t.fail(TransportError::encoded,
                 "answer has a Content-Encoding other than the identity asked for");
        } else {
          t.fail(TransportError::other, fmt::format("Weird server reply: {}", ec.message()));
        }
        end = ReadEnd::failed;
        return false;
      }
      if (!parser->is_done()) return true;
      const auto status = parser->status;
      if (status < 100 || status >= 200 || status == 101) {
        end = ReadEnd::parsed;
        return false;
      }
      parser.emplace(t.request.max_response_bytes);
    }
  }

  /// A large body of known length: read straight into the body (reserved at the header), not
  /// through the connection's buffer and the parser: one copy less, and no large read buffer
  /// allocated, faulted in and freed per answer.
  [[nodiscard]] bool large_body_due() const {
    if (!parser->is_header_done()) return false;
    const auto length = parser->content_length_remaining();
    return length && *length > kReadChunk && *length <= kReserveLimit && !parser->chunked() &&
           conn.buffer.size() == 0;
  }

  /// How much the next read asks for: more once a large body is on its way.
  [[nodiscard]] std::size_t read_size() const {
    if (!parser->is_header_done()) return kReadChunk;
    const auto length = parser->content_length_remaining();
    if (length && *length > kReadChunk)
      return static_cast<std::size_t>(std::min<std::uint64_t>(*length, kLargeReadChunk));
    if (!length && received > kLargeReadChunk) return kLargeReadChunk;
    return kReadChunk;
  }

  /// Takes the result of a read of `n` bytes. False when the answer is over.
  bool took(std::size_t n, boost::system::error_code ec) {
    if (t.deadline->fired) {
      end = ReadEnd::stopped;
      return false;
    }
    if (ec && received == 0 && may_retry) {
      end = ReadEnd::retry;
      return false;
    }
    if (ec == asio::error::eof) {
      if (parser->is_header_done()) {
        parser->put_eof(ec);  // a body that ends with the connection is complete now
        if (!ec && parser->is_done()) {
          end = ReadEnd::parsed;
          return false;
        }
        t.fail(TransportError::truncated, "transfer closed with outstanding read data remaining");
      } else if (received == 0) {
        t.fail(TransportError::reset, "Empty reply from server");
      } else {
        t.fail(TransportError::reset, "Connection closed in the middle of the response header");
      }
      end = ReadEnd::failed;
      return false;
    }
    if (ec) {
      if (auto refused = tls_alert_message(ec); !refused.empty()) {
        t.fail(TransportError::tls,
               std::move(refused));  // a TLS 1.3 server refusing our certificate
      } else {
        t.fail(TransportError::reset, fmt::format("Recv failure: {}", ec.message()));
      }
      end = ReadEnd::failed;
      return false;
    }
    conn.buffer.commit(n);
    received += n;
    return true;
  }

  /// Puts a parsed answer into the response (or says it timed out). True when the connection
  /// can carry another request.
  bool settle() {
    switch (end) {
      case ReadEnd::whole:
        return whole_reusable;
      case ReadEnd::stopped:
        t.timed_out(received);
        return false;
      case ReadEnd::parsed:
      case ReadEnd::direct: {
        t.r.status = static_cast<long>(parser->status);
        t.r.retry_after = std::move(parser->retry_after);
        const bool reusable = parser->reusable() && conn.buffer.size() == 0;
        t.r.body = std::move(parser->body);
        if (parser->encoded) t.r.body.clear();  // an error status's coded body: not ours to read
        return reusable;
      }
      default:
        return false;
    }
  }

  Transfer& t;
  NativeHttp::Conn& conn;
  const bool may_retry;  // a reused connection on the first attempt: a stale one is retried
  std::optional<ResponseReader> parser;
  std::size_t received = 0;
  bool parser_used = false;  // Beast's parser has consumed bytes of this answer
  bool whole_reusable = false;
  ReadEnd end = ReadEnd::reading;
};

/// The body grows with what arrives (doubling), never to a length the provider only claims. Each
/// byte is zeroed once, when the body grows: the room left after a short read (a TLS record is
/// 16 KiB) is read into next, not given back and zeroed again (that was quadratic: 0.5 s of CPU
/// for a 24 MiB answer over TLS).
asio::awaitable<void> read_large_body(AnswerReading& a) {
  auto& body = a.parser->body;
  auto left = static_cast<std::size_t>(*a.parser->content_length_remaining());
  auto filled = body.size();
  a.parser->reserve_body(filled + left);  // over TLS the parser has often not reached the body
  boost::system::error_code ec;
  while (left > 0) {
    if (body.size() == filled) {
      const auto chunk = std::min(left, std::max(kLargeReadChunk, filled));
      check_body_capacity(filled + chunk);
      body.resize(filled + chunk);
    }
    const auto into = asio::buffer(body.data() + filled, body.size() - filled);
    const auto n = a.conn.ssl ? co_await tls_read_some(a.conn.socket, a.conn.ssl.get(), into, ec)
                              : co_await a.conn.socket.async_read_some(
                                    into, asio::redirect_error(asio::use_awaitable, ec));
    filled += n;
    a.received += n;
    left -= n;
    if (ec || a.t.deadline->fired) break;
  }
  body.resize(filled);
  if (left == 0) {
    a.end = ReadEnd::direct;
  } else if (a.t.deadline->fired) {
    a.end = ReadEnd::stopped;
  } else {
    if (ec == asio::error::eof) {
      a.t.fail(TransportError::truncated, "transfer closed with outstanding read data remaining");
    } else {
      a.t.fail(TransportError::reset, fmt::format("Recv failure: {}", ec.message()));
    }
    a.end = ReadEnd::failed;
  }
}

}  // namespace

// Connect (or reuse), write, read the answer, settle: the steps are the functions above; this
// loop only sequences them and does the awaits of the usual path itself, so that a request on a
// pooled connection costs no coroutine frame besides this one.
asio::awaitable<HttpResponse> NativeHttp::perform(HttpRequest request,
                                                  std::shared_ptr<const Target> target) {
  auto self = shared_from_this();
  struct InFlight {
    std::size_t& n;
    explicit InFlight(std::size_t& count) : n(count) { ++n; }
    ~InFlight() { --n; }
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;
  } in_flight(in_flight_);
  Transfer t(io_, request, *target);
  // Out of memory while taking the answer (its body is the one allocation a provider controls)
  // fails this attempt at once, like any transfer failure; the router goes on to the next provider.
  try {
    for (int attempt = 0;; ++attempt) {
      std::unique_ptr<Conn> conn = take_idle(target->key);
      const bool reused = conn != nullptr;
      if (!reused) {
        conn = std::make_unique<Conn>(io_, next_serial_++);
        if (!co_await open_connection(*conn, t, *names_, tls_)) break;
      }
      t.deadline->socket = &conn->socket;
      boost::system::error_code ec;
      if (conn->ssl) {
        // One TLS record for head and body, like one send on the plain path.
        conn->tls_out.assign(t.head);
        conn->tls_out.append(request.body);
        co_await tls_write(conn->socket, conn->ssl.get(), conn->tls_out, ec);
      } else if (std::array<asio::const_buffer, 2> out{asio::buffer(t.head),
                                                       asio::buffer(request.body)};
                 !write_now(conn->socket, out, ec)) {
        co_await asio::async_write(conn->socket, out,
                                   asio::redirect_error(asio::use_awaitable, ec));
      }
      if (t.deadline->fired) {
        t.timed_out(0);
        break;
      }
      if (ec) {
        t.deadline->socket = nullptr;
        if (reused && attempt == 0)
          continue;  // a stale keep-alive connection: once more on a new one
        t.fail(TransportError::reset, fmt::format("Send failure: {}", ec.message()));
        break;
      }
      AnswerReading a(t, *conn, reused && attempt == 0);
      while (!a.take_whole() && a.feed()) {
        if (a.large_body_due()) {
          co_await read_large_body(a);
          break;
        }
        // The socket is usually drained here (the answer to what was just sent has not arrived):
        // the read waits for epoll instead of trying a recv that fails (rpcroute/edge_read.hpp).
        // Over TLS the same by waiting for readability before the answer's first SSL_read: no
        // read() that fails, and no record buffer held by OpenSSL while the provider thinks.
        // OpenSSL keeps whole records, so a small first read costs only another copy out of it.
        const auto into = conn->buffer.prepare(conn->ssl ? std::min(a.read_size(), kTlsFirstRead)
                                                         : a.read_size());
        const auto n =
            conn->ssl
                ? co_await tls_read_some(conn->socket, conn->ssl.get(), into, ec, a.received == 0)
                : co_await async_read_some_edge(conn->socket, into,
                                                asio::redirect_error(asio::use_awaitable, ec));
        if (!a.took(n, ec)) break;
      }
      t.deadline->socket = nullptr;
      if (a.end == ReadEnd::retry) continue;
      if (a.settle()) t.r.connection = give_back(target->key, std::move(conn));
      break;
    }
  } catch (const std::bad_alloc&) {
    t.deadline->socket = nullptr;  // the connection is gone with the frame's locals
    t.r.body = std::string();
    t.fail(TransportError::out_of_memory, "out of memory while receiving the answer");
  }
  co_return t.done();
}

}  // namespace rpcroute::detail

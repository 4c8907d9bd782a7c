// The sidecar's HTTP side. Beast-heavy code stays in this one translation unit: it compiles slowly.
#include "server.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <chrono>
#include <ctime>
#include <cstring>

#include <malloc.h>
#include <sys/socket.h>

#include <cerrno>

#include <boost/beast/core.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "routes.hpp"
#include "rpcroute/blocks.hpp"
#include "rpcroute/edge_read.hpp"
#include "rpcroute/health/exchange.hpp"
#include "rpcroute/http1.hpp"
#include "rpcroute/json.hpp"
#include "rpcroute/jsonrpc.hpp"
#include "rpcroute/plan_report.hpp"
#include "rpcroute/probe.hpp"

namespace rpcroute::sidecar {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using namespace std::string_view_literals;
using HttpResponse_ = http::response<http::string_body>;

/// A client connection as the server tracks it. Deadlines are enforced by one sweeper for all
/// connections (Server::sweep_loop), not by a timer armed and cancelled for every read and write.
struct Connection {
  tcp::socket* socket = nullptr;
  Cancellation* cancel = nullptr;  // the request being routed, when the client leaves
  bool busy = false;
  bool routing = false;     // awaiting the router: the sweeper watches for the client leaving
  std::size_t held = 0;     // request-body bytes taken from the server's BodyBudget
  std::int64_t deadline_us = 0;  // steady_us() after which the pending operation is cancelled; 0: none
  bool timed_out = false;        // the sweeper cancelled it

  void expire_in(std::int64_t ms) {
    deadline_us = steady_us() + ms * 1000;
    timed_out = false;
  }
};

namespace {

/// Beast 1.74 speaks boost::string_view.
std::string_view sv(beast::string_view s) { return {s.data(), s.size()}; }

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

/// "localhost:8545" → "localhost"; "[::1]:8545" → "::1".
std::string host_only(std::string_view host) {
  if (!host.empty() && host.front() == '[') {
    auto close = host.find(']');
    return lower(host.substr(1, close == std::string_view::npos ? std::string_view::npos : close - 1));
  }
  auto colon = host.rfind(':');
  if (colon != std::string_view::npos && host.find(':') == colon) host = host.substr(0, colon);
  return lower(host);
}

bool loopback_name(std::string_view h) {
  return h == "localhost" || h == "127.0.0.1" || h == "::1" || h.ends_with(".localhost") ||
         (h.starts_with("127.") && h.find_first_not_of("0123456789.") == std::string_view::npos);
}

/// Default allow-list: http(s)://localhost:*, 127.0.0.1:*, [::1]:*.
bool origin_allowed(std::string_view origin, const std::vector<std::string>& extra) {
  for (const auto& o : extra) {
    if (o == "*" || lower(o) == lower(origin)) return true;
  }
  auto o = lower(origin);
  std::string_view rest;
  if (o.starts_with("http://")) rest = std::string_view(o).substr(7);
  else if (o.starts_with("https://")) rest = std::string_view(o).substr(8);
  else return false;
  if (rest.find('/') != std::string_view::npos) return false;
  return loopback_name(host_only(rest));
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

std::string iso_now() {
  auto now = std::chrono::system_clock::now();
  auto t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

std::string json_error_body(std::string_view message, std::string_view extra_key = {}, std::string_view extra_raw = {}) {
  json::Writer w;
  w.begin_object();
  w.key("error");
  w.value(message);
  if (!extra_key.empty()) {
    w.key(extra_key);
    w.raw(extra_raw);
  }
  w.end_object();
  return w.take();
}

/// The status line and header block of a response, as Beast's serializer writes them after
/// keep_alive() and prepare_payload(): Server, Content-Type, the reply's headers, Connection when
/// it differs from the version's default, Content-Length (none for 1xx, 204 and 304). Written into
/// `h`, a buffer the connection reuses.
void response_head(std::string& h, http::status status, unsigned version, bool keep_alive,
                   std::string_view content_type, std::string_view header_lines, std::size_t body_size) {
  // Written through a cursor into a buffer sized for the longest head: no append per piece.
  const std::string_view reason = sv(http::obsolete_reason(status));
  h.resize(160 + reason.size() + content_type.size() + header_lines.size());  // fixed parts: < 120
  char* p = h.data();
  auto put = [&p](std::string_view piece) {
    std::memcpy(p, piece.data(), piece.size());
    p += piece.size();
  };
  auto put_number = [&p](std::uint64_t v) { p = std::to_chars(p, p + 24, v).ptr; };
  const auto code = static_cast<unsigned>(status);
  put("HTTP/"sv);
  *p++ = static_cast<char>('0' + version / 10 % 10);
  *p++ = '.';
  *p++ = static_cast<char>('0' + version % 10);
  *p++ = ' ';
  put_number(code);
  *p++ = ' ';
  put(reason);
  put("\r\nServer: rpcroute\r\n"sv);
  if (!content_type.empty()) {
    put("Content-Type: "sv);
    put(content_type);
    put("\r\n"sv);
  }
  put(header_lines);
  if (version >= 11 && !keep_alive) put("Connection: close\r\n"sv);
  if (version < 11 && keep_alive) put("Connection: keep-alive\r\n"sv);
  if (!(code / 100 == 1 || code == 204 || code == 304)) {
    put("Content-Length: "sv);
    put_number(body_size);
    put("\r\n"sv);
  }
  put("\r\n"sv);
  h.resize(static_cast<std::size_t>(p - h.data()));
}

/// The client closed (or reset) its side while its request is being answered: a peek that sees
/// the end of the stream. Pipelined bytes (a next request) are left where they are.
bool client_left(tcp::socket& socket) {
  char byte;
  const auto n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
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

}  // namespace

/// What the sidecar keeps of a request: the request line, the three fields answers depend on, and
/// the body, in buffers that a connection reuses from one request to the next.
struct Request {
  http::verb method = http::verb::unknown;
  std::string_view method_string;  // static text for a known method, else method_storage
  std::string method_storage;
  std::string target;
  unsigned version = 11;
  bool keep_alive = true;
  std::string host;  // the first of each, as a request_parser's fields would answer
  std::string origin;
  std::string authorization;
  std::string body;
  std::string remote;
  bool expect_continue = false;  // Expect: 100-continue (HTTP/1.1): the client waits before the body

  void clear() {
    method = http::verb::unknown;
    method_string = {};
    target.clear();
    version = 11;
    keep_alive = true;
    host.clear();
    origin.clear();
    authorization.clear();
    body.clear();
    expect_continue = false;
    seen = 0;
  }
  unsigned seen = 0;  // which of host, origin, authorization arrived
};

namespace {

/// Beast's HTTP/1.1 parser (limits, chunked bodies, keep-alive rules) writing into a Request:
/// unlike request_parser<string_body>, it does not allocate a node for every header field, and the
/// body goes into the connection's buffer (reserved from Content-Length, which Beast has already
/// checked against the body limit).
class RequestReader final : public http::basic_parser<true> {
 public:
  /// Body bytes are taken from `budget` into `held` as the body is announced or grows; past the
  /// budget the read ends with asio::error::no_buffer_space (503).
  RequestReader(Request& r, BodyBudget& budget, std::size_t& held) : r_(r), budget_(budget), held_(held) {
    r_.clear();
  }

 private:
  void on_request_impl(http::verb method, beast::string_view method_str, beast::string_view target, int version,
                       beast::error_code&) override {
    r_.method = method;
    if (method != http::verb::unknown) {
      r_.method_string = sv(http::to_string(method));
    } else {
      r_.method_storage.assign(method_str.data(), method_str.size());
      r_.method_string = r_.method_storage;
    }
    r_.target.assign(target.data(), target.size());
    r_.version = static_cast<unsigned>(version);
  }
  void on_response_impl(int, beast::string_view, int, beast::error_code&) override {}
  void on_field_impl(http::field name, beast::string_view, beast::string_view value, beast::error_code& ec) override {
    auto keep = [&](unsigned bit, std::string& slot) {
      if ((r_.seen & bit) != 0) return;
      r_.seen |= bit;
      slot.assign(value.data(), value.size());
    };
    if (name == http::field::host) keep(1, r_.host);
    else if (name == http::field::origin) keep(2, r_.origin);
    else if (name == http::field::authorization) keep(4, r_.authorization);
    // Beast frames "chunked, identity" or "gzip" as no body; the body would be the next request.
    else if (name == http::field::transfer_encoding && !http1::chunked_only(sv(value)))
      ec = http::error::bad_transfer_encoding;
    else if (name == http::field::expect) r_.expect_continue = beast::iequals(value, "100-continue");
  }
  void on_header_impl(beast::error_code&) override { r_.keep_alive = keep_alive(); }
  void on_body_init_impl(const boost::optional<std::uint64_t>& length, beast::error_code& ec) override {
    if (!length) return;
    if (!budget_.take(held_, static_cast<std::size_t>(*length))) {
      ec = asio::error::no_buffer_space;
      return;
    }
    r_.body.reserve(static_cast<std::size_t>(*length) + kBodySlack);  // parsed in place
  }
  std::size_t on_body_impl(beast::string_view body, beast::error_code& ec) override { return append(body, ec); }
  void on_chunk_header_impl(std::uint64_t, beast::string_view, beast::error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, beast::string_view body, beast::error_code& ec) override {
    return append(body, ec);
  }
  std::size_t append(beast::string_view body, beast::error_code& ec) {
    // A body without a length (chunked) takes from the budget as it grows.
    const auto size = r_.body.size() + body.size();
    if (size > held_ && !budget_.take(held_, size - held_)) {
      ec = asio::error::no_buffer_space;
      return 0;
    }
    r_.body.append(body.data(), body.size());
    return body.size();
  }
  void on_finish_impl(beast::error_code&) override {}

  Request& r_;
  BodyBudget& budget_;
  std::size_t& held_;
};

/// Feeds what `buffer` holds to the parser. True when the message is complete or `ec` is set;
/// false when more bytes are needed.
bool feed(RequestReader& parser, beast::flat_buffer& buffer, beast::error_code& ec) {
  while (buffer.size() > 0) {
    const auto used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    if (ec == http::error::need_more) {
      ec = {};
      return parser.is_done();
    }
    if (ec || parser.is_done()) return true;
    if (used == 0) return false;
  }
  return parser.is_done();
}

constexpr std::size_t kHeaderLimit = 32 * 1024;
constexpr std::string_view kBusyBytes = "too many request bytes in flight (--max-inflight-mb); retry later";

/// The fast path (rpcroute/http1.hpp): a whole, plain request in the buffer is taken in one pass,
/// without Beast's parser. False leaves the buffer and the request to RequestReader.
bool take_plain_request(beast::flat_buffer& buffer, std::uint64_t max_body, Request& r) {
  const std::string_view in(static_cast<const char*>(buffer.data().data()), buffer.size());
  http1::Message m;
  if (!http1::parse_request(in, kHeaderLimit, max_body, m)) return false;
  r.clear();
  r.method = http::string_to_verb(beast::string_view(m.method.data(), m.method.size()));
  r.method_string = sv(http::to_string(r.method));  // a method the fast path knows: static text
  r.target.assign(m.target);
  r.version = m.version;
  r.keep_alive = m.keep_alive;
  if (!m.host.empty()) r.host.assign(m.host);  // clear() emptied them
  if (!m.origin.empty()) r.origin.assign(m.origin);
  if (!m.authorization.empty()) r.authorization.assign(m.authorization);
  const auto body = m.body(in);
  r.body.reserve(body.size() + kBodySlack);  // parsed in place, like RequestReader's
  r.body.assign(body);
  buffer.consume(m.size());
  return true;
}

}  // namespace

/// An answer being built. A connection keeps one and resets it per request, so that its buffers
/// (the header lines) are reused rather than allocated per response.
struct Server::Reply {
  http::status status = http::status::ok;
  std::string body;
  std::string_view content_type = "application/json";  // static text
  std::string header_lines;  // "Name: value\r\n" each; values never hold CR or LF (Beast rejects them)
  void reset() {
    status = http::status::ok;
    body.clear();
    content_type = "application/json";
    header_lines.clear();
    rpc_method.clear();
    provider.clear();
    attempts = 0;
  }
  void header(std::string_view name, std::string_view value) {
    const auto at = header_lines.size();
    header_lines.resize(at + name.size() + value.size() + 4);
    char* p = header_lines.data() + at;
    std::memcpy(p, name.data(), name.size());
    p += name.size();
    *p++ = ':';
    *p++ = ' ';
    std::memcpy(p, value.data(), value.size());
    p += value.size();
    *p++ = '\r';
    *p = '\n';
  }
  // For the log line.
  std::string rpc_method;
  std::string provider;
  std::size_t attempts = 0;
};

/// A JSON-RPC request on its way to the router: what prepare() found, what finish_rpc() needs.
struct Server::RpcJob {
  ProfileRuntime* rt = nullptr;
  const Chain* chain = nullptr;
  jsonrpc::Body parsed;
  std::size_t routed = 0;  // the calls routed: all but a batch's items beyond --max-batch
  RouteOptions options;
  char request_id_text[40];
  std::string_view request_id;  // into request_id_text
};

Server::Server(asio::io_context& io, ServerConfig config, std::vector<Profile> profiles, Engine& engine,
               StateStore& store, const Clock& clock)
    : io_(io),
      config_(std::move(config)),
      engine_(engine),
      store_(store),
      clock_(clock),
      acceptor_(io),
      wake_(io) {
  request_prefix_ = Random().engine()() & 0xffffffffULL;
  body_budget_.cap = config_.max_inflight_bytes;
  for (auto& p : profiles) {
    if (default_profile_.empty()) default_profile_ = p.name;
    auto rt = std::make_unique<ProfileRuntime>();
    rt->profile = std::move(p);
    rt->router = std::make_unique<Router>(rt->profile, engine_, store_, clock_, rng_);
    auto name = rt->profile.name;
    profiles_.emplace(std::move(name), std::move(rt));
  }
}

Server::~Server() = default;

Result<std::uint16_t> Server::listen() {
  boost::system::error_code ec;
  auto address = asio::ip::make_address(config_.host == "localhost" ? "127.0.0.1" : config_.host, ec);
  if (ec) return fail(fmt::format("bad --listen address '{}'", config_.host));
  if (!address.is_loopback() && !config_.allow_remote) {
    return fail(fmt::format("refusing to listen on {} (not loopback) without --allow-remote and a token", config_.host));
  }
  // A token always: --allow-remote on a loopback address turned the Host check off and let any
  // page a DNS-rebinding attack points at 127.0.0.1 through unauthenticated.
  if (config_.allow_remote && config_.token.empty()) {
    return fail("--allow-remote needs a bearer token (--token or $RPCROUTE_TOKEN)");
  }
  // Only clients on this host reach a loopback address, so a Host that is not a loopback name is
  // a rebinding page even with --allow-remote; remote clients name the host any way they like.
  check_host_ = !config_.allow_remote || address.is_loopback();
  tcp::endpoint endpoint(address, config_.port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return fail(fmt::format("cannot listen on {}:{}: {}", config_.host, config_.port, ec.message()));
  port_ = acceptor_.local_endpoint().port();
  return port_;
}

Server::ProfileRuntime* Server::runtime(const std::string& name) {
  const std::string& key = name.empty() ? default_profile_ : name;
  if (auto it = profiles_.find(key); it != profiles_.end()) return it->second.get();
  if (name.empty() || unloadable_.count(name) || profiles_.size() > 64) return nullptr;
  // A URL names a profile, never a file: "x.yaml" would be read as a path.
  if (name.ends_with(".yaml") || name.ends_with(".yml") || name.find('/') != std::string::npos) return nullptr;
  // Profiles on the search path are loaded on first use, by name only (never a path from a URL).
  auto loaded = find_profile(name);
  if (!loaded || (loaded->source == "embedded" && name != kDefaultProfile)) {
    if (!loaded) log(fmt::format("profile '{}' not served: {}", name, loaded.error().message));
    // Names come from request URLs: not remembered forever (a client could grow this set without
    // end); forgetting only costs a lookup on the search path again.
    if (unloadable_.size() >= kMaxUnloadable) unloadable_.clear();
    unloadable_.insert(name);
    return nullptr;
  }
  auto rt = std::make_unique<ProfileRuntime>();
  rt->profile = std::move(*loaded);
  rt->router = std::make_unique<Router>(rt->profile, engine_, store_, clock_, rng_);
  auto* raw = rt.get();
  profiles_.emplace(name, std::move(rt));
  return raw;
}

void Server::log(const std::string& line) { fmt::print(stderr, "{}\n", line); }

void Server::save_state(std::string_view why) {
  // On the event loop: never waits for the lock; when another process holds it, the flush loop
  // saves the changes as soon as it is free.
  const bool saved = flush_state(false);
  log(fmt::format("rpcroute: {}: {}; serving on (profiles are not reloaded)", why,
                  saved ? "state saved" : "the state file is locked, saving once it is free"));
}

bool Server::flush_state(bool wait) {
  if (!store_.dirty()) return true;
  if (wait) {
    if (auto r = store_.save(); !r) log(fmt::format("rpcroute: warning: state not saved: {}", r.error().message));
    return true;
  }
  // On the event loop: one non-blocking attempt at the lock. Another process holding it (even a
  // stopped one) must not stall every request; the changes stay pending for the next attempt.
  auto r = store_.try_save();
  if (!r) log(fmt::format("rpcroute: warning: state not saved: {}", r.error().message));
  const bool done = !r || *r;
  if (done) {
    if (flush_deferred_ >= kFlushWarnAfter) log("rpcroute: the state file lock is free again; state saved");
    flush_deferred_ = 0;
  } else if (++flush_deferred_ == kFlushWarnAfter) {
    log("rpcroute: warning: the state file is locked by another process; saving is deferred until it is free");
  }
  return done;
}

asio::awaitable<void> Server::flush_loop() {
  ++background_;
  asio::steady_timer timer(io_);
  bool retry = false;
  while (!draining_) {
    timer.expires_after(std::chrono::milliseconds(retry ? kFlushRetryMs : config_.flush_interval_ms));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    retry = !flush_state(false);
    // Idle: give freed heap pages back (after large answers, glibc keeps them otherwise).
    if (metrics_.in_flight() == 0) malloc_trim(0);
  }
  --background_;
}

asio::awaitable<void> Server::poll_provider(ProfileRuntime* rt, const Chain* chain, const Provider* provider) {
  ++background_;
  asio::steady_timer timer(io_);
  const auto key = provider_key(rt->profile.name, chain->name, *provider);
  const auto interval = std::clamp<std::int64_t>(chain->block_time_ms, 1'000, 30'000);
  // Bounded by the block time (at least 2 s): a silent node is noticed within a couple of block
  // times, and its timeout opens the breaker at once.
  const auto timeout = std::min<std::int64_t>({provider->timeout_ms, 5'000, std::max<std::int64_t>(interval, 2'000)});
  // First a full probe (chain id, archive, batch), then the head at the chain's block time.
  ProbeReport first = co_await probe_provider(engine_, rt->profile, *chain, *provider, &store_, clock_, rng_, timeout);
  std::int64_t wait = first.reachable ? interval : interval * 2;
  static constexpr std::string_view kParams = "[]";
  std::vector<UpstreamCall> calls{{"eth_blockNumber", kParams}};
  while (!draining_) {
    timer.expires_after(std::chrono::milliseconds(wait));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (draining_) break;
    Exchange ex = co_await send_exchange(engine_, *provider, calls, timeout, clock_, rt->profile);
    const auto now = clock_.now_ms();
    record_exchange(store_, rt->profile.health, key, calls, ex, now, rng_.uniform());
    if (ex.per_call[0].cls == OutcomeClass::success) {
      if (auto h = jsonrpc::parse_quantity(*ex.replies[0]->result)) {
        observe_height(store_, rt->profile, *chain, *provider, Height{*h, now}, rng_.uniform());
      }
      wait = interval;
    } else {
      // Back off while it fails, but not beyond the breaker's recovery time: these polls are
      // what closes a half-open breaker when clients are all served by healthier providers.
      const auto cap = std::clamp<std::int64_t>(rt->profile.health.circuit_breaker.recovery_timeout_ms, interval, 60'000);
      wait = std::min<std::int64_t>(wait * 2, cap);
    }
  }
  --background_;
}

asio::awaitable<void> Server::recover_provider(ProfileRuntime* rt, const Chain* chain, const Provider* provider) {
  ++background_;
  constexpr std::int64_t kFirstMs = 250, kMaxMs = 1'000;
  asio::steady_timer timer(io_);
  const auto key = provider_key(rt->profile.name, chain->name, *provider);
  const auto timeout = std::min<std::int64_t>(provider->timeout_ms, 2'000);
  static constexpr std::string_view kParams = "[]";
  const std::vector<UpstreamCall> calls{{"eth_blockNumber", kParams}};
  auto breaker_open = [&](const Provider& p) {
    const auto& providers = store_.state().providers;
    auto it = providers.find(provider_key(rt->profile.name, chain->name, p));
    return it != providers.end() && it->second.breaker.effective_state(clock_.now_ms()) == BreakerState::open;
  };
  std::int64_t wait = kFirstMs;
  while (!draining_) {
    timer.expires_after(std::chrono::milliseconds(wait));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (draining_) break;
    const bool none_usable =
        std::all_of(chain->providers.begin(), chain->providers.end(), [&](const Provider& p) { return breaker_open(p); });
    if (!none_usable) {  // the poller and half-open trials take care of it
      wait = kFirstMs;
      continue;
    }
    Exchange ex = co_await send_exchange(engine_, *provider, calls, timeout, clock_, rt->profile);
    const auto now = clock_.now_ms();
    record_exchange(store_, rt->profile.health, key, calls, ex, now, rng_.uniform(), {.trial = true});
    if (ex.per_call[0].cls == OutcomeClass::success) {
      if (auto h = jsonrpc::parse_quantity(*ex.replies[0]->result)) {
        observe_height(store_, rt->profile, *chain, *provider, Height{*h, now}, rng_.uniform());
      }
      wait = kFirstMs;
    } else {
      wait = std::min(wait * 2, kMaxMs);
    }
  }
  --background_;
}

asio::awaitable<void> Server::accept_loop() {
  for (;;) {
    boost::system::error_code ec;
    tcp::socket socket = co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (draining_ || ec == asio::error::operation_aborted) co_return;
      // Out of descriptors (EMFILE, ENFILE) or memory: retrying at once would spin on the CPU.
      // Keep serving the connections we have and try again shortly.
      asio::steady_timer pause(io_, std::chrono::milliseconds(50));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    if (connections_.size() >= config_.max_connections) {
      metrics_.on_refused("connections");
      // A flood of them is not answered one by one: past a few, closed at once.
      if (refusing_ < 64) asio::co_spawn(io_, refuse_connection(std::move(socket)), asio::detached);
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);
    asio::co_spawn(io_, serve_connection(std::move(socket)), asio::detached);
  }
}

asio::awaitable<void> Server::refuse_connection(tcp::socket socket) {
  ++refusing_;
  const std::string body =
      json_error_body(fmt::format("too many connections (--max-connections {}); retry later", config_.max_connections));
  std::string head;
  response_head(head, http::status::service_unavailable, 11, false, "application/json", "Retry-After: 1\r\n",
                body.size());
  boost::system::error_code ec;
  std::array<asio::const_buffer, 2> out{asio::buffer(head), asio::buffer(body)};
  co_await asio::async_write(socket, out, asio::redirect_error(asio::use_awaitable, ec));
  socket.shutdown(tcp::socket::shutdown_send, ec);
  // Shared with the timer's handler, which may run after this frame has gone.
  auto shared = std::make_shared<tcp::socket>(std::move(socket));
  asio::steady_timer limit(io_, std::chrono::seconds(1));
  limit.async_wait([weak = std::weak_ptr<tcp::socket>(shared)](const boost::system::error_code& e) {
    if (auto s = weak.lock(); s && !e) {
      boost::system::error_code ignored;
      s->cancel(ignored);
    }
  });
  std::array<char, 4096> sink;
  while (!ec) co_await shared->async_read_some(asio::buffer(sink), asio::redirect_error(asio::use_awaitable, ec));
  limit.cancel();
  --refusing_;
}

asio::awaitable<void> Server::run() {
  asio::co_spawn(io_, flush_loop(), asio::detached);
  asio::co_spawn(io_, sweep_loop(), asio::detached);
  if (config_.background_probes) {
    for (auto& [name, rt] : profiles_) {
      for (const auto& chain : rt->profile.chains) {
        for (const auto& provider : chain.providers) {
          asio::co_spawn(io_, poll_provider(rt.get(), &chain, &provider), asio::detached);
          asio::co_spawn(io_, recover_provider(rt.get(), &chain, &provider), asio::detached);
        }
      }
    }
  }
  co_await accept_loop();

  // Draining: wait for in-flight requests, within the grace period.
  asio::steady_timer timer(io_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.grace_ms);
  while (metrics_.in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
    timer.expires_after(std::chrono::milliseconds(20));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  for (auto* c : connections_) {
    boost::system::error_code ec;
    c->socket->shutdown(tcp::socket::shutdown_both, ec);
    c->socket->close(ec);
  }
  flush_state(true);  // nothing left to serve: may wait for the lock (a bounded wait)
}

void Server::shutdown() {
  if (draining_) return;
  draining_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  // Idle keep-alive connections: cancel their wait for a next request. One whose request already
  // arrived (its read completed, not yet resumed) still gets its answer, with Connection: close.
  for (auto* c : connections_) {
    if (!c->busy) c->socket->cancel(ec);
  }
}

asio::awaitable<void> Server::sweep_loop() {
  ++background_;
  asio::steady_timer timer(io_);
  // Also while draining: a slow client must not hold shutdown for the whole grace period.
  while (!draining_ || !connections_.empty()) {
    timer.expires_after(std::chrono::milliseconds(kSweepMs));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    const auto now = steady_us();
    for (auto* c : connections_) {
      // A client that left while its request is routed: stop the work (and free its memory) now,
      // not when the provider answers or times out.
      if (c->routing && !c->cancel->requested() && client_left(*c->socket)) c->cancel->request();
      if (c->deadline_us == 0 || now < c->deadline_us) continue;
      // The deadline stays: an operation that completed just before this cancel (its handler
      // queued) is followed by one that the next sweep cancels, and timed_out is checked too.
      c->timed_out = true;
      c->socket->cancel(ec);
    }
  }
  --background_;
}

asio::awaitable<void> Server::serve_connection(tcp::socket socket) {
  std::string remote;
  {
    boost::system::error_code ec;
    auto ep = socket.remote_endpoint(ec);
    if (!ec) remote = fmt::format("{}:{}", ep.address().to_string(), ep.port());
  }
  Cancellation cancel;  // the request being routed, when its client leaves
  Connection conn{&socket, &cancel};
  connections_.insert(&conn);
  {
    boost::system::error_code ec;
    socket.non_blocking(true, ec);  // write_some below never blocks the loop
  }
  enable_edge_reads(socket);
  beast::flat_buffer buffer;
  buffer.max_size(config_.max_body + 64 * 1024);
  Request req;
  req.remote = remote;
  std::string head;  // each response's status line and headers
  Reply reply;       // each response's status, body and extra headers
  RpcJob job;        // a JSON-RPC request being routed

  // Whatever happens in the loop, the connection leaves the set the sweeper and shutdown walk
  // (an exception escaping this frame would leave a dangling pointer there). Not an RAII guard:
  // a frame destroyed with the io_context at exit must not touch the Server.
  try {
    for (;;) {
      if (draining_) break;
      boost::system::error_code ec;
      // Wait for the next request as long as an idle connection may live, then give it the read
      // timeout for its headers and body (slow clients cannot hold a connection forever).
      if (buffer.size() == 0) {
        conn.expire_in(config_.idle_timeout_ms);
        // After an answer the client's next request has seldom arrived: a drained socket waits for
        // epoll instead of trying a recv that fails (rpcroute/edge_read.hpp).
        auto n = co_await async_read_some_edge(socket, buffer.prepare(16 * 1024),
                                               asio::redirect_error(asio::use_awaitable, ec));
        conn.deadline_us = 0;
        if (ec) break;
        buffer.commit(n);
      }
      conn.busy = true;
      metrics_.in_flight(+1);
      // A slow client is cancelled by the sweeper and still told 408. A request that has arrived
      // whole (the common case) is parsed from the buffer at once: no read operation for it, and
      // a plain one not even Beast's parser.
      conn.expire_in(config_.read_timeout_ms);
      bool complete = take_plain_request(buffer, config_.max_body, req);
      // A whole request read in one pass already holds its body: past the budget it is refused
      // with the same 503, and the connection goes on.
      const bool over_budget = complete && !body_budget_.take(conn.held, req.body.size());
      std::optional<RequestReader> parser;
      if (!complete) {
        parser.emplace(req, body_budget_, conn.held);
        parser->eager(true);
        parser->body_limit(config_.max_body);
        parser->header_limit(kHeaderLimit);
        complete = feed(*parser, buffer, ec);
      }
      bool continued = false;       // 100 Continue sent for this request
      bool answered_early = false;  // refused on its head: the answer is in `reply`, the body unread
      while (!complete && !ec) {
        if (conn.timed_out) {  // the sweeper's cancel came after the last read had completed
          ec = asio::error::operation_aborted;
          break;
        }
        // The head is in and accepted (a body over --max-body was refused at its Content-Length):
        // a client that waits for 100 Continue before its body (curl above 1 MiB) gets it now
        // rather than sending after its own timeout (curl: a whole second).
        if (req.expect_continue && !continued && req.version >= 11 && parser->is_header_done()) {
          continued = true;
          // What its head alone decides (Host, Origin, token, route, method) is answered now,
          // before the client sends a body for nothing. prepare() sees an empty body then: a
          // JSON-RPC route answers that with 200 and -32700, which is not a refusal.
          reply.reset();
          if (!prepare(req, reply, job) && reply.status != http::status::ok) {
            answered_early = true;
            break;
          }
          static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
          co_await asio::async_write(socket, asio::buffer(kContinue), asio::redirect_error(asio::use_awaitable, ec));
          if (ec) break;
        }
        const auto size = beast::read_size(buffer, 64 * 1024);
        if (size == 0) {
          ec = http::error::buffer_overflow;
          break;
        }
        auto n = co_await socket.async_read_some(buffer.prepare(size), asio::redirect_error(asio::use_awaitable, ec));
        if (ec == asio::error::eof) {
          // As http::async_read reports it: nothing at all, or a message cut short.
          ec = parser->got_some() ? beast::error_code(http::error::partial_message) : beast::error_code(http::error::end_of_stream);
          break;
        }
        if (ec) break;
        buffer.commit(n);
        complete = feed(*parser, buffer, ec);
      }
      conn.deadline_us = 0;
      if (ec) {
        const bool timed_out = conn.timed_out;
        std::optional<http::status> status;
        if (timed_out) status = http::status::request_timeout;
        else if (ec == http::error::body_limit) status = http::status::payload_too_large;
        else if (ec == http::error::header_limit) status = http::status::request_header_fields_too_large;
        else if (ec == asio::error::no_buffer_space) status = http::status::service_unavailable;
        else if (ec != http::error::end_of_stream && ec != asio::error::eof && ec != asio::error::connection_reset &&
                 ec != asio::error::operation_aborted)
          status = http::status::bad_request;
        if (status) {
          HttpResponse_ res{*status, 11};
          res.set(http::field::content_type, "application/json");
          res.set(http::field::connection, "close");
          if (*status == http::status::service_unavailable) {
            res.set(http::field::retry_after, "1");
            metrics_.on_refused("memory");
          }
          res.body() = json_error_body(
              ec == http::error::body_limit ? fmt::format("request body larger than {} bytes", config_.max_body)
              : ec == asio::error::no_buffer_space ? std::string(kBusyBytes)
              : timed_out ? fmt::format("request not received within the read timeout ({} ms; see --read-timeout)",
                                        config_.read_timeout_ms)
                          : ec.message());
          res.prepare_payload();
          metrics_.on_http(static_cast<int>(*status));
          conn.expire_in(5'000);
          const auto why = timed_out                           ? std::string("read timeout")
                           : ec == asio::error::no_buffer_space ? std::string("--max-inflight-mb reached")
                                                                : ec.message();  // before the write reuses ec
          co_await http::async_write(socket, res, asio::redirect_error(asio::use_awaitable, ec));
          // A refused body may still be on its way: closing on unread bytes would reset the
          // connection, and a reset can discard the answer before the client reads it. The
          // client sees the end of the answer at once; what it still sends is read and dropped,
          // for a second at most.
          if (!ec) socket.shutdown(tcp::socket::shutdown_send, ec);
          conn.expire_in(1'000);
          while (!ec && !conn.timed_out) {
            co_await socket.async_read_some(buffer.prepare(64 * 1024), asio::redirect_error(asio::use_awaitable, ec));
          }
          conn.deadline_us = 0;
          if (config_.verbose) log(fmt::format("{} {} - {} {}", iso_now(), remote, static_cast<int>(*status), why));
        }
        metrics_.in_flight(-1);
        conn.busy = false;
        break;
      }
      const auto started = steady_us();
      if (!answered_early) reply.reset();
      try {
        // What needs no provider is answered at once; a JSON-RPC request is routed here, in this
        // frame (a coroutine level less per request).
        if (answered_early) {
          // Refused on its head, before its body (100 Continue above).
        } else if (over_budget) {
          metrics_.on_refused("memory");
          reply.status = http::status::service_unavailable;
          reply.body = json_error_body(kBusyBytes);
          reply.header("Retry-After", "1");
        } else if (prepare(req, reply, job)) {
          const std::span<const jsonrpc::Call> calls(job.parsed.calls.data(), job.routed);
          // The sweeper watches the client meanwhile: if it leaves, the routing stops and its
          // upstream transfer is aborted, instead of holding the request until the provider answers.
          cancel.reset();
          job.options.cancel = &cancel;
          conn.routing = true;
          std::vector<CallOutcome> outs = co_await job.rt->router->route(*job.chain, calls, job.options);
          conn.routing = false;
          if (cancel.requested()) {
            metrics_.on_cancelled();
            if (config_.verbose) {
              log(fmt::format("{} {} {} {} - client left; request cancelled", iso_now(), remote, req.method_string,
                              req.target.substr(0, 200)));
            }
            break;
          }
          finish_rpc(job, outs, reply);
        }
      } catch (const std::exception& e) {
        // Every request gets an answer: an unexpected failure (out of memory, say) is a 500, and
        // the connection goes on.
        conn.routing = false;
        reply.reset();
        reply.status = http::status::internal_server_error;
        reply.body = json_error_body("internal error while answering this request");
        log(fmt::format("rpcroute: internal error answering {} {}: {}", req.method_string, req.target.substr(0, 200),
                        e.what()));
      }

      // The status line and headers are written by hand next to the body (one gathered send): what
      // Beast's serializer would produce, at a fraction of its cost per response.
      const bool keep_alive = req.keep_alive && !draining_ && !answered_early;
      response_head(head, reply.status, req.version, keep_alive,
                    !reply.body.empty() || reply.status != http::status::no_content ? reply.content_type
                                                                                    : std::string_view(),
                    reply.header_lines, reply.body.size());
      metrics_.on_http(static_cast<int>(reply.status));
      conn.expire_in(config_.read_timeout_ms);
      {
        // HEAD: headers only, with the length a GET would get.
        const bool head_only = req.method == http::verb::head;
        std::array<asio::const_buffer, 2> out{asio::buffer(head),
                                              head_only ? asio::const_buffer() : asio::buffer(reply.body)};
        // Most answers fit the socket's send buffer: one non-blocking send, and a write operation
        // only for what is left.
        if (const auto sent = socket.write_some(out, ec); !ec || ec == asio::error::would_block) {
          ec = {};
          if (advance(out, sent)) co_await asio::async_write(socket, out, asio::redirect_error(asio::use_awaitable, ec));
        }
      }
      conn.deadline_us = 0;
      metrics_.in_flight(-1);
      conn.busy = false;
      // A large request's buffer is not kept for the life of a keep-alive connection, and the
      // answer's body (the provider's buffer, moved in) is let go once written: 256 idle
      // connections must not each hold their last 200 KB answer.
      if (req.body.capacity() > 64 * 1024) std::string().swap(req.body);
      std::string().swap(reply.body);
      job.parsed.calls.clear();  // a batch's params, copied out of the request, go with it
      body_budget_.give_back(conn.held);
      if (config_.verbose) {
        const double ms = static_cast<double>(steady_us() - started) / 1000.0;
        std::string target = req.target.substr(0, 200);
        if (config_.json_logs) {
          json::Writer w;
          w.begin_object();
          w.key("ts");
          w.value(iso_now());
          w.key("remote");
          w.value(remote);
          w.key("method");
          w.value(req.method_string);
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
        } else {
          log(fmt::format("{} {} {} {} {} {} provider={} attempts={} {:.2f}ms", iso_now(), remote,
                          req.method_string, target, static_cast<int>(reply.status),
                          reply.rpc_method.empty() ? "-" : reply.rpc_method, reply.provider.empty() ? "-" : reply.provider,
                          reply.attempts, ms));
        }
      }
      if (ec || !keep_alive) break;
    }
  } catch (const std::exception& e) {
    log(fmt::format("rpcroute: internal error on a connection from {}: {}", remote, e.what()));
  }
  if (conn.busy) metrics_.in_flight(-1);
  body_budget_.give_back(conn.held);
  connections_.erase(&conn);
  boost::system::error_code ignored;
  socket.shutdown(tcp::socket::shutdown_both, ignored);
}

bool Server::prepare(const Request& req, Reply& reply, RpcJob& job) {
  auto error = [&](http::status status, std::string message) {
    reply.status = status;
    reply.body = json_error_body(message);
  };

  // DNS rebinding: only loopback names, unless remote access was asked for on a remote address.
  if (check_host_) {
    std::string_view host = req.host;
    // A client sends the same Host every time: the last one that passed is passed again as is.
    if (!host.empty() && host != last_good_host_) {
      if (!loopback_name(host_only(host)) && host_only(host) != lower(config_.host)) {
        error(http::status::forbidden, "Host header is not a loopback name");
        return false;
      }
      last_good_host_.assign(host);
    }
  }
  std::string_view origin = req.origin;
  if (!origin.empty()) {
    if (origin != last_good_origin_ && !origin_allowed(origin, config_.allow_origins)) {
      error(http::status::forbidden, fmt::format("origin {} is not allowed (see --allow-origin)", std::string(origin.substr(0, 200))));
      return false;
    }
    last_good_origin_.assign(origin);
    reply.header("Access-Control-Allow-Origin", origin);
    reply.header("Vary", "Origin");
    reply.header("Access-Control-Expose-Headers",
                               "X-Rpcroute-Provider, X-Rpcroute-Upstream-Latency, X-Rpcroute-Attempts, "
                               "X-Rpcroute-Strategy, X-Rpcroute-Cache, X-Rpcroute-Request-Id");
  }
  if (req.method == http::verb::options) {
    reply.status = http::status::no_content;
    reply.header("Access-Control-Allow-Methods", "POST, GET, OPTIONS");
    reply.header("Access-Control-Allow-Headers", "Content-Type, Authorization");
    reply.header("Access-Control-Max-Age", "600");
    return false;
  }
  // Clients post to the same path over and over: the last RPC route is kept with its target.
  if (route_cache_target_.empty() || req.target != route_cache_target_) {
    Route parsed_route = parse_route(req.target);
    if (parsed_route.kind != RouteKind::rpc) {
      route_cache_target_.clear();
      route_cache_ = std::move(parsed_route);
    } else {
      route_cache_ = std::move(parsed_route);
      route_cache_target_ = req.target;
    }
  }
  const Route route = route_cache_;
  if (!config_.token.empty() && route.kind != RouteKind::healthz) {
    std::string_view auth = req.authorization;
    // The scheme is case-insensitive (RFC 9110 section 11.1); the token is not.
    if (auth.size() < 7 || !beast::iequals(beast::string_view(auth.data(), 7), "Bearer ") ||
        !constant_time_equal(auth.substr(7), config_.token)) {
      error(http::status::unauthorized, "missing or wrong bearer token");
      reply.header("WWW-Authenticate", "Bearer");
      return false;
    }
  }
  if (route.kind == RouteKind::not_found) {
    reply.status = http::status::not_found;
    reply.body = json_error_body(route.problem, "routes", route_shapes_json());
    return false;
  }
  const bool is_get = req.method == http::verb::get || req.method == http::verb::head;
  if (route.kind != RouteKind::rpc) {
    if (!is_get) {
      error(http::status::method_not_allowed, "use GET");
      reply.header("Allow", "GET");
      return false;
    }
    const auto now = clock_.now_ms();
    if (route.kind == RouteKind::metrics) {
      std::vector<const Profile*> list;
      for (auto& [name, rt] : profiles_) list.push_back(&rt->profile);
      metrics_.edge(connections_.size(), body_budget_.used);
      reply.body = metrics_.render(list, store_.state(), now);
      reply.content_type = "text/plain; version=0.0.4";
      return false;
    }
    json::Writer w;
    w.begin_object();
    bool all_ok = true;
    if (route.kind == RouteKind::status) {
      w.key("profiles");
      w.begin_array();
      for (auto& [name, rt] : profiles_) {
        for (const auto& chain : rt->profile.chains) {
          RouteOptions opts;
          opts.strategy = config_.strategy;
          opts.with_stats = true;
          auto plan = rt->router->plan(chain, "eth_blockNumber", "[]", opts);
          write_plan_json(w, rt->profile, chain, "eth_blockNumber", plan, now, false);
        }
      }
      w.end_array();
      w.key("in_flight");
      w.value(metrics_.in_flight());
      w.key("request_bytes_in_flight");
      w.value(static_cast<std::int64_t>(body_budget_.used));
    } else {
      w.key("chains");
      w.begin_array();
      for (auto& [name, rt] : profiles_) {
        for (const auto& chain : rt->profile.chains) {
          auto plan = rt->router->plan(chain, "eth_blockNumber", "[]", {});
          w.begin_object();
          w.key("profile");
          w.value(name);
          w.key("chain");
          w.value(chain.name);
          // Open breakers let trials through when nothing else is usable; they are not usable.
          const auto usable = plan.breaker_trial ? 0 : static_cast<std::int64_t>(plan.candidates.size());
          w.key("usable");
          w.value(usable);
          w.end_object();
          all_ok = all_ok && usable > 0;
        }
      }
      w.end_array();
      w.key("status");
      w.value(all_ok ? "ok" : "degraded");
      if (!all_ok) reply.status = http::status::service_unavailable;
    }
    w.end_object();
    reply.body = w.take();
    return false;
  }

  if (req.method != http::verb::post) {
    error(http::status::method_not_allowed, "JSON-RPC routes take POST");
    reply.header("Allow", "POST, OPTIONS");
    return false;
  }
  ProfileRuntime* rt = runtime(route.target.profile);
  if (rt == nullptr) {
    error(http::status::not_found, fmt::format("unknown profile '{}'", route.target.profile));
    return false;
  }
  const Chain* chain = route.target.chain.empty() ? &rt->profile.chains.front() : rt->profile.find_chain(route.target.chain);
  if (chain == nullptr) {
    json::Writer names;
    names.begin_array();
    for (const auto& c : rt->profile.chains) names.value(c.name);
    names.end_array();
    reply.status = http::status::not_found;
    reply.body = json_error_body(fmt::format("unknown chain '{}' in profile '{}'", route.target.chain, rt->profile.name),
                                 "chains", names.str());
    return false;
  }
  if (route.target.provider && chain->find_provider(*route.target.provider) == nullptr) {
    error(http::status::not_found, fmt::format("unknown provider '{}' on chain {}", *route.target.provider, chain->name));
    return false;
  }

  auto parsed = jsonrpc::parse_body(req.body, req.body.capacity());
  if (!parsed) {
    reply.body = jsonrpc::make_error("null", parsed.error().code, parsed.error().message);
    return false;
  }
  job.rt = rt;
  job.chain = chain;
  job.parsed = std::move(*parsed);
  // A batch over --max-batch: its first items are routed and each of the others gets its own
  // error, so a client that matches answers by id fails only those calls (JSON-RPC 2.0 answers a
  // valid batch with an array, never with one error).
  job.routed = std::min(job.parsed.calls.size(), config_.max_batch);
  RouteOptions& options = job.options;
  options = RouteOptions{};
  options.strategy = route.target.strategy ? route.target.strategy : config_.strategy;
  options.provider = route.target.provider;
  options.keep_result = false;  // only responses are written: large results become them in place
  // {:08x}{:08x} of the prefix and the counter, without fmt or an allocation.
  char* const request_id_text = job.request_id_text;
  std::string_view request_id;
  if (request_prefix_ > 0xffffffffULL || request_counter_ + 1 > 0xffffffffULL) {
    const auto r = fmt::format_to_n(request_id_text, sizeof job.request_id_text, "{:08x}{:08x}", request_prefix_,
                                    ++request_counter_);
    request_id = std::string_view(request_id_text, std::min(r.size, sizeof job.request_id_text));
  } else {
    // Two hex digits per step from a table.
    static constexpr auto kHexPairs = [] {
      std::array<char, 512> t{};
      constexpr char hex[] = "0123456789abcdef";
      for (int b = 0; b < 256; ++b) {
        t[static_cast<std::size_t>(2 * b)] = hex[b >> 4];
        t[static_cast<std::size_t>(2 * b + 1)] = hex[b & 0xf];
      }
      return t;
    }();
    std::uint64_t v = (static_cast<std::uint64_t>(request_prefix_ & 0xffffffffULL) << 32) |
                      (static_cast<std::uint64_t>(++request_counter_) & 0xffffffffULL);
    for (int i = 7; i >= 0; --i, v >>= 8) std::memcpy(request_id_text + 2 * i, &kHexPairs[2 * (v & 0xff)], 2);
    request_id = std::string_view(request_id_text, 16);
  }
  job.request_id = request_id;
  return true;
}

void Server::finish_rpc(RpcJob& job, std::vector<CallOutcome>& outs, Reply& reply) {
  ProfileRuntime* rt = job.rt;
  const Chain* chain = job.chain;
  const jsonrpc::Body* parsed = &job.parsed;
  const std::string_view request_id = job.request_id;

  std::string providers;
  double latency = 0;
  std::size_t attempts = 0;
  std::size_t unavailable = 0;
  std::size_t routed = 0;
  std::int64_t retry_after = -1;
  Strategy strategy = outs.empty() ? Strategy::load_balanced : outs.front().strategy;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    const auto& o = outs[i];
    metrics_.on_call(rt->profile.name, chain->name, parsed->calls[i].method, o);
    attempts += o.attempts.size();
    latency = std::max(latency, o.upstream_latency_ms);
    if (!o.provider.empty() && providers.find(o.provider) == std::string::npos) {
      providers += providers.empty() ? o.provider : "," + o.provider;
    }
    if (o.status != CallOutcome::Status::invalid && o.status != CallOutcome::Status::local) ++routed;
    if (o.status == CallOutcome::Status::unavailable) {
      ++unavailable;
      if (o.retry_after_ms >= 0) retry_after = retry_after < 0 ? o.retry_after_ms : std::min(retry_after, o.retry_after_ms);
    }
  }
  if (parsed->batch) {
    std::string body = "[";
    for (const auto& o : outs) {
      if (o.response.empty()) continue;
      if (body.size() > 1) body.push_back(',');
      body += o.response;
    }
    const auto& calls = parsed->calls;
    for (std::size_t i = outs.size(); i < calls.size(); ++i) {
      if (!calls[i].has_id() && calls[i].valid()) continue;  // a notification: no answer
      if (body.size() > 1) body.push_back(',');
      body += jsonrpc::make_error(calls[i].reply_id(), jsonrpc::kInvalidRequest,
                                 fmt::format("invalid request: item {} of a batch of {} is beyond the limit of {} "
                                             "(--max-batch)",
                                             i + 1, calls.size(), config_.max_batch));
    }
    body.push_back(']');
    reply.body = body.size() > 2 ? std::move(body) : std::string();
  } else {
    reply.body = std::move(outs.front().response);
    if (config_.verbose) reply.rpc_method = parsed->calls.front().method;
  }
  if (reply.body.empty()) reply.status = http::status::no_content;  // notifications only
  if (routed > 0 && unavailable == routed) {
    reply.status = http::status::service_unavailable;
    if (retry_after >= 0) reply.header("Retry-After", std::to_string((retry_after + 999) / 1000));
  }
  if (config_.verbose) reply.provider = providers;
  reply.attempts = attempts;
  // The six X-Rpcroute headers of every RPC answer, written through a cursor in one append.
  const std::string_view provider_list = providers.empty() ? std::string_view("-") : std::string_view(providers);
  const std::string_view strategy_text = strategy_name(strategy);
  std::string& lines = reply.header_lines;
  const auto at = lines.size();
  lines.resize(at + 600 + provider_list.size() + strategy_text.size() + request_id.size());  // fixed parts < 200
  char* p = lines.data() + at;
  auto put = [&p](std::string_view piece) {
    std::memcpy(p, piece.data(), piece.size());
    p += piece.size();
  };
  put("X-Rpcroute-Provider: "sv);
  put(provider_list);
  put("\r\nX-Rpcroute-Upstream-Latency: "sv);
  // Milliseconds with 3 decimals. Latencies are whole microseconds, so integer arithmetic writes
  // what to_chars(fixed, 3) would, at a fraction of its cost; anything else (never seen) takes
  // to_chars, and any double in fixed notation fits the 400 bytes reserved for it.
  if (const double us = latency * 1000.0; latency >= 0 && latency < 1e12 && us == std::floor(us)) {
    const auto whole = static_cast<std::uint64_t>(us);
    p = std::to_chars(p, p + 24, whole / 1000).ptr;
    const auto frac = static_cast<unsigned>(whole % 1000);
    *p++ = '.';
    *p++ = static_cast<char>('0' + frac / 100);
    *p++ = static_cast<char>('0' + frac / 10 % 10);
    *p++ = static_cast<char>('0' + frac % 10);
  } else {
    p = std::to_chars(p, p + 400, latency, std::chars_format::fixed, 3).ptr;
  }
  put("\r\nX-Rpcroute-Attempts: "sv);
  p = std::to_chars(p, p + 24, attempts).ptr;
  put("\r\nX-Rpcroute-Strategy: "sv);
  put(strategy_text);
  put("\r\nX-Rpcroute-Cache: MISS\r\nX-Rpcroute-Request-Id: "sv);
  put(request_id);
  put("\r\n"sv);
  lines.resize(static_cast<std::size_t>(p - lines.data()));
  return;
}

}  // namespace rpcroute::sidecar

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <new>
#include <unordered_map>

#include "curl_pool.hpp"
#include "curl_support.hpp"
#include "native_http.hpp"
#include "rpcroute/clock.hpp"
#include "rpcroute/transport.hpp"
#include "rpcroute/transport/curl_api.hpp"

namespace rpcroute {

namespace {

struct MultiDeleter {
  void operator()(CURLM* m) const { curl::multi_cleanup(m); }
};
using MultiHandle = std::unique_ptr<CURLM, MultiDeleter>;

// Shared, not owned: curl refuses to free a share a handle still uses, so a transfer outliving its
// Engine (its coroutine frame destroyed with the io_context) holds the share until its own handle
// is freed, and the last holder frees it.
using ShareHandle = std::shared_ptr<CURLSH>;

// curl owns the socket; Asio only waits on it. The descriptor is released, never closed.
struct SocketWatch {
  explicit SocketWatch(asio::io_context& io, curl_socket_t fd) : fd(fd), descriptor(io, fd) {}
  curl_socket_t fd;
  asio::posix::stream_descriptor descriptor;
  int wanted = 0;  // CURL_POLL_IN / OUT / INOUT; 0 while the connection idles in curl's cache
  // A connection socket (on_sockopt to on_close_socket): its watch lives as long as the socket,
  // not one transfer: no epoll_ctl ADD and DEL, no allocation per request on a kept connection.
  bool kept = false;
  bool plain = false;  // plain http:// (HTTP/1): checked for unread bytes (retire_unclean_idle)
  bool reading = false;
  bool writing = false;
  bool closed = false;

  void release() {
    if (closed) return;
    closed = true;
    boost::system::error_code ec;
    descriptor.cancel(ec);
    (void)descriptor.release();
  }
};

}  // namespace

struct Transfer;

struct Engine::Core : std::enable_shared_from_this<Engine::Core> {
  explicit Core(asio::io_context& io)
      : io(io), timer(io), pool([this](CURL* e) { set_common_options(e); }) {}

  asio::io_context& io;
  std::shared_ptr<detail::NativeHttp> native;  // plain http:// to an address: no curl
  ShareHandle share;                           // TLS sessions, across every handle
  MultiHandle multi;
  asio::steady_timer timer;
  std::unordered_map<curl_socket_t, std::shared_ptr<SocketWatch>> sockets;
  detail::EasyPool pool;
  // Every socket curl has open, with a serial of its own: a ConnectionRef names a connection by
  // it, so that a socket number curl has since closed (and the system reused) is never touched.
  std::unordered_map<curl_socket_t, std::uint64_t> curl_sockets;
  std::uint64_t next_socket_serial = 1;
  std::size_t in_flight = 0;
  std::uint64_t timer_generation = 0;
  bool timer_armed = false;

  void check_done();
  void ensure_multi();
  void socket_action(curl_socket_t fd, int mask) {
    int running = 0;
    curl::multi_socket_action(multi.get(), fd, mask, &running);
    check_done();
  }

  void arm(const std::shared_ptr<SocketWatch>& w) {
    if ((w->wanted & CURL_POLL_IN) && !w->reading) wait(w, CURL_POLL_IN);
    if ((w->wanted & CURL_POLL_OUT) && !w->writing) wait(w, CURL_POLL_OUT);
  }

  /// A wait for `poll` (CURL_POLL_IN or OUT): its event goes to curl while a transfer wants it.
  void wait(const std::shared_ptr<SocketWatch>& w, int poll) {
    const bool in = poll == CURL_POLL_IN;
    (in ? w->reading : w->writing) = true;
    w->descriptor.async_wait(
        in ? asio::posix::stream_descriptor::wait_read : asio::posix::stream_descriptor::wait_write,
        [weak = weak_from_this(), w, in, poll](const boost::system::error_code& ec) {
          (in ? w->reading : w->writing) = false;
          auto core = weak.lock();
          if (w->closed || !core) return;
          if (ec) {
            on_wait_cancelled(*core, w, ec);
            return;
          }
          if ((w->wanted & poll) == 0) return;  // idle
          core->socket_action(w->fd, in ? CURL_CSELECT_IN : CURL_CSELECT_OUT);
          if (!w->closed) core->arm(w);
        });
  }

  /// A wait cancelled as its transfer ended (watch_socket), when a transfer took the connection
  /// meanwhile: curl looks at the socket first (an event with no wait queued is gone: Asio's
  /// epoll is edge-triggered), then the wait is queued again.
  static void on_wait_cancelled(Core& core, const std::shared_ptr<SocketWatch>& w,
                                const boost::system::error_code& ec) {
    if (ec != asio::error::operation_aborted || w->wanted == 0) return;
    core.socket_action(w->fd, 0);
    if (!w->closed) core.arm(w);
  }

  // Every callback curl calls catches everything: an exception must never unwind through libcurl's
  // C frames (it would leave the multi handle in an undefined state, or end the process). -1 makes
  // curl fail the transfers concerned, which then finish like any failed transfer.
  static int on_socket(CURL*, curl_socket_t fd, int what, void* userp, void*) noexcept {
    try {
      return watch_socket(static_cast<Core*>(userp), fd, what);
    } catch (...) {
      return -1;
    }
  }

  static int watch_socket(Core* core, curl_socket_t fd, int what) {
    if (what == CURL_POLL_REMOVE) {
      if (auto it = core->sockets.find(fd); it != core->sockets.end()) {
        // A kept connection stays registered; a wait left queued (curl read the answer in a
        // timer's action: its event was dropped) would hold a one-shot command's loop, run until
        // idle, until the server closed the connection. Usually none is (DECISIONS.md).
        if (auto& w = *it->second; w.kept) {
          w.wanted = 0;
          if (w.reading || w.writing) {
            boost::system::error_code ignored;
            w.descriptor.cancel(ignored);
          }
        } else {
          it->second->release();
          core->sockets.erase(it);
        }
      }
      return 0;
    }
    auto& w = core->sockets[fd];
    if (!w) {
      w = std::make_shared<SocketWatch>(core->io, fd);
      w->kept = core->curl_sockets.find(fd) != core->curl_sockets.end();
    }
    w->wanted = what;
    core->arm(w);
    return 0;
  }

  static int on_timer(CURLM*, long timeout_ms, void* userp) noexcept {
    try {
      return set_timer(static_cast<Core*>(userp), timeout_ms);
    } catch (...) {
      return -1;
    }
  }

  static int set_timer(Core* core, long timeout_ms) {
    ++core->timer_generation;  // a new callback replaces the previous timeout
    if (timeout_ms < 0) {
      if (core->timer_armed) core->timer.cancel();
      core->timer_armed = false;
      return 0;
    }
    std::weak_ptr<Core> weak = core->weak_from_this();
    const auto generation = core->timer_generation;
    if (timeout_ms == 0) {
      // "Act now" comes with almost every new transfer: a posted handler is far cheaper than
      // re-arming the timer (a timerfd_settime system call each time).
      asio::post(core->io, [weak, generation] {
        auto c = weak.lock();
        if (!c || c->timer_generation != generation) return;
        c->socket_action(CURL_SOCKET_TIMEOUT, 0);
      });
      return 0;
    }
    core->timer_armed = true;
    core->timer.expires_after(std::chrono::milliseconds(timeout_ms));
    core->timer.async_wait([weak, generation](const boost::system::error_code& ec) {
      auto c = weak.lock();
      if (ec || !c || c->timer_generation != generation) return;
      c->timer_armed = false;
      c->socket_action(CURL_SOCKET_TIMEOUT, 0);
    });
    return 0;
  }

  static int on_sockopt(void* userp, curl_socket_t fd, curlsocktype) noexcept {
    try {
      auto* core = static_cast<Core*>(userp);
      core->curl_sockets[fd] = core->next_socket_serial++;
    } catch (...) {
      return CURL_SOCKOPT_ERROR;
    }
    return CURL_SOCKOPT_OK;
  }

  static int on_close_socket(void* userp, curl_socket_t fd) noexcept {
    auto* core = static_cast<Core*>(userp);
    if (auto it = core->sockets.find(fd); it != core->sockets.end()) {
      it->second->release();  // out of epoll before the number can be reused
      core->sockets.erase(it);
    }
    if (auto it = core->curl_sockets.find(fd); it != core->curl_sockets.end()) {
      core->curl_sockets.erase(it);
    }
    return ::close(fd);
  }

  /// Shuts a kept HTTP/1 connection down while it sits idle in curl's cache: curl's check before
  /// reuse then finds it at its end and closes it. One in use by a transfer (watched) is left
  /// alone. What was received on it is dropped first: curl 7.88 takes a connection with unread
  /// bytes for alive, and would read them as the next answer.
  void close_connection(std::uint64_t serial) {
    for (const auto& [fd, s] : curl_sockets) {
      if (s != serial) continue;
      if (idle(fd)) retire(fd);
      return;
    }
  }

  /// No transfer is using the socket: curl asked for no events on it (it sits in the cache).
  [[nodiscard]] bool idle(curl_socket_t fd) const {
    auto it = sockets.find(fd);
    return it == sockets.end() || it->second->wanted == 0;
  }

  static void retire(curl_socket_t fd) {
    ::shutdown(fd, SHUT_RDWR);
    char sink[4096];
    while (::recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
  }

  /// Before curl may pick an idle plain http:// connection for a new transfer: one holding bytes
  /// nobody asked for (an extra answer, a late one) or the server's FIN is retired. (Over TLS,
  /// unread bytes are TLS's own records, and a desync still shows as a wrong id.) One poll(2) over
  /// every idle one: a recv each cost 64 system calls per request at 64 connections (issue 17).
  void retire_unclean_idle() {
    idle_fds.clear();
    for (const auto& [fd, w] : sockets) {
      if (w->plain && w->wanted == 0 && !w->closed) idle_fds.push_back(pollfd{fd, POLLIN, 0});
    }
    if (idle_fds.empty() || ::poll(idle_fds.data(), idle_fds.size(), 0) <= 0) return;
    for (const auto& p : idle_fds) {
      if (p.revents != 0) retire(p.fd);
    }
  }
  std::vector<pollfd> idle_fds;  // retire_unclean_idle's, kept to spare an allocation per request

  /// What every handle gets once, when the pool makes it (the set-up's options: EasyPool).
  void set_common_options(CURL* e);
};

struct Transfer {
  Transfer(const std::shared_ptr<Engine::Core>& core, HttpRequest req)
      : core(core), share(core->share), request(std::move(req)), done_signal(core->io) {}
  ~Transfer() {
    auto c = core.lock();
    if (!c) return;  // the handle is freed with the lease
    if (attached) {
      curl::multi_remove_handle(c->multi.get(), lease.easy.get());
      --c->in_flight;
    }
    c->pool.release(std::move(lease));
  }

  std::weak_ptr<Engine::Core> core;
  ShareHandle share;  // declared before the lease: freed after the handle that uses it
  HttpRequest request;
  detail::EasyPool::Lease lease;  // a handle set up for the request's provider
  HttpResponse response;
  asio::steady_timer done_signal;
  bool attached = false;
  bool done = false;
  std::int64_t started_us = 0;
  char error_buffer[CURL_ERROR_SIZE] = {};

  // Why the transfer was abandoned from a callback (returning a short count makes curl stop it
  // with CURLE_WRITE_ERROR): the answer's real failure, reported instead of curl's.
  TransportError abandoned = TransportError::none;
  bool encoded = false;           // a Content-Encoding other than identity: the body is not read
  bool retry_after_seen = false;  // the answer's first Retry-After is the one kept

  void abandon(TransportError why) {
    if (abandoned == TransportError::none) abandoned = why;
  }

  static std::size_t on_write(char* data, std::size_t size, std::size_t n, void* userp) noexcept {
    auto* t = static_cast<Transfer*>(userp);
    try {
      if (t->encoded) return 0;
      if (t->response.body.size() + size * n > t->request.max_response_bytes) {
        t->abandon(TransportError::too_large);
        return 0;
      }
      detail::check_body_capacity(t->response.body.size() + size * n);
      t->response.body.append(data, size * n);
      return size * n;
    } catch (const std::bad_alloc&) {
      t->abandon(TransportError::out_of_memory);
    } catch (...) {
      t->abandon(TransportError::other);
    }
    return 0;
  }

  static std::size_t on_header(char* data, std::size_t size, std::size_t n, void* userp) noexcept {
    auto* t = static_cast<Transfer*>(userp);
    try {
      return t->header(std::string_view(data, size * n)) ? size * n : 0;
    } catch (const std::bad_alloc&) {
      t->abandon(TransportError::out_of_memory);
    } catch (...) {
      t->abandon(TransportError::other);
    }
    return 0;
  }

  /// One header line; false abandons the transfer.
  bool header(std::string_view line) {
    auto field_is = [&](std::string_view key) {
      return line.size() > key.size() &&
             std::equal(key.begin(), key.end(), line.begin(), [](char a, char b) {
               return a == std::tolower(static_cast<unsigned char>(b));
             });
    };
    auto value_of = [&](std::string_view key) {
      auto v = line.substr(key.size());
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
      while (!v.empty() &&
             (v.back() == '\r' || v.back() == '\n' || v.back() == ' ' || v.back() == '\t'))
        v.remove_suffix(1);
      return v;
    };
    if (line.starts_with("HTTP/")) {  // a new answer (after an interim one)
      encoded = false;
      retry_after_seen = false;
      response.retry_after.clear();
    }
    constexpr std::string_view encoding_key = "content-encoding:";
    if (field_is(encoding_key)) {
      // Identity was asked for (Accept-Encoding: identity): anything else is not read at all, so
      // no decoder ever inflates a provider's bytes (a gzip bomb).
      const auto v = value_of(encoding_key);
      std::string lower(v);
      for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (!lower.empty() && lower != "identity") encoded = true;
      return true;
    }
    constexpr std::string_view length_key = "content-length:";
    if (field_is(length_key)) {
      // Reserve the whole body once (plus kBodySlack): no regrowth, no copies.
      auto v = line.substr(length_key.size());
      while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
      std::size_t length = 0;
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), length);
      if (ec == std::errc() && length > request.max_response_bytes) {
        abandon(TransportError::too_large);  // not one byte of it is read
        return false;
      }
      if (ec == std::errc() && length <= (std::size_t{1} << 31)) {
        detail::check_body_capacity(length + kBodySlack);
        response.body.reserve(length + kBodySlack);
      }
      return true;
    }
    constexpr std::string_view retry_key = "retry-after:";
    if (field_is(retry_key) && !retry_after_seen) {
      // The first field wins, as in the native client (a repeated one is the provider's slip);
      // the value without the spaces and tabs around it.
      retry_after_seen = true;
      response.retry_after.assign(value_of(retry_key));
    }
    return true;
  }
};

void Engine::Core::set_common_options(CURL* e) {
  curl::easy_setopt(e, CURLOPT_POST, 1L);
  curl::easy_setopt(e, CURLOPT_USERAGENT, "rpcroute/0.1");
  curl::easy_setopt(e, CURLOPT_WRITEFUNCTION, &Transfer::on_write);
  curl::easy_setopt(e, CURLOPT_HEADERFUNCTION, &Transfer::on_header);
  curl::easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl::easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
  curl::easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl::easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
  curl::easy_setopt(e, CURLOPT_SOCKOPTFUNCTION, &Engine::Core::on_sockopt);
  curl::easy_setopt(e, CURLOPT_SOCKOPTDATA, this);
  curl::easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, &Engine::Core::on_close_socket);
  curl::easy_setopt(e, CURLOPT_CLOSESOCKETDATA, this);
  curl::easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl::easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
  if (share) curl::easy_setopt(e, CURLOPT_SHARE, share.get());
}

void Engine::Core::check_done() {
  int pending = 0;
  while (CURLMsg* msg = curl::multi_info_read(multi.get(), &pending)) {
    if (msg->msg != CURLMSG_DONE) continue;
    Transfer* t = nullptr;
    curl::easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, reinterpret_cast<char**>(&t));
    if (t == nullptr || t->done) continue;
    CURLcode code = msg->data.result;
    auto& r = t->response;
    r.error = transport_error_of(code);
    if (code != CURLE_OK) {
      r.error_message =
          t->error_buffer[0] != '\0' ? std::string(t->error_buffer) : curl::easy_strerror(code);
      long verify = 0;
      curl::easy_getinfo(msg->easy_handle, CURLINFO_SSL_VERIFYRESULT, &verify);
      if (auto cause = tls_cause(code, verify, r.error_message)) {
        r.error = TransportError::tls;
        r.error_message = fmt::format("TLS: {} ({})", *cause, r.error_message);
      }
    }
    curl::easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &r.status);
    if (t->abandoned != TransportError::none) {
      r.error = t->abandoned;
      r.error_message = abandoned_message(t->abandoned, t->request.max_response_bytes);
      r.body.clear();
    } else if (t->encoded) {
      // An error status keeps its meaning (a 429 is still a rate limit); its body is not read.
      r.body.clear();
      if (r.status >= 200 && r.status <= 299) {
        r.error = TransportError::encoded;
        r.error_message = "answer has a Content-Encoding other than the identity asked for";
      } else {
        r.error = TransportError::none;
        r.error_message.clear();
      }
    }
    if (code == CURLE_OK && r.error == TransportError::none) {
      // An HTTP/1 connection curl kept can be named for close_connection (HTTP/2 streams carry
      // their own ids: an answer there cannot come out of step).
      long version = 0;
      curl_socket_t fd = CURL_SOCKET_BAD;
      curl::easy_getinfo(msg->easy_handle, CURLINFO_HTTP_VERSION, &version);
      curl::easy_getinfo(msg->easy_handle, CURLINFO_ACTIVESOCKET, &fd);
      if (version != CURL_HTTP_VERSION_2_0 && fd != CURL_SOCKET_BAD) {
        if (auto it = curl_sockets.find(fd); it != curl_sockets.end()) {
          r.connection = ConnectionRef{ConnectionRef::Client::curl, it->second};
          const char* scheme = nullptr;
          curl::easy_getinfo(msg->easy_handle, CURLINFO_SCHEME, &scheme);
          if (scheme != nullptr && (scheme[0] == 'h' || scheme[0] == 'H') &&
              std::strlen(scheme) == 4) {
            // "http", not "https": TLS's own records may arrive on an idle connection.
            if (auto w = sockets.find(fd); w != sockets.end()) w->second->plain = true;
          }
        }
      }
    }
    curl_off_t connect = 0;
    curl_off_t start = 0;
    curl::easy_getinfo(msg->easy_handle, CURLINFO_CONNECT_TIME_T, &connect);
    curl::easy_getinfo(msg->easy_handle, CURLINFO_STARTTRANSFER_TIME_T, &start);
    r.connect_us = connect;
    r.latency_us = steady_us() - t->started_us;
    t->done = true;
    t->done_signal.cancel();
  }
}

Engine::Engine(asio::io_context& io) : core_(std::make_shared<Core>(io)) {
  core_->native = std::make_shared<detail::NativeHttp>(io);
}

void Engine::Core::ensure_multi() {
  // On first use: a `call` whose providers are all served by the native client never pays for
  // curl_global_init (TLS library set-up) and the multi handle.
  if (multi) return;
  multi.reset(curl::multi_init());
  CURLM* m = multi.get();
  curl::multi_setopt(m, CURLMOPT_SOCKETFUNCTION, &Core::on_socket);
  curl::multi_setopt(m, CURLMOPT_SOCKETDATA, this);
  curl::multi_setopt(m, CURLMOPT_TIMERFUNCTION, &Core::on_timer);
  curl::multi_setopt(m, CURLMOPT_TIMERDATA, this);
  curl::multi_setopt(m, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
  curl::multi_setopt(m, CURLMOPT_MAXCONNECTS, 256L);
  // TLS sessions are kept per handle unless shared: with a pool of handles, a new connection
  // would otherwise resume only if its handle had made one to the same host before.
  if (CURLSH* s = curl::share_init()) share.reset(s, [](CURLSH* h) { curl::share_cleanup(h); });
  if (share) curl::share_setopt(share.get(), CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
}

Engine::~Engine() {
  // Release every descriptor before curl closes the sockets, then free the multi handle while
  // the io_context still exists.
  for (auto& [fd, w] : core_->sockets) w->release();
  core_->sockets.clear();
  core_->timer.cancel();
  core_->native->close_idle();
  core_->pool.clear();
  core_->multi.reset();
  core_->share.reset();
}

void Engine::close_connection(const ConnectionRef& connection) {
  switch (connection.client) {
    case ConnectionRef::Client::none:
      break;
    case ConnectionRef::Client::native:
      core_->native->close_connection(connection.id);
      break;
    case ConnectionRef::Client::curl:
      core_->close_connection(connection.id);
      break;
  }
}

std::size_t Engine::in_flight() const { return core_->in_flight + core_->native->in_flight(); }

// Not a coroutine itself: the native client's transfer is handed back as it is (one coroutine
// frame less per request); curl's is perform_curl.
asio::awaitable<HttpResponse> Engine::perform(HttpRequest request) {
  if (auto target = core_->native->target_for(request))
    return core_->native->perform(std::move(request), std::move(target));
  return perform_curl(std::move(request));
}

asio::awaitable<HttpResponse> Engine::perform_curl(HttpRequest request) {
  if (!init_curl()) {
    // libcurl is loaded on first use; a machine without it still serves what the native client
    // can, and says why the rest fails.
    HttpResponse r;
    r.error = TransportError::other;
    r.error_message = curl::load_error();
    co_return r;
  }
  core_->ensure_multi();
  auto t = std::make_unique<Transfer>(core_, std::move(request));
  static const std::vector<Header> no_headers;
  const auto& extra = t->request.headers != nullptr ? *t->request.headers : no_headers;
  const long version =
      t->request.http == HttpVersion::http2 ? CURL_HTTP_VERSION_2TLS : CURL_HTTP_VERSION_1_1;
  t->lease = core_->pool.acquire({version, extra, t->request.tls});
  CURL* e = t->lease.easy.get();
  if (e == nullptr) {
    t->response.error = TransportError::other;
    t->response.error_message = "curl_easy_init failed";
    co_return std::move(t->response);
  }
  // Only what changes per request: the rest was set once on the handle (EasyPool).
  curl::easy_setopt(e, CURLOPT_URL, t->request.url.c_str());
  curl::easy_setopt(e, CURLOPT_POSTFIELDS, t->request.body.data());
  curl::easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
                    static_cast<curl_off_t>(t->request.body.size()));
  curl::easy_setopt(e, CURLOPT_WRITEDATA, t.get());
  curl::easy_setopt(e, CURLOPT_HEADERDATA, t.get());
  curl::easy_setopt(e, CURLOPT_PRIVATE, t.get());
  curl::easy_setopt(e, CURLOPT_ERRORBUFFER, t->error_buffer);
  curl::easy_setopt(e, CURLOPT_TIMEOUT_MS,
                    static_cast<long>(std::max<std::int64_t>(1, t->request.timeout_ms)));
  curl::easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                    static_cast<long>(std::clamp<std::int64_t>(t->request.timeout_ms, 1, 5'000)));

  core_->retire_unclean_idle();

  t->started_us = steady_us();
  t->done_signal.expires_at(asio::steady_timer::time_point::max());
  if (curl::multi_add_handle(core_->multi.get(), e) != CURLM_OK) {
    t->response.error = TransportError::other;
    t->response.error_message = "curl_multi_add_handle failed";
    co_return std::move(t->response);
  }
  t->attached = true;
  ++core_->in_flight;
  // A cancelled transfer ends here; the Transfer's destructor takes it out of the multi handle,
  // which aborts it and closes its connection.
  Cancellation* const cancel = t->request.cancel;
  if (cancel != nullptr) {
    cancel->on_request([tp = t.get()] {
      if (tp->done) return;
      tp->done = true;
      tp->response.error = TransportError::cancelled;
      tp->response.error_message = "cancelled";
      tp->done_signal.cancel();
    });
  }
  while (!t->done) {
    boost::system::error_code ec;
    co_await t->done_signal.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  if (cancel != nullptr) cancel->clear_hook();
  co_return std::move(t->response);
}

}  // namespace rpcroute

#include <algorithm>
#include <charconv>
#include <unordered_map>

#include <curl/curl.h>
#include <fmt/format.h>

#include "rpcroute/clock.hpp"
#include "rpcroute/transport.hpp"
#include "native_http.hpp"

namespace rpcroute {

void init_curl() {
  static const bool initialised = [] { return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; }();
  (void)initialised;
}

namespace {

struct EasyDeleter {
  void operator()(CURL* e) const { curl_easy_cleanup(e); }
};
using EasyHandle = std::unique_ptr<CURL, EasyDeleter>;

struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using Slist = std::unique_ptr<curl_slist, SlistDeleter>;

struct MultiDeleter {
  void operator()(CURLM* m) const { curl_multi_cleanup(m); }
};
using MultiHandle = std::unique_ptr<CURLM, MultiDeleter>;

// curl owns the socket; Asio only waits on it. The descriptor is released, never closed.
struct SocketWatch {
  explicit SocketWatch(asio::io_context& io, curl_socket_t fd) : fd(fd), descriptor(io, fd) {}
  curl_socket_t fd;
  asio::posix::stream_descriptor descriptor;
  int wanted = 0;  // CURL_POLL_IN / OUT / INOUT
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

TransportError transport_error_of(CURLcode code) {
  switch (code) {
    case CURLE_OK: return TransportError::none;
    case CURLE_COULDNT_CONNECT: return TransportError::connect;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY: return TransportError::dns;
    case CURLE_OPERATION_TIMEDOUT: return TransportError::timeout;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE: return TransportError::tls;
    case CURLE_PARTIAL_FILE: return TransportError::truncated;
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR: return TransportError::reset;
    default: return TransportError::other;
  }
}

}  // namespace

struct Transfer;

struct Engine::Core : std::enable_shared_from_this<Engine::Core> {
  explicit Core(asio::io_context& io) : io(io), timer(io) {}

  asio::io_context& io;
  std::shared_ptr<detail::NativeHttp> native;  // plain http:// to an address: no curl
  MultiHandle multi;
  asio::steady_timer timer;
  std::unordered_map<curl_socket_t, std::shared_ptr<SocketWatch>> sockets;
  std::vector<EasyHandle> idle_easy;
  std::size_t in_flight = 0;
  std::uint64_t timer_generation = 0;
  bool timer_armed = false;

  void check_done();
  void ensure_multi();
  void socket_action(curl_socket_t fd, int mask) {
    int running = 0;
    curl_multi_socket_action(multi.get(), fd, mask, &running);
    check_done();
  }

  void arm(const std::shared_ptr<SocketWatch>& w) {
    std::weak_ptr<Core> weak = weak_from_this();
    if ((w->wanted & CURL_POLL_IN) && !w->reading) {
      w->reading = true;
      w->descriptor.async_wait(asio::posix::stream_descriptor::wait_read,
                               [weak, w](const boost::system::error_code& ec) {
                                 w->reading = false;
                                 auto core = weak.lock();
                                 if (ec || w->closed || !core) return;
                                 core->socket_action(w->fd, CURL_CSELECT_IN);
                                 if (!w->closed) core->arm(w);
                               });
    }
    if ((w->wanted & CURL_POLL_OUT) && !w->writing) {
      w->writing = true;
      w->descriptor.async_wait(asio::posix::stream_descriptor::wait_write,
                               [weak, w](const boost::system::error_code& ec) {
                                 w->writing = false;
                                 auto core = weak.lock();
                                 if (ec || w->closed || !core) return;
                                 core->socket_action(w->fd, CURL_CSELECT_OUT);
                                 if (!w->closed) core->arm(w);
                               });
    }
  }

  static int on_socket(CURL*, curl_socket_t fd, int what, void* userp, void*) {
    auto* core = static_cast<Core*>(userp);
    if (what == CURL_POLL_REMOVE) {
      if (auto it = core->sockets.find(fd); it != core->sockets.end()) {
        it->second->release();
        core->sockets.erase(it);
      }
      return 0;
    }
    auto& w = core->sockets[fd];
    if (!w) w = std::make_shared<SocketWatch>(core->io, fd);
    w->wanted = what;
    core->arm(w);
    return 0;
  }

  static int on_timer(CURLM*, long timeout_ms, void* userp) {
    auto* core = static_cast<Core*>(userp);
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

  EasyHandle acquire() {
    if (!idle_easy.empty()) {
      EasyHandle e = std::move(idle_easy.back());
      idle_easy.pop_back();
      curl_easy_reset(e.get());
      return e;
    }
    return EasyHandle(curl_easy_init());
  }

  void recycle(EasyHandle e) {
    if (e && idle_easy.size() < 64) idle_easy.push_back(std::move(e));
  }
};

struct Transfer {
  Transfer(const std::shared_ptr<Engine::Core>& core, HttpRequest req)
      : core(core), request(std::move(req)), done_signal(core->io) {}
  ~Transfer() {
    if (attached) {
      if (auto c = core.lock()) {
        curl_multi_remove_handle(c->multi.get(), easy.get());
        --c->in_flight;
        c->recycle(std::move(easy));
      }
    }
  }

  std::weak_ptr<Engine::Core> core;
  HttpRequest request;
  EasyHandle easy;
  Slist headers;
  HttpResponse response;
  asio::steady_timer done_signal;
  bool attached = false;
  bool done = false;
  std::int64_t started_us = 0;
  char error_buffer[CURL_ERROR_SIZE] = {};

  static std::size_t on_write(char* data, std::size_t size, std::size_t n, void* userp) {
    auto* t = static_cast<Transfer*>(userp);
    t->response.body.append(data, size * n);
    return size * n;
  }

  static std::size_t on_header(char* data, std::size_t size, std::size_t n, void* userp) {
    auto* t = static_cast<Transfer*>(userp);
    std::string_view line(data, size * n);
    constexpr std::string_view length_key = "content-length:";
    if (line.size() > length_key.size() && std::equal(length_key.begin(), length_key.end(), line.begin(), [](char a, char b) {
          return a == std::tolower(static_cast<unsigned char>(b));
        })) {
      // Reserve the whole body once (plus kBodySlack): no regrowth, no copies.
      auto v = line.substr(length_key.size());
      while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
      std::size_t length = 0;
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), length);
      if (ec == std::errc() && length <= (std::size_t{1} << 31)) t->response.body.reserve(length + kBodySlack);
      return size * n;
    }
    constexpr std::string_view key = "retry-after:";
    if (line.size() > key.size()) {
      bool match = true;
      for (std::size_t i = 0; i < key.size(); ++i) {
        if (std::tolower(static_cast<unsigned char>(line[i])) != key[i]) {
          match = false;
          break;
        }
      }
      if (match) {
        auto v = line.substr(key.size());
        while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
        while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ')) v.remove_suffix(1);
        t->response.retry_after.assign(v);
      }
    }
    return size * n;
  }
};

void Engine::Core::check_done() {
  int pending = 0;
  while (CURLMsg* msg = curl_multi_info_read(multi.get(), &pending)) {
    if (msg->msg != CURLMSG_DONE) continue;
    Transfer* t = nullptr;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, reinterpret_cast<char**>(&t));
    if (t == nullptr || t->done) continue;
    CURLcode code = msg->data.result;
    auto& r = t->response;
    r.error = transport_error_of(code);
    if (code != CURLE_OK) {
      r.error_message = t->error_buffer[0] != '\0' ? std::string(t->error_buffer) : curl_easy_strerror(code);
    }
    curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &r.status);
    curl_off_t connect = 0;
    curl_off_t start = 0;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_CONNECT_TIME_T, &connect);
    curl_easy_getinfo(msg->easy_handle, CURLINFO_STARTTRANSFER_TIME_T, &start);
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
  init_curl();
  multi.reset(curl_multi_init());
  CURLM* m = multi.get();
  curl_multi_setopt(m, CURLMOPT_SOCKETFUNCTION, &Core::on_socket);
  curl_multi_setopt(m, CURLMOPT_SOCKETDATA, this);
  curl_multi_setopt(m, CURLMOPT_TIMERFUNCTION, &Core::on_timer);
  curl_multi_setopt(m, CURLMOPT_TIMERDATA, this);
  curl_multi_setopt(m, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
  curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, 256L);
}

Engine::~Engine() {
  // Release every descriptor before curl closes the sockets, then free the multi handle while
  // the io_context still exists.
  for (auto& [fd, w] : core_->sockets) w->release();
  core_->sockets.clear();
  core_->timer.cancel();
  core_->native->close_idle();
  core_->idle_easy.clear();
  core_->multi.reset();
}

std::size_t Engine::in_flight() const { return core_->in_flight + core_->native->in_flight(); }

// Not a coroutine itself: the native client's transfer is handed back as it is (one coroutine
// frame less per request); curl's is perform_curl.
asio::awaitable<HttpResponse> Engine::perform(HttpRequest request) {
  if (auto target = core_->native->target_for(request)) return core_->native->perform(std::move(request), std::move(target));
  return perform_curl(std::move(request));
}

asio::awaitable<HttpResponse> Engine::perform_curl(HttpRequest request) {
  core_->ensure_multi();
  auto t = std::make_unique<Transfer>(core_, std::move(request));
  t->easy = core_->acquire();
  CURL* e = t->easy.get();
  if (e == nullptr) {
    t->response.error = TransportError::other;
    t->response.error_message = "curl_easy_init failed";
    co_return std::move(t->response);
  }
  curl_easy_setopt(e, CURLOPT_URL, t->request.url.c_str());
  curl_easy_setopt(e, CURLOPT_POST, 1L);
  curl_easy_setopt(e, CURLOPT_POSTFIELDS, t->request.body.data());
  curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(t->request.body.size()));
  curl_slist* list = curl_slist_append(nullptr, "Content-Type: application/json");
  list = curl_slist_append(list, "Accept: application/json");
  list = curl_slist_append(list, "Expect:");  // no 100-continue round trip on large bodies
  if (t->request.headers != nullptr) {
    for (const auto& h : *t->request.headers) {
      list = curl_slist_append(list, fmt::format("{}: {}", h.name, h.value).c_str());
    }
  }
  t->headers.reset(list);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(e, CURLOPT_USERAGENT, "rpcroute/0.1");
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Transfer::on_write);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &Transfer::on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, t.get());
  curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->error_buffer);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<std::int64_t>(1, t->request.timeout_ms)));
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(std::clamp<std::int64_t>(t->request.timeout_ms, 1, 5'000)));
  curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_2TLS);
  curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
  curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "");
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);

  t->started_us = steady_us();
  t->done_signal.expires_at(asio::steady_timer::time_point::max());
  if (curl_multi_add_handle(core_->multi.get(), e) != CURLM_OK) {
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

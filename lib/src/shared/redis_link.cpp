// One hiredis async connection on the io_context (redis_link.hpp), with the Asio adapter.
#include "redis_link.hpp"

#include <fmt/format.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <boost/asio/ssl.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>

#include "../transport/native_tls.hpp"

namespace rpcroute::shared {

Reply reduce_reply(const redisReply* r) {
  Reply out;
  if (r == nullptr) return out;
  auto scalar = [](const redisReply* e) -> std::optional<std::string> {
    switch (e->type) {
      case REDIS_REPLY_STRING:
      case REDIS_REPLY_STATUS:
      case REDIS_REPLY_ERROR:
        return std::string(e->str, e->len);
      case REDIS_REPLY_INTEGER:
        return std::to_string(e->integer);
      default:
        return std::nullopt;
    }
  };
  switch (r->type) {
    case REDIS_REPLY_NIL:
      out.kind = Reply::Kind::nil;
      break;
    case REDIS_REPLY_ERROR:
      out.kind = Reply::Kind::error;
      out.text.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      out.kind = Reply::Kind::string;
      out.text.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.kind = Reply::Kind::integer;
      out.integer = r->integer;
      out.text = std::to_string(r->integer);
      break;
    case REDIS_REPLY_ARRAY:
      out.kind = Reply::Kind::array;
      out.items.reserve(r->elements);
      for (std::size_t i = 0; i < r->elements; ++i) out.items.push_back(scalar(r->element[i]));
      break;
    default:
      out.kind = Reply::Kind::nil;
  }
  return out;
}

/// A command's callback while it waits; deleted after its reply (or at the end for a persistent
/// one).
struct RedisLink::Pending {
  RedisLink* link;
  OnReply on_reply;
  bool persistent;
  std::shared_ptr<bool> alive;
};

/// The Asio adapter: hiredis says when it wants to read or write; one wait of each kind is armed
/// at a time. Kept alive by its pending waits, so that a wait that completes after hiredis freed
/// the context (cleanup) finds it and does nothing.
struct RedisLink::Watch : std::enable_shared_from_this<Watch> {
  Watch(asio::io_context& io, redisAsyncContext* context, int fd, RedisLink* owner)
      : sd(io, fd), ac(context), link(owner), alive(owner->alive_) {}

  asio::posix::stream_descriptor sd;
  redisAsyncContext* ac;  // null once hiredis freed it
  RedisLink* link;
  std::weak_ptr<bool> alive;  // the link's
  bool want_read = false;
  bool want_write = false;
  bool read_armed = false;
  bool write_armed = false;
  std::shared_ptr<Watch> self;  // the context's reference, dropped at cleanup

  void arm(bool read) {
    bool& armed = read ? read_armed : write_armed;
    if (ac == nullptr || armed || !(read ? want_read : want_write)) return;
    armed = true;
    const auto kind = read ? asio::posix::stream_descriptor::wait_read
                           : asio::posix::stream_descriptor::wait_write;
    sd.async_wait(kind, [w = shared_from_this(), read](const boost::system::error_code& ec) {
      (read ? w->read_armed : w->write_armed) = false;
      if (ec || w->ac == nullptr || !(read ? w->want_read : w->want_write)) return;
      if (read) {
        redisAsyncHandleRead(w->ac);
      } else {
        redisAsyncHandleWrite(w->ac);
      }
      w->arm(read);  // the context may be gone: then ac is null and nothing is armed
    });
  }

  static Watch* of(void* p) { return static_cast<Watch*>(p); }
  static void add_read(void* p) {
    of(p)->want_read = true;
    of(p)->arm(true);
  }
  static void del_read(void* p) { of(p)->want_read = false; }
  static void add_write(void* p) {
    of(p)->want_write = true;
    of(p)->arm(false);
  }
  static void del_write(void* p) { of(p)->want_write = false; }
  static void cleanup(void* p) {
    auto* w = of(p);
    // hiredis frees the context: asked by close() (the link let go of it first), or on its own —
    // a failed connect (no disconnect callback then), an error, the server closing.
    if (auto a = w->alive.lock(); a && *a && w->link->ac_ == w->ac) w->link->lost(w->ac);
    w->ac = nullptr;
    w->want_read = w->want_write = false;
    boost::system::error_code ignored;
    w->sd.cancel(ignored);
    (void)w->sd.release();  // hiredis closes the socket itself
    w->self.reset();        // may destroy w once no wait holds it
  }
};

namespace {

/// The OpenSSL contexts of rediss:// links, one per distinct tls: settings, made like the native
/// HTTP client's (native_tls.hpp: the same CA, client certificate and insecure handling).
detail::TlsContexts& tls_contexts(std::unique_lock<std::mutex>& lock) {
  static std::mutex mutex;
  static detail::TlsContexts contexts;
  lock = std::unique_lock(mutex);
  return contexts;
}

constexpr std::size_t kRelayBuffer = 16 * 1024;  // per direction: a read waits for its write

}  // namespace

/// rediss://: hiredis's UNIX socket on one side, the TLS connection to Redis on the other.
/// Kept alive by its coroutines; stop() closes both sockets, which ends them.
struct RedisLink::Relay : std::enable_shared_from_this<Relay> {
  Relay(asio::io_context& io, asio::ssl::context& ctx) : local(io), tls(io, ctx), limit(io) {}

  asio::local::stream_protocol::socket local;  // hiredis's connection, accepted
  asio::ssl::stream<asio::ip::tcp::socket> tls;
  asio::steady_timer limit;
  std::string stage = "connect";  // empty once bytes flow
  std::string reason;             // why it ended, as the relay saw it (empty: not ended by it)
  bool timed_out = false;
  bool stopped = false;
  bool heard = false;            // Redis sent something after the handshake
  bool has_client_cert = false;  // tls.cert_file given

  void stop() {
    if (stopped) return;
    stopped = true;
    boost::system::error_code ignored;
    limit.cancel();
    local.close(ignored);
    tls.lowest_layer().close(ignored);
  }
  void fail(std::string why) {
    if (reason.empty() && !stopped) reason = std::move(why);
    stop();
  }

  asio::awaitable<void> run(std::string host, int port, std::int64_t connect_ms) {
    auto self = shared_from_this();
    limit.expires_after(std::chrono::milliseconds(connect_ms));
    limit.async_wait([w = std::weak_ptr<Relay>(self)](const boost::system::error_code& e) {
      auto r = w.lock();
      if (!r || e || r->stage.empty()) return;
      r->timed_out = true;
      boost::system::error_code ignored;
      r->tls.lowest_layer().close(ignored);
    });
    boost::system::error_code ec;
    // An address is used as is; a name is resolved in place (blocking, as hiredis does).
    std::vector<asio::ip::tcp::endpoint> found;
    if (auto address = asio::ip::make_address(host, ec); !ec) {
      found.emplace_back(address, static_cast<std::uint16_t>(port));
    } else {
      ec = {};
      asio::ip::tcp::resolver resolver(tls.get_executor());
      for (const auto& e : resolver.resolve(host, std::to_string(port), ec))
        found.push_back(e.endpoint());
      if (ec || found.empty()) {
        fail(fmt::format("cannot resolve {}: {}", host, ec ? ec.message() : "no address"));
        co_return;
      }
    }
    co_await asio::async_connect(tls.lowest_layer(), found,
                                 asio::redirect_error(asio::use_awaitable, ec));
    if (!ec) {
      stage = "TLS handshake";
      co_await tls.async_handshake(asio::ssl::stream_base::client,
                                   asio::redirect_error(asio::use_awaitable, ec));
    }
    if (ec) {
      if (timed_out) {
        fail(fmt::format("no {} within {} ms", stage, connect_ms));
      } else if (stage == "connect") {
        fail(fmt::format("connect: {}", ec.message()));
      } else {
        fail(detail::tls_handshake_error(tls.native_handle(), ec));
      }
      co_return;
    }
    stage.clear();
    limit.cancel();
    if (stopped) co_return;
    auto ex = tls.get_executor();
    asio::co_spawn(ex, self->to_redis(), asio::detached);
    co_await from_redis();
  }

  /// hiredis's commands out to Redis.
  asio::awaitable<void> to_redis() {
    auto self = shared_from_this();
    std::array<char, kRelayBuffer> buf;
    boost::system::error_code ec;
    while (!stopped) {
      const auto n = co_await local.async_read_some(asio::buffer(buf),
                                                    asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;  // hiredis let go (close()), or the link is stopping
      co_await asio::async_write(tls, asio::buffer(buf.data(), n),
                                 asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        fail(early_close(ec).value_or(write_error(ec)));
        co_return;
      }
    }
    stop();
  }

  /// A TLS 1.3 Redis that requires a client certificate refuses a connection without one after
  /// the handshake. Its alert comes with the first read (read_error), unless the reset that
  /// follows it got there first and dropped it: then the connection is closed or reset before
  /// Redis said anything, and the error names that likely cause.
  [[nodiscard]] std::optional<std::string> early_close(const boost::system::error_code& ec) {
    if (heard || has_client_cert || SSL_version(tls.native_handle()) != TLS1_3_VERSION)
      return std::nullopt;
    if (!detail::tls_alert_message(ec).empty()) return std::nullopt;  // the alert says it
    if (ec != asio::error::connection_reset && ec != asio::error::eof &&
        ec != asio::error::broken_pipe && ec != asio::ssl::error::stream_truncated)
      return std::nullopt;
    return fmt::format(
        "TLS: Redis closed the connection right after the handshake, before any reply ({}); a "
        "server that requires a client certificate does so: set tls.cert_file",
        ec.message());
  }

  /// Redis's replies in to hiredis.
  asio::awaitable<void> from_redis() {
    auto self = shared_from_this();
    std::array<char, kRelayBuffer> buf;
    boost::system::error_code ec;
    while (!stopped) {
      const auto n = co_await tls.async_read_some(asio::buffer(buf),
                                                  asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        fail(early_close(ec).value_or(read_error(ec)));
        co_return;
      }
      heard = true;
      co_await asio::async_write(local, asio::buffer(buf.data(), n),
                                 asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;
    }
    stop();
  }

  static std::string read_error(const boost::system::error_code& ec) {
    // A TLS 1.3 server refuses a client certificate after the client's handshake: its alert
    // comes with the first read.
    if (auto alert = detail::tls_alert_message(ec); !alert.empty()) return alert;
    if (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated)
      return "the TLS connection was closed by Redis";
    if (detail::is_tls_error(ec)) return fmt::format("TLS: {}", ec.message());
    return ec.message();
  }
  static std::string write_error(const boost::system::error_code& ec) {
    if (detail::is_tls_error(ec)) return fmt::format("TLS: {}", ec.message());
    return ec.message();
  }
};

bool RedisLink::open_relay(std::string& why) {
  std::shared_ptr<asio::ssl::context> shared;
  {
    std::unique_lock<std::mutex> lock;
    const auto& context = tls_contexts(lock).get(&tls_);
    if (!context.error.empty()) {
      why = context.error;
      return false;
    }
    // Asio's ssl::context holds a reference of its own on the shared SSL_CTX.
    SSL_CTX_up_ref(context.ctx);
    shared = std::make_shared<asio::ssl::context>(context.ctx);
  }
  auto relay = std::make_shared<Relay>(io_, *shared);
  relay->has_client_cert = !tls_.cert_file.empty();
  detail::set_peer_host(relay->tls.native_handle(), url_.host, tls_.insecure);

  // A private folder (0700) for hiredis's socket: no other user can reach it, and it is gone
  // once the one connection is accepted.
  std::string base = "/tmp";
  if (const char* t = std::getenv("TMPDIR"); t != nullptr && t[0] != '\0' && std::strlen(t) < 64)
    base = t;
  std::string dir = base + "/rpcroute-redis-XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) {
    why = fmt::format("TLS relay: cannot make a folder in {}: {}", base, std::strerror(errno));
    return false;
  }
  const std::string path = dir + "/s";
  auto cleanup = [&] {
    ::unlink(path.c_str());
    ::rmdir(dir.c_str());
  };
  boost::system::error_code ec;
  asio::local::stream_protocol::acceptor acceptor(io_);
  acceptor.open(asio::local::stream_protocol(), ec);
  if (!ec) acceptor.bind(asio::local::stream_protocol::endpoint(path), ec);
  if (!ec) acceptor.listen(1, ec);
  if (!ec) acceptor.non_blocking(true, ec);
  if (ec) {
    cleanup();
    why = fmt::format("TLS relay: cannot listen on a local socket: {}", ec.message());
    return false;
  }
  redisAsyncContext* ac = redisAsyncConnectUnix(path.c_str());
  if (ac == nullptr || ac->err != 0) {
    why = ac == nullptr ? "out of memory" : ac->errstr;
    if (ac != nullptr) redisAsyncFree(ac);
    cleanup();
    return false;
  }
  // A UNIX connect completes at once: its connection is waiting in the backlog.
  acceptor.accept(relay->local, ec);
  acceptor.close();
  cleanup();
  if (ec) {
    redisAsyncFree(ac);
    why = fmt::format("TLS relay: hiredis's connection was not accepted: {}", ec.message());
    return false;
  }
  relay_ = relay;
  asio::co_spawn(
      io_,
      [relay, shared, host = url_.host, port = url_.port,
       ms = connect_ms_]() -> asio::awaitable<void> { co_await relay->run(host, port, ms); },
      asio::detached);
  return attach(ac, why);
}

RedisLink::RedisLink(asio::io_context& io, const Clock& clock, RedisUrl url, OnLost on_lost,
                     const TlsOptions* tls, std::int64_t connect_ms)
    : io_(io),
      clock_(clock),
      url_(std::move(url)),
      on_lost_(std::move(on_lost)),
      tls_(tls != nullptr ? *tls : TlsOptions{}),
      connect_ms_(connect_ms) {}

RedisLink::~RedisLink() {
  *alive_ = false;
  close();
}

bool RedisLink::open(std::string& why) {
  close();
  if (url_.tls) return open_relay(why);
  redisAsyncContext* ac = redisAsyncConnect(url_.host.c_str(), url_.port);
  if (ac == nullptr) {
    why = "out of memory";
    return false;
  }
  if (ac->err != 0) {
    why = ac->errstr;
    redisAsyncFree(ac);
    return false;
  }
  return attach(ac, why);
}

std::string RedisLink::relay_stage() const { return relay_ ? relay_->stage : std::string(); }

bool RedisLink::attach(redisAsyncContext* ac, std::string& /*why*/) {
  ac->data = this;
  auto watch = std::make_shared<Watch>(io_, ac, ac->c.fd, this);
  watch->self = watch;
  ac->ev.data = watch.get();
  ac->ev.addRead = &Watch::add_read;
  ac->ev.delRead = &Watch::del_read;
  ac->ev.addWrite = &Watch::add_write;
  ac->ev.delWrite = &Watch::del_write;
  ac->ev.cleanup = &Watch::cleanup;
  redisAsyncSetDisconnectCallback(ac, &RedisLink::on_disconnect);
  ac_ = ac;
  // The non-blocking connect completes when the socket turns writable.
  Watch::add_read(watch.get());
  Watch::add_write(watch.get());
  return true;
}

void RedisLink::close() {
  if (relay_) {
    relay_->stop();
    relay_.reset();
  }
  if (ac_ == nullptr) return;
  auto* ac = ac_;
  ac_ = nullptr;  // on_disconnect then knows it was asked for
  ac->data = nullptr;
  redisAsyncFree(ac);
  sent_us_.clear();
}

bool RedisLink::command(const std::vector<std::string_view>& args, OnReply on_reply,
                        bool persistent) {
  if (ac_ == nullptr) return false;
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  argv.reserve(args.size());
  lens.reserve(args.size());
  for (auto a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* p = new Pending{this, std::move(on_reply), persistent, alive_};
  if (redisAsyncCommandArgv(ac_, &RedisLink::on_reply, p, static_cast<int>(argv.size()),
                            argv.data(), lens.data()) != REDIS_OK) {
    delete p;
    return false;
  }
  if (!persistent) sent_us_.push_back(clock_.mono_us());
  return true;
}

std::int64_t RedisLink::oldest_wait_us(std::int64_t now_us) const {
  return sent_us_.empty() ? 0 : now_us - sent_us_.front();
}

void RedisLink::on_reply(redisAsyncContext* ac, void* reply, void* privdata) {
  auto* p = static_cast<Pending*>(privdata);
  if (p == nullptr) return;
  const bool alive = *p->alive;
  const auto* r = static_cast<const redisReply*>(reply);
  // A reply on the live context: the oldest wait is over. The context being freed (r null, or
  // ac->data cleared by close()) has its waits cleared already.
  if (alive && !p->persistent && ac->data == p->link && !p->link->sent_us_.empty())
    p->link->sent_us_.pop_front();
  if (alive && p->on_reply) p->on_reply(reduce_reply(r));
  if (r == nullptr || !p->persistent) delete p;
}

void RedisLink::on_disconnect(const redisAsyncContext* ac, int status) {
  // The context's cleanup (Watch::cleanup, called first) has told the owner already.
  (void)ac;
  (void)status;
}

void RedisLink::lost(redisAsyncContext* ac) {
  ac_ = nullptr;
  sent_us_.clear();
  std::string why =
      ac->err != 0 && ac->errstr != nullptr && ac->errstr[0] != '\0' ? ac->errstr : "closed";
  if (relay_) {
    // rediss://: hiredis saw its local socket close; the relay knows why (the TLS cause).
    if (!relay_->reason.empty()) why = relay_->reason;
    relay_->stop();
    relay_.reset();
  }
  if (on_lost_) {
    // Not from inside hiredis: the owner may open a new link at once.
    asio::post(io_, [alive = std::weak_ptr<bool>(alive_), this, why] {
      if (auto a = alive.lock(); a && *a) on_lost_(why);
    });
  }
}

}  // namespace rpcroute::shared

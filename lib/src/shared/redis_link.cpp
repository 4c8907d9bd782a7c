// One hiredis async connection on the io_context (redis_link.hpp), with the Asio adapter.
#include "redis_link.hpp"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

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

RedisLink::RedisLink(asio::io_context& io, const Clock& clock, RedisUrl url, OnLost on_lost)
    : io_(io), clock_(clock), url_(std::move(url)), on_lost_(std::move(on_lost)) {}

RedisLink::~RedisLink() {
  *alive_ = false;
  close();
}

bool RedisLink::open(std::string& why) {
  close();
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
  const std::string why =
      ac->err != 0 && ac->errstr != nullptr && ac->errstr[0] != '\0' ? ac->errstr : "closed";
  if (on_lost_) {
    // Not from inside hiredis: the owner may open a new link at once.
    asio::post(io_, [alive = std::weak_ptr<bool>(alive_), this, why] {
      if (auto a = alive.lock(); a && *a) on_lost_(why);
    });
  }
}

}  // namespace rpcroute::shared

#pragma once
// One hiredis asynchronous connection driven by the process's io_context: the Asio adapter
// (hiredis ships adapters for libevent, libuv and others, not for Asio) watches the socket with a
// posix::stream_descriptor and calls redisAsyncHandleRead/Write. Nothing here blocks but the name
// lookup of a host name at connect (an address is taken as is).
//
// rediss:// (TLS): Debian's hiredis 0.14 has no TLS, so hiredis talks plain RESP over a private
// UNIX socket to an in-process relay, which holds the TLS connection to Redis (Asio's ssl::stream
// on the native client's OpenSSL contexts: SNI, the host check, the system store or tls:'s CA)
// and pipes bytes both ways through fixed buffers. The socket's file is unlinked (and its 0700
// folder removed) as soon as hiredis's one connection is accepted.
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rpcroute/asio_compat.hpp"
#include "rpcroute/clock.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/shared/codec.hpp"

struct redisAsyncContext;
struct redisReply;

namespace rpcroute::shared {

/// A reply reduced to what the store reads: nil, an error, a string or integer, or an array of
/// those (one level).
struct Reply {
  enum class Kind { none, nil, error, string, integer, array };
  Kind kind = Kind::none;  // none: no reply (the link was lost before it came)
  std::string text;        // string, error, or an integer's digits
  std::int64_t integer = 0;
  std::vector<std::optional<std::string>> items;  // array elements; nil ones empty

  [[nodiscard]] bool ok() const { return kind != Kind::none && kind != Kind::error; }
};
[[nodiscard]] Reply reduce_reply(const redisReply* r);

class RedisLink {
 public:
  using OnReply = std::function<void(const Reply&)>;
  using OnLost = std::function<void(const std::string& why)>;

  /// `tls`: rediss://'s settings (null: the system store); `connect_ms` bounds the TCP connect and
  /// TLS handshake of a rediss:// link.
  RedisLink(asio::io_context& io, const Clock& clock, RedisUrl url, OnLost on_lost,
            const TlsOptions* tls = nullptr, std::int64_t connect_ms = 2000);
  ~RedisLink();
  RedisLink(const RedisLink&) = delete;
  RedisLink& operator=(const RedisLink&) = delete;

  /// Starts connecting; commands may be queued at once (they go out once connected). False with
  /// `why` when it failed before any I/O.
  bool open(std::string& why);
  /// Drops the connection: every pending callback gets a Reply of Kind::none, on_lost is not
  /// called.
  void close();
  [[nodiscard]] bool is_open() const { return ac_ != nullptr; }

  /// Queues a command. `persistent`: the callback stays for every message (SUBSCRIBE). False when
  /// the link is not open.
  bool command(const std::vector<std::string_view>& args, OnReply on_reply,
               bool persistent = false);
  /// Microseconds the oldest unanswered command has waited (0: none waits).
  [[nodiscard]] std::int64_t oldest_wait_us(std::int64_t now_us) const;
  [[nodiscard]] std::size_t waiting() const { return sent_us_.size(); }
  /// rediss://: what the relay is still doing before bytes flow ("connect", "TLS handshake"), else
  /// empty.
  [[nodiscard]] std::string relay_stage() const;

 private:
  struct Pending;
  struct Watch;
  struct Relay;
  bool open_relay(std::string& why);
  bool attach(redisAsyncContext* ac, std::string& why);  // the Asio adapter on a new context
  static void on_reply(redisAsyncContext* ac, void* reply, void* privdata);
  static void on_disconnect(const redisAsyncContext* ac, int status);
  void lost(redisAsyncContext* ac);  // hiredis freed the live context

  asio::io_context& io_;
  const Clock& clock_;
  RedisUrl url_;
  OnLost on_lost_;
  TlsOptions tls_;
  std::int64_t connect_ms_;
  std::shared_ptr<Relay> relay_;  // rediss:// only
  redisAsyncContext* ac_ = nullptr;
  std::deque<std::int64_t> sent_us_;  // send times of the commands awaiting a reply, in order
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace rpcroute::shared

#pragma once
// A socket read that knows when it has emptied the socket, so that the socket's next read waits for
// epoll's next readiness event instead of first trying a recv that can only fail with EAGAIN.
//
// Asio's epoll reactor already has the mechanism: an operation that reports itself "done and
// exhausted" clears the descriptor's speculative flag, and any readiness event sets it again (epoll
// is edge-triggered: bytes or a FIN that arrive later always raise a new event, whether a read is
// queued then or not). Boost 1.74's receive operation reports exhaustion only at the end of the
// stream, so every read of a drained socket began with a recv that failed. On this project's hot
// paths (the sidecar waiting for a client's next request, the native client waiting for an answer
// it has just asked for) that was up to one wasted system call per request each, at ~1 µs apiece.
//
// Whether a read emptied the socket is not guessed from its size (a short read can leave a FIN
// behind, whose event has already been consumed: the next read would wait forever). The kernel
// says it: with TCP_INQ enabled (enable_edge_reads), recvmsg returns how many bytes are left, and a
// received FIN counts as one. Zero left is "exhausted"; anything else, or no answer (TCP_INQ not
// enabled or not supported), keeps Asio's behaviour.
//
// The operation is otherwise Asio's own receive operation: queued, cancelled (cancel(), close(), a
// deadline) and destroyed with the io_context like socket.async_read_some, with the same results
// (eof at the end of the stream). It relies on Asio internals, so it is used only with the Boost
// version it was written against (1.74, epoll); elsewhere async_read_some_edge is
// socket.async_read_some.
#include <boost/version.hpp>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "rpcroute/asio_compat.hpp"

#if BOOST_VERSION == 107400 && defined(BOOST_ASIO_HAS_EPOLL) && defined(__linux__) && \
    !defined(RPCROUTE_NO_EDGE_READ)
#define RPCROUTE_HAS_EDGE_READ 1
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <boost/asio/detail/bind_handler.hpp>
#include <boost/asio/detail/fenced_block.hpp>
#include <boost/asio/detail/handler_work.hpp>
#include <boost/asio/detail/reactor.hpp>
#include <boost/asio/detail/reactor_op.hpp>
#include <boost/asio/detail/socket_ops.hpp>
#include <cerrno>
#include <cstring>
#endif

namespace rpcroute {

#if defined(RPCROUTE_HAS_EDGE_READ)
namespace edge_read_detail {

namespace ad = boost::asio::detail;
using Socket = asio::ip::tcp::socket;

/// recvmsg calls made by the operation on this thread (what the unit tests count).
inline thread_local std::uint64_t recv_calls = 0;

/// The socket's reactor-side state (descriptor, non-blocking flags, epoll registration).
/// basic_socket keeps it protected; a pointer to member formed in a derived class reads it without
/// a cast.
struct SocketAccess : Socket {
  static auto& implementation(Socket& socket) {
    return (socket.*(&SocketAccess::impl_)).get_implementation();
  }
};

template <class Handler, class IoExecutor>
class RecvOp final : public ad::reactor_op {
 public:
  RecvOp(ad::socket_type fd, asio::mutable_buffer buffer, Handler& handler, const IoExecutor& io_ex)
      : reactor_op(boost::system::error_code(), &RecvOp::do_perform, &RecvOp::do_complete),
        fd_(fd),
        buffer_(buffer),
        handler_(std::move(handler)),
        work_(handler_, io_ex) {}

  static status do_perform(reactor_op* base) {
    auto* o = static_cast<RecvOp*>(base);
    iovec iov{o->buffer_.data(), o->buffer_.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    for (;;) {
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      ++recv_calls;
      const ssize_t n = ::recvmsg(o->fd_, &msg, 0);
      if (n > 0) {
        o->ec_ = {};
        o->bytes_transferred_ = static_cast<std::size_t>(n);
        for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
          if (c->cmsg_level == SOL_TCP && c->cmsg_type == TCP_CM_INQ &&
              c->cmsg_len >= CMSG_LEN(sizeof(int))) {
            int left = 0;
            std::memcpy(&left, CMSG_DATA(c), sizeof(left));
            if (left == 0) return done_and_exhausted;  // nothing left, and no FIN waiting
          }
        }
        return done;
      }
      if (n == 0) {
        o->ec_ = asio::error::eof;
        o->bytes_transferred_ = 0;
        return done_and_exhausted;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return not_done;  // queued until the next event
      o->ec_ = boost::system::error_code(errno, boost::asio::error::get_system_category());
      o->bytes_transferred_ = 0;
      return done;
    }
  }

  static void do_complete(void* owner, ad::operation* base, const boost::system::error_code&,
                          std::size_t) {
    auto* o = static_cast<RecvOp*>(base);
    ad::handler_work<Handler, IoExecutor> work(std::move(o->work_));
    // The handler leaves the operation before its memory goes, as in Asio's own operations.
    ad::binder2<Handler, boost::system::error_code, std::size_t> bound(o->handler_, o->ec_,
                                                                       o->bytes_transferred_);
    delete o;
    if (owner != nullptr) {  // null: the io_context is being destroyed; the handler only goes away
      ad::fenced_block fence(ad::fenced_block::half);
      work.complete(bound, bound.handler_);
    }
  }

 private:
  ad::socket_type fd_;
  asio::mutable_buffer buffer_;
  Handler handler_;
  ad::handler_work<Handler, IoExecutor> work_;
};

/// The epoll reactor that serves this socket.
inline ad::reactor& reactor_of(Socket& socket) {
  return asio::use_service<ad::reactor>(
      asio::query(socket.get_executor(), asio::execution::context));
}

// Two private members of Asio's per-descriptor state, reached through the rule that access is not
// checked on the names in an explicit instantiation ([temp.spec.general]): the speculative flags,
// and the mutex that guards them.
using State = ad::epoll_reactor::descriptor_state;
template <class Tag, typename Tag::type Member>
struct Expose {
  friend typename Tag::type member(Tag) { return Member; }
};
struct TrySpeculative {
  using type = bool (State::*)[ad::epoll_reactor::max_ops];
  friend type member(TrySpeculative);
};
struct StateMutex {
  using type = ad::conditionally_enabled_mutex State::*;
  friend type member(StateMutex);
};
template struct Expose<TrySpeculative, &State::try_speculative_>;
template struct Expose<StateMutex, &State::mutex_>;

/// Waits queued by async_wait_drained on this thread (what the unit tests count).
inline thread_local std::uint64_t edge_waits = 0;

template <class Handler, class IoExecutor>
class WaitOp final : public ad::reactor_op {
 public:
  WaitOp(Handler& handler, const IoExecutor& io_ex)
      : reactor_op(boost::system::error_code(), &WaitOp::do_perform, &WaitOp::do_complete),
        handler_(std::move(handler)),
        work_(handler_, io_ex) {}

  // Performed only by a readiness event (never speculatively): the socket is readable.
  static status do_perform(reactor_op*) { return done; }

  static void do_complete(void* owner, ad::operation* base, const boost::system::error_code&,
                          std::size_t) {
    auto* o = static_cast<WaitOp*>(base);
    ad::handler_work<Handler, IoExecutor> work(std::move(o->work_));
    ad::binder1<Handler, boost::system::error_code> bound(o->handler_, o->ec_);
    delete o;
    if (owner != nullptr) {
      ad::fenced_block fence(ad::fenced_block::half);
      work.complete(bound, bound.handler_);
    }
  }

 private:
  Handler handler_;
  ad::handler_work<Handler, IoExecutor> work_;
};

struct InitiateWait {
  template <class Handler>
  void operator()(Handler&& handler, Socket* socket) const {
    using H = std::decay_t<Handler>;
    using Ex = Socket::executor_type;
    auto& impl = SocketAccess::implementation(*socket);
    auto& reactor = reactor_of(*socket);
    H local(std::forward<Handler>(handler));
    auto* op = new WaitOp<H, Ex>(local, socket->get_executor());
    if (State* state = impl.reactor_data_; state != nullptr) {
      // An event already taken was for bytes the caller has read: only a later one counts.
      ad::conditionally_enabled_mutex::scoped_lock lock(state->*member(StateMutex{}));
      (state->*member(TrySpeculative{}))[ad::reactor::read_op] = false;
    }
    ++edge_waits;
    // Speculative allowed, so a read wait is queued without epoll_ctl (Asio's own async_wait
    // re-arms the descriptor with EPOLL_CTL_MOD on every call); the flag cleared above means the
    // operation is performed by the next readiness event, not tried at once.
    reactor.start_op(ad::reactor::read_op, impl.socket_, impl.reactor_data_, op, false, true);
  }
};

struct Initiate {
  template <class Handler>
  void operator()(Handler&& handler, Socket* socket, asio::mutable_buffer buffer) const {
    using H = std::decay_t<Handler>;
    using Ex = Socket::executor_type;
    auto& impl = SocketAccess::implementation(*socket);
    auto& reactor = reactor_of(*socket);
    H local(std::forward<Handler>(handler));
    auto* op = new RecvOp<H, Ex>(impl.socket_, buffer, local, socket->get_executor());
    if (buffer.size() == 0) {  // like async_read_some: an empty read completes at once
      reactor.post_immediate_completion(op, false);
      return;
    }
    if ((impl.state_ & ad::socket_ops::non_blocking) == 0 &&
        !ad::socket_ops::set_internal_non_blocking(impl.socket_, impl.state_, true, op->ec_)) {
      reactor.post_immediate_completion(op, false);
      return;
    }
    reactor.start_op(ad::reactor::read_op, impl.socket_, impl.reactor_data_, op, false, true);
  }
};

}  // namespace edge_read_detail
#endif

/// Asks the kernel to tell each read how much it left behind (TCP_INQ), which async_read_some_edge
/// needs to know a socket is empty. Once per connected socket; harmless where unsupported (reads
/// then behave like async_read_some).
inline void enable_edge_reads(asio::ip::tcp::socket& socket) {
#if defined(RPCROUTE_HAS_EDGE_READ)
  const int on = 1;
  (void)::setsockopt(socket.native_handle(), SOL_TCP, TCP_INQ, &on, sizeof(on));
#else
  (void)socket;
#endif
}

/// socket.async_read_some(buffer, token), except that a read which leaves the socket empty (no
/// bytes and no FIN behind it, as TCP_INQ reports) marks it so: the socket's next read, of either
/// kind, waits for epoll rather than trying a recv first. Completes with (error_code, bytes), eof
/// at the end of the stream.
template <class Token>
auto async_read_some_edge(asio::ip::tcp::socket& socket, asio::mutable_buffer buffer,
                          Token&& token) {
#if defined(RPCROUTE_HAS_EDGE_READ)
  return asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
      edge_read_detail::Initiate{}, token, &socket, buffer);
#else
  return socket.async_read_some(buffer, std::forward<Token>(token));
#endif
}

/// socket.async_wait(wait_read, token) for a socket whose readable bytes the caller has all taken:
/// OpenSSL's read just failed with "want read", or a request was just written on a connection
/// known to hold nothing unread. It completes on the next readiness event, which epoll
/// (edge-triggered) raises for any byte or FIN that arrives after the caller's last read, and costs
/// no system call to queue (Asio's own wait costs an epoll_ctl). Wrong for a socket that may hold
/// bytes the caller has not read and whose event was already taken: it would wait for more.
/// Completes with (error_code).
template <class Token>
auto async_wait_drained(asio::ip::tcp::socket& socket, Token&& token) {
#if defined(RPCROUTE_HAS_EDGE_READ)
  return asio::async_initiate<Token, void(boost::system::error_code)>(
      edge_read_detail::InitiateWait{}, token, &socket);
#else
  return socket.async_wait(asio::ip::tcp::socket::wait_read, std::forward<Token>(token));
#endif
}

}  // namespace rpcroute

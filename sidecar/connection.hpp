#pragma once
// A client connection as the server tracks it (connection.cpp serves it). Deadlines are enforced
// by one sweeper for all connections (Server::sweep_loop), not by a timer armed and cancelled for
// every read and write.

#include <cstddef>
#include <cstdint>

#include "rpcroute/asio_compat.hpp"
#include "rpcroute/cancel.hpp"
#include "rpcroute/clock.hpp"

namespace rpcroute::sidecar {

struct Connection {
  asio::ip::tcp::socket* socket = nullptr;
  Cancellation* cancel = nullptr;  // the request being routed, when the client leaves
  bool busy = false;
  bool routing = false;  // awaiting the router: the sweeper watches for the client leaving
  std::size_t held = 0;  // request-body bytes taken from the server's BodyBudget
  std::int64_t deadline_us =
      0;                   // steady_us() after which the pending operation is cancelled; 0: none
  bool timed_out = false;  // the sweeper cancelled it

  void expire_in(std::int64_t ms) {
    deadline_us = steady_us() + ms * 1000;
    timed_out = false;
  }
};

/// The client closed (or reset) its side while its request is being answered: a peek that sees
/// the end of the stream. Pipelined bytes (a next request) are left where they are.
[[nodiscard]] bool client_left(asio::ip::tcp::socket& socket);

}  // namespace rpcroute::sidecar

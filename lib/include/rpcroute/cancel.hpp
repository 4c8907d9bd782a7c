#pragma once
#include <functional>
#include <utility>

namespace rpcroute {

/// Lets whoever asked for work abandon it: the sidecar cancels a request whose client has left,
/// so that its upstream transfer stops and its memory goes (Boost 1.74's Asio has no cancellation
/// slots). One thread, like everything it touches: the io_context's.
///
///   Cancellation cancel;
///   RouteOptions options{.cancel = &cancel};  // the router stops between and during attempts
///   cancel.request();                          // from elsewhere on the loop: the client is gone
class Cancellation {
 public:
  [[nodiscard]] bool requested() const { return requested_; }

  /// Marks the work cancelled and stops the operation in progress, if one registered how.
  void request() {
    if (requested_) return;
    requested_ = true;
    if (auto hook = std::exchange(hook_, nullptr)) hook();
  }

  /// The operation in progress (one transfer) says how to stop it; it clears the hook when it
  /// ends, before what the hook refers to goes.
  void on_request(std::function<void()> hook) { hook_ = std::move(hook); }
  void clear_hook() { hook_ = nullptr; }

  /// For the next piece of work (a connection's next request).
  void reset() {
    requested_ = false;
    hook_ = nullptr;
  }

 private:
  bool requested_ = false;
  std::function<void()> hook_;
};

}  // namespace rpcroute

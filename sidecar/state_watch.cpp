#include "state_watch.hpp"

#include <chrono>

namespace rpcroute::sidecar {

asio::awaitable<void> watch_state(StateStore& store, const bool& stop) {
  if (!store.path()) co_return;  // --no-state: nothing to watch
  asio::steady_timer timer(co_await asio::this_coro::executor);
  while (!stop) {
    timer.expires_after(std::chrono::milliseconds(kStateWatchMs));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (stop) break;
    // A file that cannot be read now is left to the next save (which reports it) and the next look.
    (void)store.refresh();
  }
}

}  // namespace rpcroute::sidecar

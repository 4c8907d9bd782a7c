// Coalescing of identical in-flight reads: one flight per key, its followers wait on a timer the
// leader cancels once it has the answer.
#include "coalesce.hpp"

#include <chrono>
#include <cstring>

#include "rpcroute/methods.hpp"

namespace rpcroute::sidecar {

namespace {
constexpr std::string_view kHead = R"({"jsonrpc":"2.0","id":)";
}  // namespace

std::string reid_response(std::string_view response, std::string_view old_id,
                          std::string_view new_id) {
  if (!response.starts_with(kHead) || response.substr(kHead.size()).size() <= old_id.size() ||
      response.substr(kHead.size(), old_id.size()) != old_id ||
      response[kHead.size() + old_id.size()] != ',')
    return {};
  const auto rest = response.substr(kHead.size() + old_id.size());
  std::string out;
  out.reserve(kHead.size() + new_id.size() + rest.size());
  out.append(kHead).append(new_id).append(rest);
  return out;
}

bool coalescable(std::string_view method) {
  const MethodInfo& info = method_info(method);
  return !info.name.empty() && !info.replay_unsafe && info.filter == FilterRole::none &&
         (info.block_param >= 0 || info.sticky == StickySource::hash_param || info.cacheable);
}

struct Coalescer::Flight {
  explicit Flight(const asio::any_io_executor& ex) : done(ex) {
    done.expires_at(asio::steady_timer::time_point::max());
  }
  std::string key;
  std::uint64_t head = 0;
  asio::steady_timer done;  // followers wait on it; the leader cancels it with the answer in `out`
  std::size_t followers = 0;
  bool usable = false;  // `out` answers the call for the followers
  CallOutcome out;
  std::string leader_id;
};

asio::awaitable<std::vector<CallOutcome>> Coalescer::route(Router& router, const Chain& chain,
                                                           std::span<const jsonrpc::Call> calls,
                                                           const RouteOptions& options,
                                                           std::string_view key,
                                                           std::uint64_t head) {
  if (auto it = flights_.find(key); it != flights_.end() && it->second->head == head) {
    // Join: nothing is awaited between the lookup and the wait, so the leader cannot finish in
    // between (one thread runs the loop).
    std::shared_ptr<Flight> flight = it->second;
    ++flight->followers;
    boost::system::error_code ec;
    co_await flight->done.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (flight->usable) {
      std::vector<CallOutcome> outs(1);
      CallOutcome& out = outs.front();
      out.status = flight->out.status;
      out.response = reid_response(flight->out.response, flight->leader_id, calls.front().id);
      if (!out.response.empty()) {
        ++stats_.joined;
        out.error = flight->out.error;
        out.provider = flight->out.provider;
        out.upstream_latency_ms = flight->out.upstream_latency_ms;
        out.retry_after_ms = flight->out.retry_after_ms;
        out.unavailable_reason = flight->out.unavailable_reason;
        out.strategy = flight->out.strategy;
        co_return outs;  // attempts left empty: this client's call made none
      }
    }
    ++stats_.rerouted;
    co_return co_await router.route(chain, calls, options);
  }
  if (flights_.size() >= kMaxFlights ||
      flights_.count(key) != 0)  // full, or a flight at another head
    co_return co_await router.route(chain, calls, options);

  auto flight = std::make_shared<Flight>(co_await asio::this_coro::executor);
  flight->key.assign(key);
  flight->head = head;
  flights_.emplace(std::string_view(flight->key), flight);
  ++stats_.leaders;
  // Whatever ends the routing (an answer, an exception), the flight leaves the table and its
  // followers wake; without a usable answer they route on their own. (Not a guard object: a frame
  // destroyed with the io_context at exit must not touch the Coalescer.)
  auto land = [this, &flight] {
    flights_.erase(std::string_view(flight->key));
    flight->done.cancel();
  };
  std::vector<CallOutcome> outs;
  try {
    outs = co_await router.route(chain, calls, options);
  } catch (...) {
    land();
    throw;
  }
  const bool cancelled = options.cancel != nullptr && options.cancel->requested();
  if (flight->followers > 0 && !cancelled && outs.size() == 1 && !outs.front().response.empty()) {
    flight->out.status = outs.front().status;
    flight->out.response = outs.front().response;  // copied: the leader's reply moves its own
    flight->out.error = outs.front().error;
    flight->out.provider = outs.front().provider;
    flight->out.upstream_latency_ms = outs.front().upstream_latency_ms;
    flight->out.retry_after_ms = outs.front().retry_after_ms;
    flight->out.unavailable_reason = outs.front().unavailable_reason;
    flight->out.strategy = outs.front().strategy;
    flight->leader_id = calls.front().id;
    flight->usable = true;
  }
  land();
  co_return outs;
}

}  // namespace rpcroute::sidecar

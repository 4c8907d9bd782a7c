// Coalescing of identical in-flight reads: one flight per key, its followers wait on a timer the
// leader cancels once it has the answer.
#include "coalesce.hpp"

#include <chrono>
#include <cstring>

#include "rpcroute/methods.hpp"

namespace rpcroute::sidecar {

namespace {
constexpr std::string_view kReidHead = R"({"jsonrpc":"2.0","id":)";
}  // namespace

std::string reid_response(std::string_view response, std::string_view old_id,
                          std::string_view new_id) {
  if (!response.starts_with(kReidHead) ||
      response.substr(kReidHead.size()).size() <= old_id.size() ||
      response.substr(kReidHead.size(), old_id.size()) != old_id ||
      response[kReidHead.size() + old_id.size()] != ',')
    return {};
  const auto rest = response.substr(kReidHead.size() + old_id.size());
  std::string out;
  out.reserve(kReidHead.size() + new_id.size() + rest.size());
  out.append(kReidHead).append(new_id).append(rest);
  return out;
}

bool coalescable(std::string_view method) {
  // eth_chainId is answered from the profile (executor.cpp): nothing to share or keep.
  if (method == "eth_chainId") return false;
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
  std::size_t followers = 0;  // joined so far: without any, the answer is not copied
  bool usable = false;        // `out` answers the call for the followers
  CallOutcome out;
  std::string leader_id;
};

namespace {

/// The follower's copy of the flight's answer, under the follower's own id; false when the
/// answer cannot be re-addressed (then the follower is routed again).
bool copy_answer(const CallOutcome& from, std::string_view from_id, std::string_view id,
                 CallOutcome& out) {
  out.response = reid_response(from.response, from_id, id);
  if (out.response.empty()) return false;
  out.status = from.status;
  out.error = from.error;
  out.provider = from.provider;
  out.upstream_latency_ms = from.upstream_latency_ms;
  out.retry_after_ms = from.retry_after_ms;
  out.unavailable_reason = from.unavailable_reason;
  out.strategy = from.strategy;
  return true;  // attempts left empty: this client's call made none
}

}  // namespace

asio::awaitable<std::vector<CallOutcome>> Coalescer::route(Router& router, const Chain& chain,
                                                           std::span<const jsonrpc::Call> calls,
                                                           const RouteOptions& options,
                                                           std::string_view key,
                                                           std::uint64_t head) {
  auto it = flights_.find(key);
  if (it != flights_.end() && it->second->head == head) {
    // Join: nothing is awaited between the lookup and the wait, so the leader cannot land in
    // between (one thread runs the loop).
    std::shared_ptr<Flight> flight = it->second;
    ++flight->followers;
    ++waiting_;
    boost::system::error_code ec;
    co_await flight->done.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    --waiting_;
    std::vector<CallOutcome> outs(1);
    if (flight->usable &&
        copy_answer(flight->out, flight->leader_id, calls.front().id, outs.front())) {
      ++stats_.joined;
      co_return outs;
    }
    // The flight could not answer for us (its client left, an internal error): routed again,
    // through the table, so that the first one woken leads a new flight and the others join it —
    // one upstream request again, not one per waiting client. A client gone meanwhile is not.
    ++stats_.rerouted;
    if (options.cancel != nullptr && options.cancel->requested())
      co_return co_await router.route(chain, calls, options);
    co_return co_await route(router, chain, calls, options, key, head);
  }
  if (it == flights_.end() && flights_.size() >= kMaxFlights)
    co_return co_await router.route(chain, calls, options);  // the table is full

  auto flight = std::make_shared<Flight>(co_await asio::this_coro::executor);
  flight->key.assign(key);
  flight->head = head;
  // A flight started at another head keeps its followers (they hold it) but leaves the table:
  // calls from now on, at this head, join this one.
  if (it != flights_.end()) flights_.erase(it);
  flights_.emplace(std::string_view(flight->key), flight);
  ++stats_.leaders;
  // Whatever ends the routing (an answer, an exception), the flight leaves the table (unless a
  // newer one took its place) and its followers wake; without a usable answer they route again.
  // (Not a guard object: a frame destroyed with the io_context at exit must not touch the
  // Coalescer.)
  auto land = [this, &flight] {
    if (auto at = flights_.find(std::string_view(flight->key));
        at != flights_.end() && at->second == flight)
      flights_.erase(at);
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
    const CallOutcome& o = outs.front();
    flight->out.status = o.status;
    flight->out.response = o.response;  // copied: the leader's reply moves its own
    flight->out.error = o.error;
    flight->out.provider = o.provider;
    flight->out.upstream_latency_ms = o.upstream_latency_ms;
    flight->out.retry_after_ms = o.retry_after_ms;
    flight->out.unavailable_reason = o.unavailable_reason;
    flight->out.strategy = o.strategy;
    flight->leader_id = calls.front().id;
    flight->usable = true;
  }
  land();
  co_return outs;
}

}  // namespace rpcroute::sidecar

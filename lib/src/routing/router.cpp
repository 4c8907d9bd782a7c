#include "rpcroute/router.hpp"

#include <algorithm>

namespace rpcroute {

Router::Router(const Profile& profile, Transport& transport, HealthStore& store, const Clock& clock,
               Random& rng)
    : profile_(profile),
      store_(store),
      clock_(clock),
      planner_(profile, store, clock, rng, traffic_),
      executor_(profile, planner_, transport, store, clock, rng, traffic_) {}

Plan Router::plan(const Chain& chain, std::string_view method, std::string_view params,
                  const RouteOptions& options) {
  return planner_.plan(chain, method, params, options);
}

asio::awaitable<std::vector<CallOutcome>> Router::route(const Chain& chain,
                                                        std::span<const jsonrpc::Call> calls,
                                                        RouteOptions options) {
  // No coroutine frame of its own for the usual call: only eth_getLogs may be split.
  const bool logs = std::any_of(calls.begin(), calls.end(), [](const jsonrpc::Call& c) {
    return c.valid() && c.method == "eth_getLogs";
  });
  if (logs) return route_with_logs(chain, calls, std::move(options));
  return executor_.route(chain, calls, std::move(options));
}

asio::awaitable<void> Router::drain() { return executor_.drain(); }

}  // namespace rpcroute

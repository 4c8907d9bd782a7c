#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "rpcroute/asio_compat.hpp"
#include "rpcroute/blocks.hpp"
#include "rpcroute/clock.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/executor.hpp"
#include "rpcroute/health/store.hpp"
#include "rpcroute/jsonrpc.hpp"
#include "rpcroute/outcome.hpp"
#include "rpcroute/planner.hpp"
#include "rpcroute/sticky.hpp"
#include "rpcroute/strategy.hpp"
#include "rpcroute/transport.hpp"

namespace rpcroute {

/// The pipeline of DESIGN.md section 4: filter, rank, tier (Planner), execute with failover and
/// record (Executor), behind one facade.
///
///   Router router(profile, engine, store, clock, rng);  // Transport&, HealthStore&
///   auto answers = co_await router.route(chain, body.calls, {});
class Router {
 public:
  Router(const Profile& profile, Transport& transport, HealthStore& store, const Clock& clock,
         Random& rng);

  /// The candidates a call of `method` would try now, in order, and the exclusions with reasons.
  [[nodiscard]] Plan plan(const Chain& chain, std::string_view method, std::string_view params,
                          const RouteOptions& options);

  /// Routes calls (one, or the items of a batch) on one chain. Answers come back in call order.
  [[nodiscard]] asio::awaitable<std::vector<CallOutcome>> route(
      const Chain& chain, std::span<const jsonrpc::Call> calls, RouteOptions options);

  /// Waits for work that outlives route(): the remaining sends of a broadcast. Call before exit.
  [[nodiscard]] asio::awaitable<void> drain();

  [[nodiscard]] const Profile& profile() const { return profile_; }
  [[nodiscard]] AttemptsInFlight& attempts_in_flight() { return traffic_.attempts; }

 private:
  const Profile& profile_;
  LocalTraffic traffic_;
  Planner planner_;
  Executor executor_;
};

}  // namespace rpcroute

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
#include "rpcroute/log_split.hpp"
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
  /// An eth_getLogs range wider than the providers take is fetched in parts and merged
  /// (log_split.cpp).
  [[nodiscard]] asio::awaitable<std::vector<CallOutcome>> route(
      const Chain& chain, std::span<const jsonrpc::Call> calls, RouteOptions options);

  /// Waits for work that outlives route(): the remaining sends of a broadcast. Call before exit.
  [[nodiscard]] asio::awaitable<void> drain();

  [[nodiscard]] const Profile& profile() const { return profile_; }
  [[nodiscard]] AttemptsInFlight& attempts_in_flight() { return traffic_.attempts; }

 private:
  struct LogJob;
  /// route() for calls among which is an eth_getLogs: those go through route_logs().
  [[nodiscard]] asio::awaitable<std::vector<CallOutcome>> route_with_logs(
      const Chain& chain, std::span<const jsonrpc::Call> calls, RouteOptions options);
  /// One eth_getLogs call: whole, or split when the providers' range limits stand in the way
  /// (configured or learned) or when they answer that the range or its result is too large.
  [[nodiscard]] asio::awaitable<CallOutcome> route_logs(const Chain& chain,
                                                        const jsonrpc::Call& call,
                                                        const RouteOptions& options);
  /// One part: appended to `into`, split further while the answer says it is too large.
  [[nodiscard]] asio::awaitable<void> fetch_logs(LogJob& job, BlockSpan span, int depth,
                                                 std::string& into);
  /// The parts with bounded concurrency, merged into `merged` in block order.
  [[nodiscard]] asio::awaitable<void> fetch_logs_parts(LogJob& job, std::vector<BlockSpan> parts,
                                                       std::string& merged);
  static void fail_logs(LogJob& job, std::int64_t code, const std::string& message);
  /// The options for the next request of a job: its timeout is what is left of the job's one
  /// deadline. Nullopt (the job failed with the deadline's error) when nothing is left.
  [[nodiscard]] std::optional<RouteOptions> part_options(LogJob& job) const;
  /// The job ends with the one error of a split range that ran out of time.
  void fail_logs_deadline(LogJob& job) const;
  /// The chain's head (one eth_blockNumber), asked within the job's deadline.
  [[nodiscard]] asio::awaitable<std::optional<std::uint64_t>> known_head(LogJob& job);

  const Profile& profile_;
  HealthStore& store_;
  const Clock& clock_;
  LocalTraffic traffic_;
  Planner planner_;
  Executor executor_;
};

}  // namespace rpcroute

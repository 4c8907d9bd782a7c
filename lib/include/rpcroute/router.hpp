#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <span>
#include <string>
#include <vector>

#include "rpcroute/asio_compat.hpp"
#include "rpcroute/blocks.hpp"
#include "rpcroute/clock.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/jsonrpc.hpp"
#include "rpcroute/outcome.hpp"
#include "rpcroute/planner.hpp"
#include "rpcroute/state.hpp"
#include "rpcroute/sticky.hpp"
#include "rpcroute/strategy.hpp"
#include "rpcroute/transport.hpp"

namespace rpcroute {

/// One exchange with one provider, as the caller of the router sees it.
struct AttemptRecord {
  std::string provider;
  Classification result;
  long http_status = 0;
  double latency_ms = 0;
};

/// The answer to one call.
struct CallOutcome {
  enum class Status { result, rpc_error, unavailable, invalid, local };
  Status status = Status::result;
  std::string response;  // complete JSON-RPC response with the client's id; empty for notifications
  std::string result;    // raw result (result and local)
  std::string error;     // raw error object (rpc_error, unavailable, invalid)
  std::string provider;  // who answered; empty when nobody did
  double upstream_latency_ms = 0;
  std::vector<AttemptRecord> attempts;
  std::vector<Exclusion> excluded;
  std::int64_t retry_after_ms = -1;
  std::string unavailable_reason;  // unavailable: why ("no eligible provider", "deadline of 1500 ms exceeded")
  Strategy strategy = Strategy::load_balanced;
  /// eth_blockNumber: the provider answered this lower height; the answer was raised to the
  /// high-water mark so that it never goes backwards.
  std::optional<std::uint64_t> raised_from;
  bool broadcast = false;  // sent to every eligible provider at once
};

/// The pipeline of DESIGN.md section 4: filter, rank, tier, execute with failover, record.
///
///   Router router(profile, engine, store, clock, rng);
///   auto answers = co_await router.route(chain, body.calls, {});
class Router {
 public:
  Router(const Profile& profile, Engine& engine, StateStore& store, const Clock& clock, Random& rng);

  /// The candidates a call of `method` would try now, in order, and the exclusions with reasons.
  [[nodiscard]] Plan plan(const Chain& chain, std::string_view method, std::string_view params,
                          const RouteOptions& options);

  /// Routes calls (one, or the items of a batch) on one chain. Answers come back in call order.
  [[nodiscard]] asio::awaitable<std::vector<CallOutcome>> route(const Chain& chain,
                                                                std::span<const jsonrpc::Call> calls,
                                                                RouteOptions options);

  /// Waits for work that outlives route(): the remaining sends of a broadcast. Call before exit.
  [[nodiscard]] asio::awaitable<void> drain();

  [[nodiscard]] const Profile& profile() const { return profile_; }
  [[nodiscard]] AttemptsInFlight& attempts_in_flight() { return traffic_.attempts; }

 private:
  struct Item;
  struct Broadcast;
  void finish_unavailable(Item& item, const Chain& chain, std::string_view why);
  [[nodiscard]] asio::awaitable<void> route_broadcast(const Chain& chain, Item& item, std::int64_t deadline_us);
  [[nodiscard]] asio::awaitable<void> broadcast_send(std::shared_ptr<Broadcast> b, const Chain* chain, Candidate cand,
                                                     std::string method, std::string params, std::int64_t deadline_us);
  /// What a success teaches (heights, the high-water mark, filters, archival); `result` is a view
  /// into the answer. Raising an eth_blockNumber answer sets out.raised_from and out.result.
  void on_success(const Chain& chain, const Candidate& cand, Item& item, std::int64_t now, std::string_view result);
  [[nodiscard]] Classification scrubbed(const Classification& c) const;

  const Profile& profile_;
  Engine& engine_;
  StateStore& store_;
  const Clock& clock_;
  Random& rng_;
  LocalTraffic traffic_;
  Planner planner_;
  int background_ = 0;                                      // broadcast sends still in flight
  std::optional<asio::steady_timer> drained_;               // woken when background_ reaches 0
};

}  // namespace rpcroute

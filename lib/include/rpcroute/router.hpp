#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <span>
#include <string>
#include <vector>

#include "rpcroute/asio_compat.hpp"
#include "rpcroute/clock.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/jsonrpc.hpp"
#include "rpcroute/outcome.hpp"
#include "rpcroute/state.hpp"
#include "rpcroute/strategy.hpp"
#include "rpcroute/transport.hpp"

namespace rpcroute {

/// A provider left out of a request's candidates, and why (shown by `rank` and in 503 details).
struct Exclusion {
  std::string provider;
  std::string reason;
  std::int64_t retry_in_ms = 0;  // when it may be eligible again (breakers); 0 unknown
};

/// The ordered candidates for one method on one chain, and what was excluded.
struct Plan {
  Strategy strategy = Strategy::load_balanced;
  MethodPolicy policy;
  std::vector<Candidate> candidates;
  std::vector<Exclusion> excluded;
};

struct RouteOptions {
  std::optional<Strategy> strategy;        // overrides the method policy and the profile default
  std::optional<std::string> provider;     // exactly this provider (no fallback)
  std::optional<std::int64_t> timeout_ms;  // overall deadline
  std::optional<int> max_attempts;
  bool with_stats = false;  // fill latency stats even when the strategy does not rank by them (rank, /status)
};

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
  Strategy strategy = Strategy::load_balanced;
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

  [[nodiscard]] const Profile& profile() const { return profile_; }

 private:
  struct Item;
  void finish_unavailable(Item& item, const Chain& chain, std::string_view why);

  const Profile& profile_;
  Engine& engine_;
  StateStore& store_;
  const Clock& clock_;
  Random& rng_;
  std::map<std::string, int, std::less<>> half_open_in_flight_;
  std::unordered_map<const Provider*, std::string> keys_;  // state keys, built once

  const std::string& key_for(const Chain& chain, const Provider& provider);
};

/// True for methods whose repetition could act twice: sent to one provider only.
[[nodiscard]] bool is_transaction_send(std::string_view method);

}  // namespace rpcroute

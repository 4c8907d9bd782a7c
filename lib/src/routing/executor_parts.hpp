#pragma once
// The executor's per-request types, shared by executor.cpp, outcomes.cpp and broadcast.cpp.
#include <boost/container/small_vector.hpp>
#include <optional>
#include <string>

#include "rpcroute/executor.hpp"
#include "rpcroute/health/exchange.hpp"

namespace rpcroute {

/// One call on its way through its plan.
struct Executor::Item {
  std::size_t index = 0;
  const jsonrpc::Call* call = nullptr;
  Plan plan;
  std::size_t next = 0;  // the candidate to try next
  bool unknown_spent = false;
  std::optional<std::string> held_error;  // a JSON-RPC error answer to return if nobody does better
  std::string held_provider;
  double held_latency_ms = 0;
  bool done = false;
  bool keep_result = true;  // RouteOptions::keep_result
  /// A `null` from a provider behind (not_yet.cpp): the answer if nobody at the height does better.
  std::optional<std::string> held_null_provider;
  double held_null_latency_ms = 0;
  std::uint64_t held_null_height = 0;
  /// The call as sent when its `latest` was rewritten (tag_rewrite.cpp); `call` then points here.
  jsonrpc::Call rewritten;
  CallOutcome out;
};

/// One request's settings, fixed when route() starts.
struct Executor::Run {
  const Chain& chain;
  const RouteOptions& options;
  int max_attempts = 0;
  std::int64_t timeout_ms = 0;   // the overall deadline's length (for the message)
  std::int64_t deadline_us = 0;  // on the clock's monotonic time
  bool hedging = false;          // some call may be hedged: hedge_for() looks further
};

/// One attempt: the calls bound for one provider, sent as one batch.
struct Executor::Round {
  Item* leader = nullptr;
  Candidate cand;
  boost::container::small_vector<Item*, 4> group;  // no allocation for the usual single call
  boost::container::small_vector<UpstreamCall, 4> upstream;
  UpstreamIds ids;
  std::int64_t full_timeout = 0;     // the attempt's own timeout
  std::int64_t attempt_timeout = 0;  // cut to what is left of the deadline
  bool trial = false;                // through a breaker that is not closed
  bool chain_check = false;          // eth_chainId goes last in the batch (chain_check.cpp)
  /// Over the provider's WebSocket: its candidate said so and the round is one call (a batch, or
  /// a call with the chain id check, goes over HTTP).
  TransportKind transport = TransportKind::http;
  std::int64_t started_ms = 0;
};

/// The JSON-RPC error response for a call, from an error object.
[[nodiscard]] std::string error_response(const jsonrpc::Call& call,
                                         const std::string& error_object);

}  // namespace rpcroute

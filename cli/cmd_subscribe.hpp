#pragma once
// rpcroute subscribe (issue 18): one eth_subscribe through the sidecar's own subscription
// machinery (sidecar/ws_subscriptions.hpp), so the same failover, backfill, dedupe and reorg
// handling apply; each event's result is printed as one JSON line (NDJSON).
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rpcroute/error.hpp"

namespace rpcroute::cli {

struct SubscribeOptions {
  std::string kind;                    // newHeads, logs or newPendingTransactions
  std::vector<std::string> addresses;  // --address (logs)
  std::vector<std::string> topics;     // --topic (logs), by position: null, T or T1|T2
  std::string profile;
  std::string chain;
  std::int64_t count = 0;  // --count: exit after this many events (0: no limit)
  std::string duration;    // --duration: exit 0 after this long
  std::string state;
  bool no_state = false;
  std::string shared_state;
};

void setup_subscribe(CLI::App& app, int& exit_code);
[[nodiscard]] int run_subscribe(const SubscribeOptions& options);

/// eth_subscribe's params for the options: ["newHeads"], ["newPendingTransactions"] or
/// ["logs",{"address":[...],"topics":[...]}]; the error for a bad kind, address or topic.
[[nodiscard]] Result<std::string> subscribe_params(const SubscribeOptions& options);

}  // namespace rpcroute::cli

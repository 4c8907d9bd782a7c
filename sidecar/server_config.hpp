#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rpcroute/config.hpp"

namespace rpcroute::sidecar {

struct ServerConfig {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8645;
  bool allow_remote = false;
  std::string token;                       // bearer token; required when allow_remote
  std::vector<std::string> allow_origins;  // extra browser origins ("*" allows any)
  std::size_t max_body = 8 * 1024 * 1024;
  std::size_t max_connections = 1024;  // more are answered 503 and closed
  std::size_t max_inflight_bytes = std::size_t{256}
                                   << 20;  // request bodies held at once; beyond: 503
  std::size_t max_batch = 1000;            // viem's default batch size
  std::int64_t read_timeout_ms = 10'000;   // one request's headers and body
  std::int64_t idle_timeout_ms = 60'000;   // a keep-alive connection with nothing to do
  std::int64_t grace_ms = 10'000;          // to finish in-flight requests at shutdown
  std::int64_t flush_interval_ms = 5'000;  // state file
  std::optional<Strategy> strategy;        // for routes without a strategy segment
  bool verbose = false;                    // a log line per request
  bool json_logs = false;
  bool background_probes = true;
  // WebSocket clients (ws_session.hpp). A message is a request body: --max-body bounds it too.
  std::int64_t ws_ping_timeout_ms = 30'000;  // pinged after half of it silent; closed after it all
  std::size_t ws_max_buffered = std::size_t{4} << 20;  // answers queued for a client; past: 1008
  std::size_t ws_max_queued = 4096;                    // messages queued for a client; past: 1008
  std::size_t ws_max_in_flight = 64;  // one client's messages routed at once; past: reading waits
  std::size_t ws_max_subscriptions = 64;  // one client's subscriptions; past: -32600
  bool dashboard = true;                 // GET / (the page), /dashboard/state and /dashboard/events
  std::optional<std::int64_t> cache_mb;  // --cache-mb: overrides each profile's cache.max_mb
  bool no_cache = false;  // --no-cache: no cache (cache_mb 0), every cacheable read says BYPASS
  // The fences around the fast paths, so that each can be switched off and measured (tests/perf
  // ablation). Server's constructor also turns each off when its variable is "0" in the
  // environment, read once there: RPCROUTE_FAST_HTTP1, RPCROUTE_PLAIN_JSON.
  bool fast_http1 = true;  // hand-written request reader and response head; off: Beast's only
  bool plain_json = true;  // the plain JSON path for request bodies; off: the general parser only
};

/// Turns off each fence whose environment variable is "0" (RPCROUTE_FAST_HTTP1,
/// RPCROUTE_PLAIN_JSON).
void apply_fence_environment(ServerConfig& config);

}  // namespace rpcroute::sidecar

#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "rpcroute/config.hpp"
#include "rpcroute/error.hpp"

namespace rpcroute::sidecar {

/// What an RPC URL asks for (DESIGN.md section 11). Empty profile: the default profile.
struct RpcTarget {
  std::string profile;
  std::string chain;  // name or decimal chain id; empty: the profile's first chain ("/")
  std::optional<Strategy> strategy;
  std::optional<std::string> provider;
};

enum class RouteKind {
  rpc,
  healthz,
  status,
  metrics,
  dashboard_page,
  dashboard_state,
  dashboard_events,
  not_found
};

struct Route {
  RouteKind kind = RouteKind::not_found;
  RpcTarget target;
  std::string problem;  // for not_found: what was wrong
};

/// Parses a request target (path and optional query; the query is ignored):
///   /  /rpc/:chain  /rpc/:strategy/:chain  /rpc/provider/:id/:chain
///   /rpc/profile/:profile/:chain  /rpc/profile/:profile/:strategy/:chain
///   /healthz  /status  /metrics  /dashboard  /dashboard/state  /dashboard/events
/// /ws and /ws/rpc/... are the RPC routes again (WebSocket clients are often pointed at /ws).
[[nodiscard]] Route parse_route(std::string_view target);

/// The valid shapes, for 404 bodies.
[[nodiscard]] std::string_view route_shapes_json();

}  // namespace rpcroute::sidecar

#include "routes.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <optional>

namespace rpcroute::sidecar {

namespace {

bool segment_ok(std::string_view s) {
  return !s.empty() && s.size() <= 128 && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

Route not_found(std::string problem) {
  Route r;
  r.problem = std::move(problem);
  return r;
}

}  // namespace

std::string_view route_shapes_json() {
  return R"(["POST /","POST /rpc/:chain","POST /rpc/:strategy/:chain","POST /rpc/provider/:provider_id/:chain",)"
         R"("POST /rpc/profile/:profile/:chain","POST /rpc/profile/:profile/:strategy/:chain",)"
         R"("GET /healthz","GET /status","GET /metrics","GET /","GET /dashboard",)"
         R"("GET /dashboard/state","GET /dashboard/events","GET (WebSocket) /ws/rpc/... or any POST route"])";
}

namespace {

/// The routes with a name (/healthz, /status, /metrics, /dashboard, /dashboard/state,
/// /dashboard/events): `second` is empty for a one-segment path.
std::optional<RouteKind> named_route(std::string_view first, std::string_view second) {
  if (second.empty()) {
    if (first == "healthz") return RouteKind::healthz;
    if (first == "status") return RouteKind::status;
    if (first == "metrics") return RouteKind::metrics;
    if (first == "dashboard") return RouteKind::dashboard_page;
    return std::nullopt;
  }
  if (first == "dashboard" && second == "state") return RouteKind::dashboard_state;
  if (first == "dashboard" && second == "events") return RouteKind::dashboard_events;
  return std::nullopt;
}

}  // namespace

Route parse_route(std::string_view target) {
  if (auto q = target.find_first_of("?#"); q != std::string_view::npos)
    target = target.substr(0, q);
  if (target.empty() || target.front() != '/') return not_found("the path must start with '/'");
  // /ws and /ws/rpc/... name the RPC routes too: WebSocket clients are often pointed at a /ws path.
  if (target == "/ws" || target.starts_with("/ws/")) {
    target.remove_prefix(3);
    if (target.empty() || target == "/") return Route{RouteKind::rpc, {}, {}};
    if (!target.starts_with("/rpc/")) return not_found("/ws/ is followed by /rpc/...");
  }
  if (target.size() > 1024) return not_found("the path is too long");
  // At most 6 segments are meaningful and a 7th ends the walk below: a fixed array, no allocation
  // per request.
  struct Parts {
    std::array<std::string_view, 7> items;
    std::size_t n = 0;
    std::size_t size() const { return n; }
    bool empty() const { return n == 0; }
    std::string_view operator[](std::size_t i) const { return items[i]; }
  } parts;
  std::string_view rest = target.substr(1);
  while (!rest.empty()) {
    auto slash = rest.find('/');
    auto part = rest.substr(0, slash);
    if (!part.empty()) {
      if (!segment_ok(part))
        return not_found(fmt::format("'{}' is not a valid path segment", part.substr(0, 64)));
      parts.items[parts.n++] = part;
    }
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
    if (parts.size() > 6) return not_found("too many path segments");
  }

  Route r;
  if (parts.empty()) {
    r.kind = RouteKind::rpc;
    return r;
  }
  if (parts.size() == 1 || (parts.size() == 2 && parts[0] == "dashboard")) {
    const auto kind = named_route(parts[0], parts.size() == 2 ? parts[1] : std::string_view());
    if (!kind) return not_found(fmt::format("no route '{}'", target));
    r.kind = *kind;
    return r;
  }
  if (parts[0] != "rpc") return not_found(fmt::format("no route '{}'", target));
  std::size_t i = 1;
  if (parts[i] == "profile") {
    if (parts.size() < 4) return not_found("/rpc/profile/ needs a profile and a chain");
    r.target.profile = std::string(parts[2]);
    i = 3;
  } else if (parts[i] == "provider") {
    if (parts.size() != 4) return not_found("/rpc/provider/ needs a provider id and a chain");
    r.target.provider = std::string(parts[2]);
    r.target.chain = std::string(parts[3]);
    r.kind = RouteKind::rpc;
    return r;
  }
  std::size_t left = parts.size() - i;
  if (left == 2) {
    auto s = parse_strategy(parts[i]);
    if (!s) {
      return not_found(fmt::format(
          "unknown strategy '{}' (load-balanced, round-robin, random, weighted, priority, "
          "fastest, latency-weighted)",
          parts[i]));
    }
    r.target.strategy = s;
    r.target.chain = std::string(parts[i + 1]);
  } else if (left == 1) {
    r.target.chain = std::string(parts[i]);
  } else {
    return not_found(fmt::format("no route '{}'", target));
  }
  r.kind = RouteKind::rpc;
  return r;
}

}  // namespace rpcroute::sidecar

#include <catch2/catch.hpp>

#include "routes.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_routes_test {

using namespace rpcroute;
using namespace rpcroute::sidecar;

TEST_CASE("routes: every RPC shape of DESIGN.md section 11", "[sidecar][routes]") {
  auto root = parse_route("/");
  CHECK(root.kind == RouteKind::rpc);
  CHECK(root.target.chain.empty());

  auto chain = parse_route("/rpc/base");
  REQUIRE(chain.kind == RouteKind::rpc);
  CHECK(chain.target.chain == "base");
  CHECK_FALSE(chain.target.strategy);

  auto by_id = parse_route("/rpc/8453?x=1");
  CHECK(by_id.target.chain == "8453");

  auto strategy = parse_route("/rpc/latency-weighted/base");
  REQUIRE(strategy.kind == RouteKind::rpc);
  CHECK(strategy.target.strategy == Strategy::latency_weighted);
  CHECK(strategy.target.chain == "base");

  auto provider = parse_route("/rpc/provider/alchemy/ethereum");
  REQUIRE(provider.kind == RouteKind::rpc);
  CHECK(provider.target.provider == std::optional<std::string>("alchemy"));
  CHECK(provider.target.chain == "ethereum");

  auto profile = parse_route("/rpc/profile/mine/ethereum");
  REQUIRE(profile.kind == RouteKind::rpc);
  CHECK(profile.target.profile == "mine");
  CHECK(profile.target.chain == "ethereum");

  auto both = parse_route("/rpc/profile/mine/round-robin/1");
  REQUIRE(both.kind == RouteKind::rpc);
  CHECK(both.target.profile == "mine");
  CHECK(both.target.strategy == Strategy::round_robin);
  CHECK(both.target.chain == "1");
}

TEST_CASE("routes: health, status and metrics", "[sidecar][routes]") {
  CHECK(parse_route("/healthz").kind == RouteKind::healthz);
  CHECK(parse_route("/status").kind == RouteKind::status);
  CHECK(parse_route("/metrics").kind == RouteKind::metrics);
}

TEST_CASE("routes: anything else is not found, with the reason", "[sidecar][routes]") {
  for (const char* bad : {"", "rpc/base", "/nope", "/rpc/fastestt/base", "/rpc/provider/x", "/rpc/profile/p",
                          "/rpc/a/b/c", "/rpc/../etc", "/rpc/%2e%2e/x", "/rpc/a b"}) {
    INFO(bad);
    auto r = parse_route(bad);
    CHECK(r.kind == RouteKind::not_found);
    CHECK_FALSE(r.problem.empty());
  }
  CHECK(parse_route("/" + std::string(2000, 'a')).kind == RouteKind::not_found);
  CHECK_THAT(std::string(route_shapes_json()), Catch::Contains("/rpc/:strategy/:chain"));
}

TEST_CASE("routes: /ws and /ws/rpc/... are the RPC routes again", "[sidecar][routes]") {
  CHECK(parse_route("/ws").kind == RouteKind::rpc);
  CHECK(parse_route("/ws/").kind == RouteKind::rpc);
  auto chain = parse_route("/ws/rpc/fastest/base?x=1");
  REQUIRE(chain.kind == RouteKind::rpc);
  CHECK(chain.target.chain == "base");
  CHECK(chain.target.strategy == Strategy::fastest);
  CHECK(parse_route("/ws/rpc/profile/mine/1").target.profile == "mine");
  for (const char* bad : {"/ws/healthz", "/ws/status", "/wsx/rpc/base", "/ws/ws/rpc/base"}) {
    INFO(bad);
    CHECK(parse_route(bad).kind == RouteKind::not_found);
  }
}

}  // namespace unit_routes_test

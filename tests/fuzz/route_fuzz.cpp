// Fuzzes the sidecar's route parser: sidecar::parse_route on any request target.
//
// Invariants checked besides "no crash, no exception":
// - a route to an RPC target names only well-formed segments (they become state-key parts and
//   metric labels) and at most one of strategy and provider;
// - the canonical path rebuilt from a parsed RPC target parses to the same target;
// - a 404 says what was wrong; the other routes carry no target.
#include <cstdint>
#include <string>

#include "check.hpp"
#include "routes.hpp"

namespace {

using namespace rpcroute;
using namespace rpcroute::sidecar;

bool segment(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.';
    if (!ok) return false;
  }
  return true;
}

std::string canonical(const RpcTarget& t) {
  if (t.chain.empty()) return "/";
  std::string path = "/rpc";
  if (t.provider) return path + "/provider/" + *t.provider + "/" + t.chain;
  if (!t.profile.empty()) path += "/profile/" + t.profile;
  if (t.strategy) path += "/" + std::string(strategy_name(*t.strategy));
  return path + "/" + t.chain;
}

bool same_target(const RpcTarget& a, const RpcTarget& b) {
  return a.profile == b.profile && a.chain == b.chain && a.strategy == b.strategy && a.provider == b.provider;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Route r = parse_route(rpcroute::fuzz::as_text(data, size));
  const RpcTarget& t = r.target;
  switch (r.kind) {
    case RouteKind::not_found:
      FUZZ_CHECK(!r.problem.empty());
      return 0;
    case RouteKind::healthz:
    case RouteKind::status:
    case RouteKind::metrics:
    case RouteKind::dashboard_page:
    case RouteKind::dashboard_state:
    case RouteKind::dashboard_events:
      FUZZ_CHECK(r.problem.empty());
      FUZZ_CHECK(t.chain.empty() && t.profile.empty() && !t.strategy && !t.provider);
      return 0;
    case RouteKind::rpc: break;
  }
  FUZZ_CHECK(r.problem.empty());
  FUZZ_CHECK(t.chain.empty() || segment(t.chain));
  FUZZ_CHECK(t.profile.empty() || segment(t.profile));
  FUZZ_CHECK(!t.provider || segment(*t.provider));
  FUZZ_CHECK(!(t.provider && t.strategy));
  FUZZ_CHECK(!t.chain.empty() || (t.profile.empty() && !t.strategy && !t.provider));

  Route again = parse_route(canonical(t));
  FUZZ_CHECK(again.kind == RouteKind::rpc);
  FUZZ_CHECK(same_target(again.target, t));
  return 0;
}

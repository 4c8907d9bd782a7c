// The sidecar's /metrics text: the breaker gauge per transport (issue 18).
#include "metrics.hpp"

#include <catch2/catch.hpp>

#include "rpcroute/health/model.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_metrics_test {

using namespace rpcroute;
using namespace rpcroute::sidecar;

namespace {

constexpr const char* kProfile = R"(
chains:
  local:
    chain_id: 31337
    providers:
      - { id: a, url: "http://a.test", ws_url: "ws://a.test", transport: ws }
      - { id: b, url: "http://b.test", ws_url: "ws://b.test", transport: auto }
      - { id: c, url: "http://c.test", ws_url: "ws://c.test" }
      - { id: d, url: "http://d.test" }
health:
  circuit_breaker: { failure_threshold: 1, recovery_timeout_ms: 10000, jitter: 0 }
)";

/// The value of the one line of `text` that starts with `series` exactly, or nullopt (none, or
/// more than one).
std::optional<std::string> value_of(const std::string& text, const std::string& series) {
  std::optional<std::string> found;
  std::size_t at = 0;
  while ((at = text.find(series + " ", at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') {
      if (found) return std::nullopt;
      const auto start = at + series.size() + 1;
      found = text.substr(start, text.find('\n', start) - start);
    }
    at += series.size();
  }
  return found;
}

}  // namespace

TEST_CASE("metrics: rpcroute_breaker_state has a row per transport the provider may use",
          "[sidecar][metrics]") {
  const Profile profile = *load_profile_text(kProfile, "m.yaml");
  const Chain& chain = profile.chains.front();
  constexpr std::int64_t kNow = 1'700'000'000'000;
  State state;
  const HealthConfig& health = profile.health;
  auto key = [&](std::size_t i) {
    return provider_key(profile.name, chain.name, chain.providers[i]);
  };
  // a: its WebSocket failed (its own breaker opens, threshold 1); b: its HTTP failed.
  AttemptEvent ws_failed{key(0), kNow, OutcomeClass::provider_failure, "reset", -1, 0};
  ws_failed.ws = true;
  apply_event(state, ws_failed, health);
  apply_event(state, AttemptEvent{key(1), kNow, OutcomeClass::provider_failure, "timeout", -1, 0},
              health);

  Metrics metrics;
  const std::string text = metrics.render({&profile}, state, kNow + 1);
  // The profile's name is its file's where the loader sets it: none here.
  const std::string prefix =
      "rpcroute_breaker_state{profile=\"" + profile.name + R"(",chain="local",provider=")";
  CHECK(value_of(text, prefix + R"(a",transport="http"})") == "0");
  CHECK(value_of(text, prefix + R"(a",transport="ws"})") == "2");
  CHECK(value_of(text, prefix + R"(b",transport="http"})") == "2");
  CHECK(value_of(text, prefix + R"(b",transport="ws"})") == "0");
  // c has a ws_url but routes over HTTP only (subscriptions use no breaker): no ws row; nor d.
  CHECK(value_of(text, prefix + R"(c",transport="http"})") == "0");
  CHECK(text.find(prefix + R"(c",transport="ws")") == std::string::npos);
  CHECK(value_of(text, prefix + R"(d",transport="http"})") == "0");
  CHECK(text.find(prefix + R"(d",transport="ws")") == std::string::npos);

  // After the recovery time the WebSocket's breaker is half-open (1).
  const std::string later = metrics.render({&profile}, state, kNow + 10'001);
  CHECK(value_of(later, prefix + R"(a",transport="ws"})") == "1");
}

}  // namespace unit_metrics_test

// Transports in routing (issue 18): `transport: http | ws | auto`, samples and breakers per
// transport, the latency strategies' choice of a provider's WebSocket or HTTP, and the state file.
#include <catch2/catch.hpp>

#include "../support/fake_transport.hpp"
#include "../support/temp_dir.hpp"
#include "rpcroute/planner.hpp"
#include "rpcroute/router.hpp"
#include "rpcroute/state.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_transports_test {

using namespace rpcroute;

namespace {

constexpr const char* kAuto = R"(
chains:
  local:
    chain_id: 31337
    providers:
      - { id: a, url: "http://a.test", ws_url: "ws://a.test", transport: auto }
      - { id: b, url: "http://b.test", ws_url: from_url, transport: auto }
routing:
  default_strategy: fastest
)";

constexpr const char* kWs = R"(
chains:
  local:
    chain_id: 31337
    providers:
      - { id: a, url: "http://a.test", ws_url: "ws://a.test", transport: ws, priority: 1 }
      - { id: b, url: "http://b.test", priority: 2 }
routing:
  default_strategy: priority
health:
  circuit_breaker: { failure_threshold: 2, recovery_timeout_ms: 10000, jitter: 0 }
)";

/// `n` samples of `method` (over HTTP, or "<method>@ws") at `ms` each.
void add_samples(State& s, const std::string& key, const std::string& method, int n, double ms,
                 std::int64_t now) {
  HealthConfig health;
  for (int i = 0; i < n; ++i) {
    apply_event(s,
                SampleEvent{key, method,
                            Sample{now - 1000 + i, static_cast<std::int64_t>(ms * 1000),
                                   Outcome::success}},
                health);
  }
}

struct Fixture {
  explicit Fixture(const char* yaml) : profile(*load_profile_text(yaml, "test.yaml")) {}
  Profile profile;
  FakeClock clock;
  Random rng{7};
  asio::io_context io;
  test::FakeTransport transport{io, &clock};
  StateStore store{std::nullopt, clock, [](const std::string&) {}};
  Router router{profile, transport, store, clock, rng};
  const Chain& chain = profile.chains.front();

  CallOutcome route(RouteOptions options, std::string_view method = "eth_blockNumber") {
    std::vector<jsonrpc::Call> calls(1);
    calls[0].id = "1";
    calls[0].method = std::string(method);
    calls[0].params = "[]";
    std::vector<CallOutcome> out;
    asio::co_spawn(
        io, [&]() -> asio::awaitable<void> { out = co_await router.route(chain, calls, options); },
        asio::detached);
    io.run();
    io.restart();
    return out.at(0);
  }
  [[nodiscard]] const ProviderState& state_of(std::size_t i) const {
    return store.state().providers.at(provider_key(profile.name, chain.name, chain.providers[i]));
  }
};

}  // namespace

TEST_CASE("profile: transport is http, ws or auto; ws and auto need a ws_url", "[transports]") {
  auto p = load_profile_text(kAuto, "t.yaml");
  REQUIRE(p.has_value());
  CHECK(p->chains[0].providers[0].transport == TransportMode::automatic);
  CHECK(p->chains[0].providers[1].ws_url == "ws://b.test");

  auto plain = load_profile_text(R"(
chains:
  local:
    chain_id: 1
    providers:
      - { id: a, url: "http://a.test" }
)",
                                 "t.yaml");
  REQUIRE(plain.has_value());
  CHECK(plain->chains[0].providers[0].transport == TransportMode::http);

  auto no_ws = load_profile_text(R"(
chains:
  local:
    chain_id: 1
    providers:
      - { id: lonely, url: "http://a.test", transport: ws }
)",
                                 "t.yaml");
  REQUIRE_FALSE(no_ws.has_value());
  CHECK_THAT(no_ws.error().message, Catch::Contains("provider 'lonely'") &&
                                        Catch::Contains("transport: ws") &&
                                        Catch::Contains("ws_url"));

  auto bad = load_profile_text(R"(
chains:
  local:
    chain_id: 1
    providers:
      - { id: a, url: "http://a.test", ws_url: "ws://a.test", transport: grpc }
)",
                               "t.yaml");
  REQUIRE_FALSE(bad.has_value());
  CHECK_THAT(bad.error().message, Catch::Contains("'transport' must be http, ws or auto"));
}

TEST_CASE("better_transport: explores the one with fewer samples, then the faster that qualifies",
          "[transports]") {
  LatencyStats none;
  LatencyStats fast{.calls = 5, .answered = 5, .success_rate = 1.0, .p50_ms = 2};
  LatencyStats slow{.calls = 5, .answered = 5, .success_rate = 1.0, .p50_ms = 40};
  LatencyStats failing{.calls = 5, .answered = 2, .success_rate = 0.4, .p50_ms = 1};
  CHECK(better_transport(none, none, 3, 0.9) == TransportKind::http);
  CHECK(better_transport(fast, none, 3, 0.9) == TransportKind::ws);  // explored
  CHECK(better_transport(none, fast, 3, 0.9) == TransportKind::http);
  CHECK(better_transport(slow, fast, 3, 0.9) == TransportKind::ws);
  CHECK(better_transport(fast, slow, 3, 0.9) == TransportKind::http);
  CHECK(better_transport(slow, failing, 3, 0.9) == TransportKind::http);
  CHECK(better_transport(failing, slow, 3, 0.9) == TransportKind::ws);
  CHECK(better_transport(fast, fast, 3, 0.9) == TransportKind::http);  // a tie: HTTP
}

TEST_CASE("planner: fastest takes A's WebSocket and B's HTTP, each by its own samples",
          "[transports][planner]") {
  for (auto strategy : {Strategy::fastest, Strategy::latency_weighted}) {
    Profile profile = *load_profile_text(kAuto, "t.yaml");
    const Chain& chain = profile.chains.front();
    FakeClock clock;
    Random rng{3};
    State state;
    const auto ka = provider_key(profile.name, chain.name, chain.providers[0]);
    const auto kb = provider_key(profile.name, chain.name, chain.providers[1]);
    const auto now = clock.now_ms();
    add_samples(state, ka, "eth_call", 5, 40, now);     // A: slow over HTTP
    add_samples(state, ka, "eth_call@ws", 5, 2, now);   //    fast over WebSocket
    add_samples(state, kb, "eth_call", 5, 3, now);      // B: fast over HTTP
    add_samples(state, kb, "eth_call@ws", 5, 50, now);  //    slow over WebSocket
    StateView view(state);
    Planner planner(profile, view, clock, rng);
    RouteOptions options;
    options.strategy = strategy;
    options.websocket = true;
    Plan plan = planner.plan(chain, "eth_call", "[]", options);
    REQUIRE(plan.candidates.size() == 2);  // one candidate per provider, whatever its transports
    for (const auto& c : plan.candidates) {
      INFO(c.provider->id);
      CHECK(c.weighed);
      if (c.provider->id == "a") {
        CHECK(c.transport == TransportKind::ws);
        CHECK(c.stats.p50_ms == Approx(2));
        CHECK(c.http_stats.p50_ms == Approx(40));
      } else {
        CHECK(c.transport == TransportKind::http);
        CHECK(c.stats.p50_ms == Approx(3));
        CHECK(c.ws_stats.p50_ms == Approx(50));
      }
    }
    if (strategy == Strategy::fastest) {
      CHECK(plan.candidates[0].provider->id == "a");  // 2 ms over its WebSocket beats B's 3
    }

    // Without the sidecar's sockets (call, bench), HTTP only.
    options.websocket = false;
    for (const auto& c : planner.plan(chain, "eth_call", "[]", options).candidates)
      CHECK(c.transport == TransportKind::http);
    // Other strategies: HTTP for auto.
    options.websocket = true;
    options.strategy = Strategy::priority;
    for (const auto& c : planner.plan(chain, "eth_call", "[]", options).candidates)
      CHECK(c.transport == TransportKind::http);
  }
}

TEST_CASE("route: transport ws sends to the ws_url, samples land under <method>@ws",
          "[transports][route]") {
  Fixture f(kWs);
  f.transport.on("ws://a.test", test::FakeTransport::results("\"0x10\""));
  f.transport.on("http://a.test", test::FakeTransport::results("\"0x11\""));
  RouteOptions options;
  options.websocket = true;
  auto out = f.route(options);
  CHECK(out.status == CallOutcome::Status::result);
  CHECK(out.provider == "a");
  CHECK(out.transport == TransportKind::ws);
  CHECK(out.response == R"({"jsonrpc":"2.0","id":1,"result":"0x10"})");
  REQUIRE(out.attempts.size() == 1);
  CHECK(out.attempts[0].transport == TransportKind::ws);
  CHECK(f.transport.count("ws://a.test") == 1);
  CHECK(f.transport.count("http://a.test") == 0);
  const auto& ps = f.state_of(0);
  CHECK(ps.methods.count("eth_blockNumber@ws") == 1);
  CHECK(ps.methods.count("eth_blockNumber") == 0);

  // One-shot commands: HTTP, samples under the method.
  options.websocket = false;
  out = f.route(options);
  CHECK(out.transport == TransportKind::http);
  CHECK(f.transport.count("http://a.test") == 1);
  CHECK(f.state_of(0).methods.count("eth_blockNumber") == 1);
}

TEST_CASE("route: WebSocket failures open its breaker only; the provider goes on over HTTP",
          "[transports][route]") {
  Fixture f(kWs);
  // No handler for ws://a.test: every WebSocket attempt fails to connect.
  f.transport.on("http://a.test", test::FakeTransport::results("\"0x11\""));
  f.transport.on("http://b.test", test::FakeTransport::results("\"0x12\""));
  RouteOptions options;
  options.websocket = true;
  for (int i = 0; i < 2; ++i) {
    auto out = f.route(options);
    CHECK(out.status == CallOutcome::Status::result);
    CHECK(out.provider == "b");  // failed over to the next provider
    REQUIRE(out.attempts.size() == 2);
    CHECK(out.attempts[0].transport == TransportKind::ws);
  }
  const auto& ps = f.state_of(0);
  CHECK(ps.ws_breaker.state == BreakerState::open);
  CHECK(ps.breaker.state == BreakerState::closed);
  CHECK(ps.breaker.failures == 0);
  CHECK(ps.last_failed_ms == 0);  // a socket's failure is not the provider's
  CHECK(f.transport.count("ws://a.test") == 2);

  // The WebSocket's breaker open: a's requests go over HTTP again.
  auto out = f.route(options);
  CHECK(out.provider == "a");
  CHECK(out.transport == TransportKind::http);
  CHECK(f.transport.count("ws://a.test") == 2);
  CHECK(f.transport.count("http://a.test") == 1);

  // After the recovery time the WebSocket is tried again (half-open), and a success closes it.
  f.clock.advance(10'001);
  f.transport.on("ws://a.test", test::FakeTransport::results("\"0x10\""));
  out = f.route(options);
  CHECK(out.transport == TransportKind::ws);
  CHECK(out.provider == "a");
}

TEST_CASE("model: WebSocket samples are bounded like HTTP ones, under <method>@ws or other@ws",
          "[transports][state]") {
  std::map<std::string, std::deque<Sample>, std::less<>> methods;
  CHECK(method_slot(methods, "eth_call@ws") == "eth_call@ws");
  CHECK(method_slot(methods, "not a method@ws") == kOtherWsMethod);
  CHECK(method_slot(methods, "other@ws") == kOtherWsMethod);
  CHECK(sample_method("eth_call", TransportKind::ws) == "eth_call@ws");
  CHECK(sample_method("eth_call", TransportKind::http) == "eth_call");
  for (std::size_t i = 0; i < kMaxMethodsPerProvider; ++i)
    methods["eth_m" + std::to_string(i)];
  CHECK(method_slot(methods, "eth_new@ws") == kOtherWsMethod);
  CHECK(method_slot(methods, "eth_new") == kOtherMethod);
}

TEST_CASE("state file: the WebSocket breaker and @ws samples round-trip; older files load",
          "[transports][state]") {
  const std::string key = "prof/eth/alpha#0123456789ab";
  constexpr std::int64_t kNow = 1'700'000'000'000;
  State s;
  HealthConfig health;
  health.circuit_breaker.failure_threshold = 1;
  AttemptEvent failed{key, kNow, OutcomeClass::provider_failure, "reset", -1, 0};
  failed.ws = true;
  apply_event(s, failed, health);
  apply_event(s, SampleEvent{key, "eth_call@ws", Sample{kNow, 1500, Outcome::success}}, health);
  apply_event(s, SampleEvent{key, "eth_call", Sample{kNow, 9000, Outcome::success}}, health);
  REQUIRE(s.providers.at(key).ws_breaker.state == BreakerState::open);
  REQUIRE(s.providers.at(key).breaker.state == BreakerState::closed);

  const auto text = serialize_state(s, kNow);
  CHECK(text.find("\"ws_breaker\"") != std::string::npos);
  auto parsed = parse_state(text);
  REQUIRE(parsed.has_value());
  const auto& ps = parsed->providers.at(key);
  CHECK(ps.ws_breaker.state == BreakerState::open);
  CHECK(ps.ws_breaker.reason == "reset");
  CHECK(ps.breaker.state == BreakerState::closed);
  REQUIRE(ps.methods.count("eth_call@ws") == 1);
  CHECK(ps.methods.at("eth_call@ws").front().latency_us == 1500);
  CHECK(ps.methods.at("eth_call").front().latency_us == 9000);

  // A file written before transports: no ws_breaker, HTTP samples only.
  State old;
  apply_event(old, SampleEvent{key, "eth_call", Sample{kNow, 9000, Outcome::success}}, health);
  const auto old_text = serialize_state(old, kNow);
  CHECK(old_text.find("ws_breaker") == std::string::npos);
  auto loaded = parse_state(old_text);
  REQUIRE(loaded.has_value());
  CHECK(loaded->providers.at(key).ws_breaker.state == BreakerState::closed);
  CHECK(loaded->providers.at(key).methods.count("eth_call") == 1);
}

TEST_CASE("StateStore: a WebSocket attempt's breaker survives a save and a reload",
          "[transports][state][store]") {
  test::TempDir dir;
  const auto path = dir.path() / "state.json";
  FakeClock clock;
  const std::string key = "prof/eth/alpha#0123456789ab";
  HealthConfig health;
  health.circuit_breaker.failure_threshold = 1;
  {
    StateStore store(path, clock, [](const std::string&) {});
    REQUIRE(store.load());
    AttemptEvent failed{key, clock.now_ms(), OutcomeClass::provider_failure, "timeout", -1, 0};
    failed.ws = true;
    store.record(failed, health);
    REQUIRE(store.save());
  }
  StateStore again(path, clock, [](const std::string&) {});
  REQUIRE(again.load());
  const ProviderState* ps = again.provider(key);
  REQUIRE(ps != nullptr);
  CHECK(ps->ws_breaker.state == BreakerState::open);
  CHECK(ps->breaker.state == BreakerState::closed);
}

}  // namespace unit_transports_test

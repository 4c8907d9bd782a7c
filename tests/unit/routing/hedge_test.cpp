// Hedged reads (issue 19): when a hedge fires, which answer wins, that the loser is cancelled and
// not held against its provider, the budget, and what is never hedged. The transport answers after
// real (short) delays, so that the race is a race; the margins are wide.
#include "rpcroute/hedge.hpp"

#include <catch2/catch.hpp>
#include <chrono>

#include "../support/fake_transport.hpp"
#include "rpcroute/executor.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_hedge_test {

using namespace rpcroute;
using test::FakeTransport;

namespace {

constexpr const char* kProfile = R"(
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    hedge: { min_ms: 30, max_ms: 60, max_extra: 0.5 }
    providers:
      - { id: a, url: "http://a.test", priority: 1 }
      - { id: b, url: "http://b.test", priority: 2 }
      - { id: c, url: "http://c.test", priority: 3 }
routing:
  default_strategy: priority
  method_overrides:
    eth_getCode: { hedge: false }
    eth_getStorageAt: { hedge: { min_ms: 30, max_ms: 60, max_extra: 0 } }
    eth_getTransactionCount: { hedge: { min_ms: 30, max_ms: 1000 } }
health:
  circuit_breaker: { failure_threshold: 1, recovery_timeout_ms: 10000, jitter: 0 }
)";

constexpr const char* kPlain = R"(
chains:
  local:
    chain_id: 31337
    providers:
      - { id: a, url: "http://a.test", priority: 1 }
      - { id: b, url: "http://b.test", priority: 2 }
routing:
  default_strategy: priority
)";

RouteOptions hedging(bool on) {
  RouteOptions o;
  o.hedge = on;
  return o;
}

struct Fixture {
  explicit Fixture(const char* text = kProfile) : profile(*load_profile_text(text, "test.yaml")) {}
  Profile profile;
  FakeClock clock;
  Random rng{7};
  asio::io_context io;
  FakeTransport transport{io};  // real delays: the hedge's timer is a real one
  StateStore store{std::nullopt, clock, [](const std::string&) {}};
  LocalTraffic traffic;
  Planner planner{profile, store, clock, rng, traffic};
  Executor executor{profile, planner, transport, store, clock, rng, traffic};
  const Chain& chain = profile.chains.front();
  double elapsed_ms = 0;

  CallOutcome route_one(std::string method, RouteOptions options = {}) {
    std::vector<jsonrpc::Call> calls(1);
    calls[0].id = "1";
    calls[0].method = std::move(method);
    calls[0].params = R"(["0x0000000000000000000000000000000000000001","latest"])";
    std::vector<CallOutcome> out;
    const auto start = std::chrono::steady_clock::now();
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> { out = co_await executor.route(chain, calls, options); },
        asio::detached);
    io.run();
    io.restart();
    elapsed_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    REQUIRE(out.size() == 1);
    return out[0];
  }
  const ProviderState* state(std::string_view id) {
    return store.provider(planner.provider_key_for(chain, *chain.find_provider(id)));
  }
  std::size_t samples(std::string_view id) {
    const auto* ps = state(id);
    std::size_t n = 0;
    if (ps != nullptr)
      for (const auto& [m, s] : ps->methods) n += s.size();
    return n;
  }
};

}  // namespace

TEST_CASE("hedge: a slow first attempt is overtaken by the next candidate", "[hedge]") {
  Fixture f;
  f.transport.on("http://a.test", FakeTransport::results("\"0xa\""), 600);
  f.transport.on("http://b.test", FakeTransport::results("\"0xb\""), 5);
  auto o = f.route_one("eth_getBalance");
  CHECK(o.result == "\"0xb\"");
  CHECK(o.provider == "b");
  CHECK(o.hedge == CallOutcome::Hedge::hedge_won);
  CHECK(f.elapsed_ms < 400);  // max_ms 60 + 5, far below a's 600
  // The loser was cancelled, and nothing of it was recorded: no failure, no sample.
  CHECK(f.transport.cancelled == 1);
  CHECK(f.samples("a") == 0);
  const auto* a = f.state("a");
  CHECK((a == nullptr || (a->breaker.state == BreakerState::closed && a->breaker.failures == 0)));
  REQUIRE(o.attempts.size() == 1);
  CHECK(o.attempts[0].provider == "b");
  CHECK(f.traffic.attempts.oldest(f.chain.find_provider("a")) == nullptr);
}

TEST_CASE("hedge: a fast first attempt is not hedged", "[hedge]") {
  Fixture f;
  f.transport.on("http://a.test", FakeTransport::results("\"0xa\""), 1);
  f.transport.on("http://b.test", FakeTransport::results("\"0xb\""), 1);
  auto o = f.route_one("eth_getBalance");
  CHECK(o.provider == "a");
  CHECK(o.hedge == CallOutcome::Hedge::none);
  CHECK(f.transport.count("http://b.test") == 0);
}

TEST_CASE("hedge: the first attempt wins when it answers before the hedge", "[hedge]") {
  Fixture f;
  f.transport.on("http://a.test", FakeTransport::results("\"0xa\""), 150);
  f.transport.on("http://b.test", FakeTransport::results("\"0xb\""), 2000);
  auto o = f.route_one("eth_getBalance");
  CHECK(o.provider == "a");
  CHECK(o.hedge == CallOutcome::Hedge::first_won);
  CHECK(f.transport.count("http://b.test") == 1);
  CHECK(f.transport.cancelled == 1);
  CHECK(f.elapsed_ms < 1000);  // b's answer was not waited for
  // The losing hedge is no failure of b: breaker closed at a threshold of one failure.
  const auto* b = f.state("b");
  CHECK((b == nullptr || (b->breaker.state == BreakerState::closed && b->breaker.failures == 0)));
  CHECK(f.samples("b") == 0);
}

TEST_CASE("hedge: the delay follows the provider's latency quantile for the method", "[hedge]") {
  Fixture f;  // eth_getTransactionCount: min_ms 30, max_ms 1000
  f.transport.on("http://a.test", FakeTransport::results("\"0xa\""), 400);
  f.transport.on("http://b.test", FakeTransport::results("\"0xb\""), 1);
  // Without samples the hedge waits max_ms: a's 400 ms answer comes first.
  CHECK(f.route_one("eth_getTransactionCount").hedge == CallOutcome::Hedge::none);
  CHECK(f.transport.count("http://b.test") == 0);
  // Fast samples (10 ms) make the delay min_ms (30): a 400 ms answer is then hedged early.
  f.transport.on("http://a.test", FakeTransport::results("\"0xa\""), 10);
  for (int i = 0; i < 10; ++i) CHECK(f.route_one("eth_getTransactionCount").provider == "a");
  f.transport.on("http://a.test", FakeTransport::results("\"0xa\""), 400);
  auto o = f.route_one("eth_getTransactionCount");
  CHECK(o.hedge == CallOutcome::Hedge::hedge_won);
  CHECK(f.elapsed_ms < 300);
}

TEST_CASE("hedge: a first attempt that fails leaves the call to the hedge", "[hedge]") {
  Fixture f;
  f.transport.on("http://a.test", FakeTransport::status(503), 250);  // after the hedge (60 ms)
  f.transport.on("http://b.test", FakeTransport::results("\"0xb\""), 400);
  auto o = f.route_one("eth_getBalance");
  CHECK(o.provider == "b");
  CHECK(o.hedge == CallOutcome::Hedge::hedge_won);
  REQUIRE(o.attempts.size() == 2);  // a's real failure is recorded and listed
  CHECK(o.attempts[0].provider == "a");
  CHECK(f.transport.cancelled == 0);
  CHECK(f.state("a")->breaker.state == BreakerState::open);
}

TEST_CASE("hedge: a hedge that fails waits for the first attempt", "[hedge]") {
  Fixture f;
  f.transport.on("http://a.test", FakeTransport::results("\"0xa\""), 200);
  f.transport.on("http://b.test", FakeTransport::status(503), 1);
  auto o = f.route_one("eth_getBalance");
  CHECK(o.provider == "a");
  CHECK(o.result == "\"0xa\"");
  CHECK(o.hedge == CallOutcome::Hedge::first_won);
  CHECK(o.attempts.size() == 2);
  CHECK(f.transport.count("http://c.test") == 0);  // no third attempt while a still works
}

TEST_CASE("hedge: both failing goes on to the next candidate", "[hedge]") {
  Fixture f;
  f.transport.on("http://a.test", FakeTransport::status(503), 250);  // after the hedge (60 ms)
  f.transport.on("http://b.test", FakeTransport::status(503), 1);
  f.transport.on("http://c.test", FakeTransport::results("\"0xc\""), 1);
  auto o = f.route_one("eth_getBalance");
  CHECK(o.provider == "c");
  CHECK(o.attempts.size() == 3);
  CHECK(o.hedge != CallOutcome::Hedge::none);
}

TEST_CASE("hedge: never for sends, filters, unknown methods, nor when turned off", "[hedge]") {
  Fixture f;
  f.transport.on("http://a.test", FakeTransport::results("\"0xa\""), 150);
  f.transport.on("http://b.test", FakeTransport::results("\"0xb\""), 1);
  for (const char* m : {"eth_sendRawTransaction", "eth_newFilter", "eth_getFilterChanges",
                        "anvil_mine", "eth_getCode"}) {
    INFO(m);
    auto o = f.route_one(m);
    CHECK(o.hedge == CallOutcome::Hedge::none);
    CHECK(o.provider == "a");
  }
  CHECK(f.route_one("eth_getBalance", hedging(false)).hedge == CallOutcome::Hedge::none);
  CHECK(f.transport.count("http://b.test") == 0);
  // --hedge wins over the override's `hedge: false` (defaults; a's p90 for eth_getCode: 150 ms).
  f.transport.on("http://a.test", FakeTransport::results("\"0xa\""), 600);
  CHECK(f.route_one("eth_getCode", hedging(true)).hedge == CallOutcome::Hedge::hedge_won);
}

TEST_CASE("hedge: --hedge hedges with the defaults on a profile without hedge", "[hedge]") {
  Fixture f(kPlain);
  f.transport.on("http://a.test", FakeTransport::results("\"0xa\""), 300);
  f.transport.on("http://b.test", FakeTransport::results("\"0xb\""), 1);
  auto plain = f.route_one("eth_getBalance");
  CHECK(plain.hedge == CallOutcome::Hedge::none);
  CHECK(f.transport.count("http://b.test") == 0);
  f.transport.on("http://a.test", FakeTransport::results("\"0xa\""), 2500);
  auto o = f.route_one("eth_getBalance", hedging(true));  // after a's p90: 300 ms
  CHECK(o.hedge == CallOutcome::Hedge::hedge_won);
  CHECK(f.elapsed_ms < 1500);
}

TEST_CASE("hedge: the budget caps extra requests", "[hedge]") {
  Fixture f;  // eth_getStorageAt: max_extra 0, so only the starting burst
  // a answers well after the hedge's 60 ms: a loaded (sanitized, -j2) run still hedges every call
  // the budget allows.
  f.transport.on("http://a.test", FakeTransport::results("\"0xa\""), 300);
  f.transport.on("http://b.test", FakeTransport::results("\"0xb\""), 1);
  int hedged = 0;
  for (int i = 0; i < static_cast<int>(kHedgeBurst) + 4; ++i)
    hedged += f.route_one("eth_getStorageAt").hedge != CallOutcome::Hedge::none;
  CHECK(hedged == static_cast<int>(kHedgeBurst));
}

TEST_CASE("hedge: the budget earns max_extra per call, up to the burst", "[hedge]") {
  HedgeBudget b;
  for (int i = 0; i < 10; ++i) CHECK(b.spend());
  CHECK_FALSE(b.spend());
  for (int i = 0; i < 9; ++i) b.earn(0.1);
  CHECK_FALSE(b.spend());
  b.earn(0.1);
  b.earn(0.01);
  CHECK(b.spend());
  for (int i = 0; i < 1000; ++i) b.earn(0.5);
  CHECK(b.tokens() == kHedgeBurst);
}

TEST_CASE("hedge: delay from samples, clamped; max_ms without them", "[hedge]") {
  HedgeConfig c;
  c.quantile = 0.9;
  c.min_ms = 20;
  c.max_ms = 500;
  CHECK(hedge_delay_ms(c, nullptr, 1000, 100) == 500);
  std::deque<Sample> s;
  for (int i = 1; i <= 10; ++i) s.push_back({1000, i * 10'000, Outcome::success});  // 10..100 ms
  CHECK(hedge_delay_ms(c, &s, 1000, 100) == 90);
  c.quantile = 0.5;
  CHECK(hedge_delay_ms(c, &s, 1000, 100) == 50);
  c.min_ms = 60;
  CHECK(hedge_delay_ms(c, &s, 1000, 100) == 60);
  c.max_ms = 60;
  c.quantile = 1;
  CHECK(hedge_delay_ms(c, &s, 1000, 100) == 60);
  // Failures and samples out of the window do not count.
  std::deque<Sample> old{{10, 5'000, Outcome::success}, {1000, 900'000, Outcome::timeout}};
  CHECK(hedge_delay_ms(c, &old, 1000, 100) == c.max_ms);
}

TEST_CASE("hedge: hedgeable methods and settings", "[hedge]") {
  CHECK(hedgeable("eth_getBalance"));
  CHECK(hedgeable("eth_getLogs"));
  CHECK_FALSE(hedgeable("eth_sendRawTransaction"));
  CHECK_FALSE(hedgeable("eth_sendTransaction"));
  CHECK_FALSE(hedgeable("eth_newBlockFilter"));
  CHECK_FALSE(hedgeable("eth_uninstallFilter"));
  CHECK_FALSE(hedgeable("debug_unknownThing"));
  Profile p = *load_profile_text(kProfile, "t.yaml");
  const Chain& chain = p.chains.front();
  CHECK(profile_hedges(p));
  CHECK_FALSE(profile_hedges(*load_profile_text(kPlain, "t.yaml")));
  CHECK(hedge_config(chain, p.policy_for("eth_getBalance"), std::nullopt) == &*chain.hedge);
  CHECK(hedge_config(chain, p.policy_for("eth_getCode"), std::nullopt) == nullptr);
  CHECK(hedge_config(chain, p.policy_for("eth_getBalance"), false) == nullptr);
  CHECK(hedge_config(chain, p.policy_for("eth_getCode"), true) != nullptr);
  CHECK(hedge_config(chain, p.policy_for("eth_getStorageAt"), std::nullopt)->max_extra == 0);
  CHECK(chain.hedge->min_ms == 30);
  CHECK(chain.hedge->quantile == 0.9);
  auto bad = load_profile_text(R"(
chains:
  local:
    chain_id: 1
    hedge: { min_ms: 100, max_ms: 50 }
    providers: [ { id: a, url: "http://a.test" } ]
)",
                               "t.yaml");
  CHECK_FALSE(bad.has_value());
  auto unknown = load_profile_text(R"(
chains:
  local:
    chain_id: 1
    hedge: { delay: 5 }
    providers: [ { id: a, url: "http://a.test" } ]
)",
                                   "t.yaml");
  CHECK_FALSE(unknown.has_value());
}

}  // namespace unit_hedge_test

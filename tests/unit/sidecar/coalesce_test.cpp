// Coalescing over the Transport seam: identical calls in flight at once share one upstream request.
#include "coalesce.hpp"

#include <catch2/catch.hpp>
#include <deque>

#include "../support/fake_transport.hpp"
#include "cache.hpp"
#include "rpcroute/router.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_coalesce_test {

using namespace rpcroute;
using namespace rpcroute::sidecar;

namespace {

constexpr const char* kProfile = R"(
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - { id: a, url: "http://a.test", priority: 1 }
routing:
  default_strategy: priority
health:
  circuit_breaker: { failure_threshold: 1, recovery_timeout_ms: 10000, jitter: 0 }
)";

struct Fixture {
  Profile profile = *load_profile_text(kProfile, "test.yaml");
  FakeClock clock;
  Random rng{7};
  asio::io_context io;
  test::FakeTransport transport{io, &clock};
  StateStore store{std::nullopt, clock, [](const std::string&) {}};
  Router router{profile, transport, store, clock, rng};
  const Chain& chain = profile.chains.front();
  Coalescer coalescer;
  std::deque<std::vector<jsonrpc::Call>> calls;  // each client's call; stable addresses
  std::deque<std::vector<CallOutcome>> outs;

  /// Starts a client's call (not run until run()).
  void start(std::string id, std::string_view params, std::uint64_t head = 7,
             Cancellation* cancel = nullptr) {
    auto& c = calls.emplace_back(1);
    c[0].id = std::move(id);
    c[0].method = "eth_getBalance";
    c[0].params = std::string(params);
    auto& out = outs.emplace_back();
    asio::co_spawn(
        io,
        [this, &c, &out, head, cancel]() -> asio::awaitable<void> {
          std::string key;
          (void)cache_key(key, 1, c[0].method, c[0].params);
          RouteOptions options;
          options.cancel = cancel;
          out = co_await coalescer.route(router, chain, c, options, key, head);
        },
        asio::detached);
  }
  void run() {
    io.run();
    io.restart();
  }
};

constexpr std::string_view kParams = R"(["0xab","0x10"])";

}  // namespace

TEST_CASE("coalescing: identical concurrent reads make one upstream request; each gets its own id",
          "[sidecar][coalesce]") {
  Fixture f;
  f.transport.on("http://a.test", test::FakeTransport::results("\"0x2a\""), 50);
  for (int i = 0; i < 100; ++i) f.start(std::to_string(i), kParams);
  f.run();
  CHECK(f.transport.log.size() == 1);
  for (int i = 0; i < 100; ++i) {
    INFO(i);
    REQUIRE(f.outs[static_cast<std::size_t>(i)].size() == 1);
    const auto& o = f.outs[static_cast<std::size_t>(i)][0];
    CHECK(o.status == CallOutcome::Status::result);
    CHECK(o.response == R"({"jsonrpc":"2.0","id":)" + std::to_string(i) + R"(,"result":"0x2a"})");
    CHECK(o.provider == "a");
    CHECK(o.attempts.size() == (i == 0 ? 1U : 0U));  // only the leader went upstream
  }
  CHECK(f.coalescer.stats().leaders == 1);
  CHECK(f.coalescer.stats().joined == 99);
  CHECK(f.coalescer.in_flight() == 0);
}

TEST_CASE("coalescing: different params, or the same at another head, are not shared",
          "[sidecar][coalesce]") {
  Fixture f;
  f.transport.on("http://a.test", test::FakeTransport::results("\"0x2a\""), 50);
  f.start("1", kParams);
  f.start("2", R"(["0xab","0x11"])");
  f.start("3", kParams, 8);  // the head moved: a latest-relative read must not take the old answer
  f.run();
  CHECK(f.transport.log.size() == 3);
  CHECK(f.coalescer.stats().joined == 0);
}

TEST_CASE("coalescing: a failure is shared as one failure, not one per client",
          "[sidecar][coalesce]") {
  Fixture f;
  f.transport.on("http://a.test", test::FakeTransport::status(503), 50);
  for (int i = 0; i < 10; ++i) f.start(std::to_string(i), kParams);
  f.run();
  // One upstream request (the breaker opens on its failure, threshold 1, and stays the only event).
  CHECK(f.transport.log.size() == 1);
  for (int i = 0; i < 10; ++i) {
    const auto& o = f.outs[static_cast<std::size_t>(i)].at(0);
    CHECK(o.status == CallOutcome::Status::unavailable);
    CHECK(o.response.starts_with(R"({"jsonrpc":"2.0","id":)" + std::to_string(i) + R"(,"error":)"));
  }
  const auto* ps =
      f.store.provider(provider_key(f.profile.name, f.chain.name, f.chain.providers[0]));
  REQUIRE(ps != nullptr);
  CHECK(ps->breaker.failures <= 1);
}

TEST_CASE("coalescing: when the first client leaves, the next leads a new flight the rest join",
          "[sidecar][coalesce]") {
  Fixture f;
  f.transport.on("http://a.test", test::FakeTransport::results("\"0x2a\""), 50);
  Cancellation gone;
  f.start("1", kParams, 7, &gone);
  f.start("2", kParams);
  f.start("3", kParams);
  f.start("4", kParams);
  // Once all have joined, the leader's client leaves: its routing ends cancelled.
  asio::co_spawn(
      f.io,
      [&]() -> asio::awaitable<void> {
        gone.request();
        co_return;
      },
      asio::detached);
  f.run();
  CHECK(f.outs[0].at(0).status == CallOutcome::Status::unavailable);
  for (int i = 2; i <= 4; ++i) {
    INFO(i);
    CHECK(f.outs[static_cast<std::size_t>(i - 1)].at(0).response ==
          R"({"jsonrpc":"2.0","id":)" + std::to_string(i) + R"(,"result":"0x2a"})");
  }
  CHECK(f.coalescer.stats().rerouted == 3);
  CHECK(f.coalescer.stats().leaders == 2);  // the first, then "2" for "3" and "4"
  CHECK(f.coalescer.stats().joined == 2);
  CHECK(f.coalescer.in_flight() == 0);
  CHECK(f.coalescer.waiting() == 0);
}

TEST_CASE("coalescing: once the head moved, later calls share a new flight, not the old one",
          "[sidecar][coalesce]") {
  Fixture f;
  f.transport.on("http://a.test", test::FakeTransport::results("\"0x2a\""), 50);
  f.start("1", kParams, 7);
  f.start("2", kParams, 7);
  f.start("3", kParams, 8);  // the head moved: a new flight takes the table's place
  f.start("4", kParams, 8);
  f.start("5", kParams, 8);
  f.run();
  CHECK(f.transport.log.size() == 2);
  CHECK(f.coalescer.stats().leaders == 2);
  CHECK(f.coalescer.stats().joined == 3);
  for (int i = 1; i <= 5; ++i) {
    INFO(i);
    CHECK(f.outs[static_cast<std::size_t>(i - 1)].at(0).response ==
          R"({"jsonrpc":"2.0","id":)" + std::to_string(i) + R"(,"result":"0x2a"})");
  }
  CHECK(f.coalescer.in_flight() == 0);
}

TEST_CASE("coalescing: the table is bounded; past it calls are routed on their own",
          "[sidecar][coalesce]") {
  Fixture f;
  f.transport.on("http://a.test", test::FakeTransport::results("\"0x2a\""), 50);
  std::size_t most = 0;
  for (std::size_t i = 0; i < Coalescer::kMaxFlights + 2; ++i)
    f.start(std::to_string(i), R"(["0xab",")" + std::to_string(i) + "\"]");
  f.start("again", R"(["0xab","0"])");  // joins the first flight
  asio::co_spawn(
      f.io,
      [&]() -> asio::awaitable<void> {
        most = f.coalescer.in_flight();
        co_return;
      },
      asio::detached);
  f.run();
  CHECK(most == Coalescer::kMaxFlights);
  CHECK(f.coalescer.stats().leaders == Coalescer::kMaxFlights);
  CHECK(f.coalescer.stats().joined == 1);
  CHECK(f.transport.log.size() == Coalescer::kMaxFlights + 2);
  CHECK(f.coalescer.in_flight() == 0);
}

}  // namespace unit_coalesce_test

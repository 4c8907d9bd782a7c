// The Lua scripts and the Redis-backed store against a real redis-server on a loopback port.
#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <memory>
#include <thread>

#include "../support/redis_server.hpp"
#include "../support/temp_dir.hpp"
#include "rpcroute/log_split.hpp"
#include "rpcroute/planner.hpp"
#include "rpcroute/shared/codec.hpp"
#include "rpcroute/shared/store.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_redis_test {

using namespace rpcroute;
using namespace rpcroute::shared;

namespace {

struct Sync {
  explicit Sync(const test::RedisServer& server) : c(server.connect()) {
    if (c == nullptr) throw std::runtime_error("no connection to the test redis-server");
  }
  ~Sync() { redisFree(c); }
  Sync(const Sync&) = delete;
  Sync& operator=(const Sync&) = delete;

  /// The command's reply as text: a string, an integer, "nil", "ERR ...", or "[a,b]".
  std::string run(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
    if (r == nullptr) return "no reply";
    std::string out = text(r);
    freeReplyObject(r);
    return out;
  }
  static std::string text(const redisReply* r) {
    switch (r->type) {
      case REDIS_REPLY_INTEGER:
        return std::to_string(r->integer);
      case REDIS_REPLY_NIL:
        return "nil";
      case REDIS_REPLY_ARRAY: {
        std::string out = "[";
        for (std::size_t i = 0; i < r->elements; ++i) out += (i ? "," : "") + text(r->element[i]);
        return out + "]";
      }
      default:
        return std::string(r->str, r->len);
    }
  }
  redisContext* c;
};

std::string eval(Sync& s, std::string_view script, std::vector<std::string> args) {
  args.insert(args.begin(), {"EVAL", std::string(script)});
  return s.run(args);
}

}  // namespace

TEST_CASE("the quota script grants as grant_lease does, on Redis's clock",
          "[shared][redis][lease]") {
  test::RedisServer server;
  Sync s(server);
  // No refill (rps 0): the script's clock cannot change the figures, so they compare exactly.
  const Quota q{0, 5};
  Bucket model;
  struct Round {
    double take, ask, back;
  };
  for (const Round d : {Round{0, 3, 0}, Round{0, 3, 0}, Round{0, 1, 0}, Round{0, 0, 4},
                        Round{2, 1, 0}, Round{20, 0, 0}, Round{0, 1, 0}}) {
    auto r = eval(s, kQuotaScript,
                  {"2", "q:k", "qh:k", fmt::format("{}", d.take), fmt::format("{}", d.ask),
                   fmt::format("{}", d.back), "0", "5", "60000", "", "5000"});
    const auto g = grant_lease(model, 1'000, d.take, d.ask, d.back, q);
    INFO(r);
    CHECK(r == fmt::format("[{},{:.6f},1,{}]", g.granted, g.level, g.wait_ms));
  }
  CHECK(std::stoll(s.run({"PTTL", "q:k"})) > 50'000);
  // Refill on Redis's clock: drained, then full again after 20 ms at 1000 rps.
  const std::vector<std::string> fast = {"2",    "q:f", "qh:f",  "0",      "5",   "0",
                                         "1000", "5",   "60000", "host-a", "5000"};
  CHECK(eval(s, kQuotaScript, fast).starts_with("[5,0.0"));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto second = fast;
  second[9] = "host-b";
  CHECK(eval(s, kQuotaScript, second).starts_with("[5,0.0"));
  CHECK(s.run({"ZCARD", "qh:f"}) == "2");  // two hosts asking: each a fair share from now on
  CHECK(std::stoll(s.run({"PTTL", "qh:f"})) > 50'000);
}

TEST_CASE("the provider script keeps the newer breaker and height, the later deadline",
          "[shared][redis]") {
  test::RedisServer server;
  Sync s(server);
  auto write = [&](std::string bt, std::string b, std::string rl, std::string ht) {
    return eval(s, kProviderScript,
                {"1", "p:k", "60000", bt, b, "reason", rl, ht, ht.empty() ? "" : "7 " + ht});
  };
  CHECK(write("200", "1 200 1000 0", "5000", "300") == "1");
  CHECK(write("100", "0 0 0 0", "4000", "250") == "1");  // older: nothing changes
  CHECK(s.run({"HMGET", "p:k", "bt", "b", "rl", "ht", "h"}) == "[200,1 200 1000 0,5000,300,7 300]");
  CHECK(write("", "", "9000", "") == "1");  // only a deadline
  CHECK(s.run({"HMGET", "p:k", "bt", "rl"}) == "[200,9000]");
  CHECK(write("400", "0 0 0 0", "", "400") == "1");
  CHECK(s.run({"HMGET", "p:k", "b", "h"}) == "[0 0 0 0,7 400]");
  CHECK(std::stoll(s.run({"PTTL", "p:k"})) > 50'000);
}

TEST_CASE("the provider script keeps the newer cordon", "[shared][redis][cordon]") {
  test::RedisServer server;
  Sync s(server);
  auto write = [&](std::string ct, std::string cv) {
    return eval(s, kProviderScript, {"1", "p:k", "60000", "", "", "", "", "", "", ct, cv});
  };
  CHECK(write("200", "1 0 disk") == "1");
  CHECK(write("100", "0 0 ") == "1");  // an older lift: nothing changes
  CHECK(s.run({"HMGET", "p:k", "ct", "cv"}) == "[200,1 0 disk]");
  CHECK(write("", "") == "1");  // no cordon sent
  CHECK(s.run({"HMGET", "p:k", "ct", "cv"}) == "[200,1 0 disk]");
  CHECK(write("300", "0 0 ") == "1");
  CHECK(s.run({"HMGET", "p:k", "ct", "cv"}) == "[300,0 0 ]");
}

TEST_CASE("the provider script keeps the newer log-range limit", "[shared][redis]") {
  test::RedisServer server;
  Sync s(server);
  auto write = [&](std::string lt, std::string l) {
    return eval(s, kProviderScript, {"1", "p:k", "60000", "", "", "", "", "", "", "", "", lt, l});
  };
  CHECK(write("200", "2000") == "1");
  CHECK(write("100", "500") == "1");  // an older statement: nothing changes
  CHECK(s.run({"HMGET", "p:k", "lt", "l"}) == "[200,2000]");
  CHECK(write("", "") == "1");  // none sent
  CHECK(s.run({"HMGET", "p:k", "lt", "l"}) == "[200,2000]");
  CHECK(write("300", "10000") == "1");
  CHECK(s.run({"HMGET", "p:k", "lt", "l"}) == "[300,10000]");
}

TEST_CASE("the latency script adds counts, folds fields beyond the cap into 'other', expires",
          "[shared][redis]") {
  test::RedisServer server;
  Sync s(server);
  CHECK(eval(s, kLatencyScript, {"1", "l:k", "60000", "4", "eth_call:7", "3", "eth_call:x", "1"}) ==
        "2");
  CHECK(eval(s, kLatencyScript,
             {"1", "l:k", "60000", "4", "eth_call:7", "2", "eth_getLogs:9", "1"}) == "3");
  CHECK(s.run({"HGET", "l:k", "eth_call:7"}) == "5");
  // At the cap: an existing field still counts; a new one goes to other:BUCKET.
  CHECK(eval(s, kLatencyScript,
             {"1", "l:k", "60000", "4", "eth_chainId:2", "1", "eth_getBalance:12", "4",
              "eth_call:x", "1"}) == "5");
  CHECK(s.run({"HGET", "l:k", "eth_chainId:2"}) == "1");
  CHECK(s.run({"HGET", "l:k", "eth_getBalance:12"}) == "nil");
  CHECK(s.run({"HGET", "l:k", "other:12"}) == "4");
  CHECK(s.run({"HGET", "l:k", "eth_call:x"}) == "2");
  const auto ttl = std::stoll(s.run({"PTTL", "l:k"}));
  CHECK(ttl > 50'000);
  CHECK(ttl <= 60'000);
}

TEST_CASE("the high-water script raises, never lowers, and a reset bumps the generation",
          "[shared][redis]") {
  test::RedisServer server;
  Sync s(server);
  auto hw = [&](std::string b, std::string t, std::string reset) {
    return eval(s, kHighWaterScript, {"1", "c:k", b, t, reset, "60000"});
  };
  CHECK(hw("100", "1000", "0") == "[100,1000,0]");
  CHECK(hw("90", "2000", "0") == "[100,1000,0]");
  CHECK(hw("120", "2000", "0") == "[120,2000,0]");
  CHECK(hw("5", "3000", "1") == "[5,3000,1]");
  CHECK(hw("6", "3100", "0") == "[6,3100,1]");
}

namespace {

/// Runs `io` until `done` or `ms` passed.
bool run_until(asio::io_context& io, const std::function<bool()>& done, int ms = 3000) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    io.run_for(std::chrono::milliseconds(10));
    if (io.stopped()) io.restart();
  }
  return done();
}

Profile two_provider_profile() {
  Profile p;
  p.name = "team";
  Chain c;
  c.name = "main";
  c.chain_id = 1;
  for (const char* id : {"a", "b"}) {
    Provider pr;
    pr.id = id;
    pr.url = std::string("http://127.0.0.1/") + id;
    pr.fingerprint = url_fingerprint(pr.url);
    c.providers.push_back(pr);
  }
  c.providers[0].rate_limit = Quota{100, 10};
  p.chains.push_back(c);
  p.health.circuit_breaker.failure_threshold = 1;
  return p;
}

struct Host {
  Host(asio::io_context& io, const Clock& clock, const std::string& url, const TlsOptions& tls = {})
      : local(std::nullopt, clock, [](const std::string&) {}) {
    SharedOptions o;
    o.url = *parse_redis_url(url);
    o.tls = tls;
    o.refresh_ms = 50;
    o.budget_ms = 300;
    o.retry_ms = 100;
    o.announce = false;
    o.latency_ms = 100;
    store = std::make_unique<SharedStore>(io, local, clock, o,
                                          [this](const std::string& m) { logs.push_back(m); });
  }
  StateStore local;
  std::unique_ptr<SharedStore> store;
  std::vector<std::string> logs;
};

}  // namespace

TEST_CASE("two stores on one Redis share breakers, deadlines, heights and the mark",
          "[shared][redis]") {
  test::RedisServer server;
  asio::io_context io;
  SystemClock clock;
  const auto profile = two_provider_profile();
  const auto& chain = profile.chains[0];
  const auto ka = provider_key(profile.name, chain.name, chain.providers[0]);
  const auto ck = chain_key(profile.name, chain);
  Host a(io, clock, server.url());
  Host b(io, clock, server.url());
  for (auto* h : {&a, &b}) {
    h->store->watch(profile);
    h->store->start();
  }
  REQUIRE(run_until(io, [&] {
    return a.store->status().state == LinkState::up && b.store->status().state == LinkState::up;
  }));
  const auto now = clock.now_ms();
  a.store->record(AttemptEvent{ka, now, OutcomeClass::provider_failure, "refused"}, profile.health);
  REQUIRE(a.store->provider(ka)->breaker.state == BreakerState::open);
  // Seen by the other host through the notice, well within a second.
  CHECK(run_until(
      io,
      [&] {
        auto* p = b.store->provider(ka);
        return p != nullptr && p->breaker.state == BreakerState::open;
      },
      1000));
  CHECK(b.store->provider(ka)->breaker.opened_ms == a.store->provider(ka)->breaker.opened_ms);

  a.store->record(AttemptEvent{ka, now, OutcomeClass::rate_limited, "429", 60'000}, profile.health);
  a.store->record(HeightEvent{ka, Height{500, now}}, profile.health);
  a.store->record(HighWaterEvent{ck, Height{500, now}}, profile.health);
  CHECK(run_until(io, [&] {
    auto* p = b.store->provider(ka);
    auto* c = b.store->chain(ck);
    return p != nullptr && p->rate_limited_until_ms == now + 60'000 && p->height.block == 500 &&
           c != nullptr && c->high_water.block == 500;
  }));
  // B's own lower observation does not lower the shared mark.
  b.store->record(HighWaterEvent{ck, Height{499, now + 1}}, profile.health);
  run_until(
      io, [] { return false; }, 200);
  CHECK(a.store->chain(ck)->high_water.block == 500);
  CHECK(b.store->chain(ck)->high_water.block == 500);
  CHECK(a.store->status().adopted + b.store->status().adopted > 0);
}

TEST_CASE("two stores on one Redis share a cordon and its lift, the newer winning",
          "[shared][redis][cordon]") {
  test::RedisServer server;
  asio::io_context io;
  SystemClock clock;
  const auto profile = two_provider_profile();
  const auto& chain = profile.chains[0];
  const auto ka = provider_key(profile.name, chain.name, chain.providers[0]);
  Host a(io, clock, server.url());
  Host b(io, clock, server.url());
  for (auto* h : {&a, &b}) {
    h->store->watch(profile);
    h->store->start();
  }
  REQUIRE(run_until(io, [&] {
    return a.store->status().state == LinkState::up && b.store->status().state == LinkState::up;
  }));
  const auto now = clock.now_ms();
  Cordon on;
  on.t_ms = now;
  on.on = true;
  on.reason = "maintenance";
  a.store->record(CordonEvent{ka, on}, profile.health);
  CHECK(run_until(
      io,
      [&] {
        auto* p = b.store->provider(ka);
        return p != nullptr && p->cordon.active(now) && p->cordon.reason == "maintenance";
      },
      1000));
  // An older lift written later (a host with a slow clock) does not undo it; a newer one does.
  Cordon stale;
  stale.t_ms = now - 10;
  b.store->record(CordonEvent{ka, stale}, profile.health);
  run_until(
      io, [] { return false; }, 300);
  CHECK(a.store->provider(ka)->cordon.active(now));
  Cordon lift;
  lift.t_ms = now + 1;
  b.store->record(CordonEvent{ka, lift}, profile.health);
  CHECK(run_until(
      io, [&] { return !a.store->provider(ka)->cordon.active(now + 2); }, 1000));
}

TEST_CASE("a log-range limit learned by one store makes the other split up front",
          "[shared][redis]") {
  test::RedisServer server;
  asio::io_context io;
  SystemClock clock;
  const auto profile = two_provider_profile();
  const auto& chain = profile.chains[0];
  const auto ka = provider_key(profile.name, chain.name, chain.providers[0]);
  Host a(io, clock, server.url());
  Host b(io, clock, server.url());
  for (auto* h : {&a, &b}) {
    h->store->watch(profile);
    h->store->start();
  }
  REQUIRE(run_until(io, [&] {
    return a.store->status().state == LinkState::up && b.store->status().state == LinkState::up;
  }));
  const auto now = clock.now_ms();
  a.store->record(LogLimitEvent{ka, LogLimit{2000, now}}, profile.health);
  CHECK(run_until(
      io,
      [&] {
        auto* p = b.store->provider(ka);
        return p != nullptr && p->log_limit.blocks == 2000;
      },
      2000));
  // What routing reads: the limit to split by, as if B had met the error itself.
  CHECK(log_range_limit(chain.providers[0], b.store->provider(ka)) == 2000U);
  // A newer statement from B (the provider raised it) reaches A.
  b.store->record(LogLimitEvent{ka, LogLimit{10000, now + 1}}, profile.health);
  CHECK(run_until(
      io, [&] { return a.store->provider(ka)->log_limit.blocks == 10000; }, 2000));
}

TEST_CASE("latency summaries: a store with no samples of its own ranks by what another measured",
          "[shared][redis]") {
  test::RedisServer server;
  asio::io_context io;
  SystemClock clock;
  auto profile = two_provider_profile();
  const auto& chain = profile.chains[0];
  const auto ka = provider_key(profile.name, chain.name, chain.providers[0]);
  const auto kb = provider_key(profile.name, chain.name, chain.providers[1]);
  Host a(io, clock, server.url());
  Host b(io, clock, server.url());
  for (auto* h : {&a, &b}) {
    h->store->watch(profile);
    h->store->start();
  }
  REQUIRE(run_until(io, [&] {
    return a.store->status().state == LinkState::up && b.store->status().state == LinkState::up;
  }));
  // A measured provider a slow (80 ms) and b fast (2 ms); a method outside the catalogue too.
  const auto now = clock.now_ms();
  for (int i = 0; i < 20; ++i) {
    a.store->record(SampleEvent{ka, "eth_call", Sample{now, 80'000, Outcome::success}},
                    profile.health);
    a.store->record(SampleEvent{kb, "eth_call", Sample{now, 2'000, Outcome::success}},
                    profile.health);
    a.store->record(
        SampleEvent{kb, "made_up" + std::to_string(i), Sample{now, 9'000'000, Outcome::timeout}},
        profile.health);
  }
  REQUIRE(run_until(
      io,
      [&] {
        auto* pa = b.store->provider(ka);
        auto* pb = b.store->provider(kb);
        return pa != nullptr && pb != nullptr && pa->shared_latency.count("eth_call") == 1 &&
               pb->shared_latency.count("eth_call") == 1 && pb->shared_latency.count("other") == 1;
      },
      3000));
  const auto& sa = b.store->provider(ka)->shared_latency.at("eth_call");
  const auto& sb = b.store->provider(kb)->shared_latency.at("eth_call");
  CHECK(sa.calls == 20);
  CHECK(sa.p50_ms == Approx(80).epsilon(0.2));
  CHECK(sb.p50_ms == Approx(2).epsilon(0.2));
  CHECK(b.store->provider(kb)->shared_latency.at("other").answered == 0);
  CHECK(b.store->provider(kb)->shared_latency.size() == 2);  // every unknown method in one key
  CHECK(b.store->provider(ka)->methods.empty());             // none of its own
  // The planner of B, with `fastest`: b first, by the shared summary (a is first in the profile).
  profile.routing.default_strategy = Strategy::fastest;
  Random rng{1};
  Planner planner(profile, *b.store, clock, rng);
  const auto plan = planner.plan(chain, "eth_call", "[]", RouteOptions{});
  REQUIRE(plan.candidates.size() == 2);
  CHECK(plan.candidates[0].provider->id == "b");
  CHECK(plan.candidates[0].stats.prior == profile.strategies.fastest.min_calls);
  CHECK_FALSE(plan.candidates[0].cold);
  // A host that shares nothing and has no samples: the profile's order.
  StateStore alone(std::nullopt, clock, [](const std::string&) {});
  Planner cold(profile, alone, clock, rng);
  CHECK(cold.plan(chain, "eth_call", "[]", RouteOptions{}).candidates[0].provider->id == "a");
}

TEST_CASE("two stores draw from one quota bucket", "[shared][redis]") {
  test::RedisServer server;
  asio::io_context io;
  SystemClock clock;
  const auto profile = two_provider_profile();
  const auto& chain = profile.chains[0];
  const auto ka = provider_key(profile.name, chain.name, chain.providers[0]);
  const Quota q = *chain.providers[0].rate_limit;
  Host a(io, clock, server.url());
  Host b(io, clock, server.url());
  for (auto* h : {&a, &b}) {
    h->store->watch(profile);
    h->store->start();
  }
  REQUIRE(run_until(io, [&] {
    return a.store->status().state == LinkState::up && b.store->status().state == LinkState::up;
  }));
  // A drains the bucket; B has drawn nothing but learns it is empty.
  for (int i = 0; i < 10; ++i)
    a.store->record(QuotaEvent{ka, clock.now_ms(), 1, q}, profile.health);
  CHECK(run_until(
      io,
      [&] {
        auto* p = b.store->provider(ka);
        return p != nullptr && p->quota.t_ms > 0 && bucket_level(p->quota, q, clock.now_ms()) < 2;
      },
      1000));
}

TEST_CASE("three stores leasing from one quota spend at most burst + rps × seconds",
          "[shared][redis][lease]") {
  test::RedisServer server;
  Sync s(server);
  asio::io_context io;
  SystemClock clock;
  const auto profile = two_provider_profile();
  const auto& chain = profile.chains[0];
  const auto ka = provider_key(profile.name, chain.name, chain.providers[0]);
  const Quota q = *chain.providers[0].rate_limit;  // 100 rps, burst 10
  std::vector<std::unique_ptr<Host>> hosts;
  for (int i = 0; i < 3; ++i) hosts.push_back(std::make_unique<Host>(io, clock, server.url()));
  for (auto& h : hosts) {
    h->store->watch(profile);
    h->store->start();
  }
  REQUIRE(run_until(io, [&] {
    return std::all_of(hosts.begin(), hosts.end(),
                       [](const auto& h) { return h->store->status().state == LinkState::up; });
  }));
  io.run_for(std::chrono::milliseconds(100));  // the first leases
  // The window opens on a full shared bucket; each host holds a token at most from before.
  CHECK(s.run({"DEL", quota_hash("rpcroute:", ka)}) == "1");
  const auto t0 = clock.now_ms();
  const auto end_us = clock.mono_us() + 1'000'000;
  int spent = 0;
  std::vector<int> by_host(hosts.size());
  while (clock.mono_us() < end_us) {
    io.run_for(std::chrono::microseconds(300));
    // Each host spends whenever its bucket holds a token, as the router's quota rule lets it.
    for (std::size_t i = 0; i < hosts.size(); ++i) {
      auto& store = *hosts[i]->store;
      for (const ProviderState* p = store.provider(ka);
           p != nullptr && bucket_wait_ms(p->quota, q, clock.now_ms()) == 0;
           p = store.provider(ka)) {
        store.record(QuotaEvent{ka, clock.now_ms(), 1, q}, profile.health);
        ++spent;
        ++by_host[i];
      }
    }
  }
  const double bound = q.burst + q.rps * static_cast<double>(clock.now_ms() - t0) / 1000.0;
  INFO("spent " << spent << " (" << by_host[0] << " " << by_host[1] << " " << by_host[2]
                << "), bound " << bound);
  CHECK(spent <= bound * 1.05 + 3);
  CHECK(spent >= bound * 0.85);
  for (int n : by_host) CHECK(n >= bound / 10);  // nobody starved
}

TEST_CASE("Redis away: the lease becomes the local bucket, refilling; back, the host leases again",
          "[shared][redis][lease]") {
  auto server = std::make_unique<test::RedisServer>();
  asio::io_context io;
  SystemClock clock;
  const auto profile = two_provider_profile();
  const auto& chain = profile.chains[0];
  const auto ka = provider_key(profile.name, chain.name, chain.providers[0]);
  const Quota q = *chain.providers[0].rate_limit;  // 100 rps, burst 10
  Host a(io, clock, server->url());
  a.store->watch(profile);
  a.store->start();
  // A lease: its bucket does not refill before the lease lapses (t_ms ahead of now).
  auto leased = [&] {
    const auto* p = a.store->provider(ka);
    return p != nullptr && p->quota.t_ms > clock.now_ms();
  };
  REQUIRE(run_until(io, [&] { return a.store->status().state == LinkState::up && leased(); }));
  CHECK(bucket_level(a.store->provider(ka)->quota, q, clock.now_ms()) == Approx(1));  // idle

  server->signal(SIGSTOP);
  REQUIRE(run_until(
      io, [&] { return a.store->status().state == LinkState::down; }, 2000));
  CHECK_FALSE(leased());  // the local bucket now, refilling at rps as without Redis
  run_until(
      io, [] { return false; }, 150);
  CHECK(bucket_level(a.store->provider(ka)->quota, q, clock.now_ms()) == Approx(q.burst));
  int spent = 0;
  while (bucket_wait_ms(a.store->provider(ka)->quota, q, clock.now_ms()) == 0 && spent < 100) {
    a.store->record(QuotaEvent{ka, clock.now_ms(), 1, q}, profile.health);
    ++spent;
  }
  CHECK(spent >= 10);
  CHECK(spent < 100);
  REQUIRE(a.logs.size() == 1);
  CHECK(a.logs[0].find("own bucket") != std::string::npos);

  server->signal(SIGCONT);
  REQUIRE(run_until(
      io, [&] { return a.store->status().state == LinkState::up; }, 3000));
  CHECK(run_until(io, leased, 1000));
}

TEST_CASE("Redis away: local state within the budget, logged once, merged back on return",
          "[shared][redis]") {
  auto server = std::make_unique<test::RedisServer>();
  asio::io_context io;
  SystemClock clock;
  const auto profile = two_provider_profile();
  const auto& chain = profile.chains[0];
  const auto kb = provider_key(profile.name, chain.name, chain.providers[1]);
  Host a(io, clock, server->url());
  a.store->watch(profile);
  a.store->start();
  REQUIRE(run_until(io, [&] { return a.store->status().state == LinkState::up; }));

  // Paused: no answer within the budget is down.
  server->signal(SIGSTOP);
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(run_until(
      io, [&] { return a.store->status().state == LinkState::down; }, 2000));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(1000));
  CHECK(a.store->status().fallbacks == 1);
  // Learning goes on locally, at once.
  a.store->record(AttemptEvent{kb, clock.now_ms(), OutcomeClass::provider_failure, "refused"},
                  profile.health);
  CHECK(a.store->provider(kb)->breaker.state == BreakerState::open);
  run_until(
      io, [] { return false; }, 400);  // retries while down are not logged again
  CHECK(a.logs.size() == 1);
  CHECK(a.logs[0].find("unreachable") != std::string::npos);

  server->signal(SIGCONT);
  REQUIRE(run_until(
      io, [&] { return a.store->status().state == LinkState::up; }, 3000));
  // What was learned meanwhile reached Redis.
  Sync s(*server);
  CHECK(run_until(
      io,
      [&] {
        return s.run({"HGET", provider_hash("rpcroute:", kb), "b"}).starts_with("1 ");
      },
      1000));
}

namespace {

/// How many NOSCRIPT errors Redis has answered since it started (INFO errorstats).
long noscript_errors(Sync& s) {
  const auto info = s.run({"INFO", "errorstats"});
  const auto at = info.find("errorstat_NOSCRIPT:count=");
  return at == std::string::npos ? 0 : std::stol(info.substr(at + 25));
}

/// The scripts forgotten between two writes of one store (SCRIPT FLUSH): each later write lands,
/// none is refused, the link stays up, and the scripts are loaded again once.
void writes_survive_a_script_flush(Host& a, Sync& s, asio::io_context& io, const Clock& clock) {
  const auto profile = two_provider_profile();
  const auto& chain = profile.chains[0];
  const auto ka = provider_key(profile.name, chain.name, chain.providers[0]);
  const auto kb = provider_key(profile.name, chain.name, chain.providers[1]);
  const auto ck = chain_key(profile.name, chain);
  a.store->watch(profile);
  a.store->start();
  REQUIRE(run_until(io, [&] { return a.store->status().state == LinkState::up; }));
  const auto chain_block = [&] { return s.run({"HGET", chain_hash("rpcroute:", ck), "b"}); };
  a.store->record(HighWaterEvent{ck, Height{500, clock.now_ms()}}, profile.health);
  REQUIRE(run_until(io, [&] { return chain_block() == "500"; }));
  run_until(
      io, [] { return false; }, 200);  // a few rounds: every script in use (quota, latency too)

  REQUIRE(s.run({"SCRIPT", "FLUSH"}) == "OK");
  // What only a script writes: back once the script runs again.
  s.run({"DEL", quota_hash("rpcroute:", ka)});
  // The mark goes out at once (the high-water script), the breaker too (the provider script), the
  // quota draws and latency counts with the next rounds.
  a.store->record(HighWaterEvent{ck, Height{600, clock.now_ms()}}, profile.health);
  a.store->record(AttemptEvent{kb, clock.now_ms(), OutcomeClass::provider_failure, "refused"},
                  profile.health);
  const auto spend = [&] {  // tokens spent from the lease: the host asks for more (quota script)
    for (int i = 0; i < 3; ++i)
      a.store->record(QuotaEvent{ka, clock.now_ms(), 4, Quota{100, 10}}, profile.health);
  };
  spend();
  a.store->record(SampleEvent{ka, "eth_call", Sample{clock.now_ms(), 12'000, Outcome::success}},
                  profile.health);
  const auto latency_key = latency_hash("rpcroute:", ka, clock.now_ms() / kLatencyWindowMs);
  CHECK(run_until(io, [&] {
    return chain_block() == "600" &&
           s.run({"HGET", provider_hash("rpcroute:", kb), "b"}).starts_with("1 ") &&
           s.run({"EXISTS", quota_hash("rpcroute:", ka)}) == "1" &&
           s.run({"EXISTS", latency_key}) == "1";
  }));
  run_until(
      io, [] { return false; }, 300);  // more rounds: every script has run again by now
  const auto after_flush = noscript_errors(s);
  // From now on EVALSHA again, never NOSCRIPT again.
  a.store->record(HighWaterEvent{ck, Height{700, clock.now_ms()}}, profile.health);
  spend();
  a.store->record(SampleEvent{ka, "eth_call", Sample{clock.now_ms(), 13'000, Outcome::success}},
                  profile.health);
  CHECK(run_until(io, [&] { return chain_block() == "700"; }));
  run_until(
      io, [] { return false; }, 300);
  CHECK(noscript_errors(s) == after_flush);
  CHECK(after_flush >= 1);
  CHECK(after_flush <= 8);  // the calls in flight when Redis forgot, not one per round
  const auto st = a.store->status();
  CHECK(st.state == LinkState::up);
  CHECK(st.fallbacks == 0);
  CHECK(st.write_errors == 0);
  CHECK(st.script_reloads >= 1);
  CHECK(st.script_reloads <= 4);  // one SCRIPT LOAD per script forgotten
  for (const auto& line : a.logs) CHECK(line.find("refuses writes") == std::string::npos);
}

}  // namespace

TEST_CASE("SCRIPT FLUSH between two writes: the scripts are loaded again and the writes land",
          "[shared][redis][noscript]") {
  test::RedisServer server;
  asio::io_context io;
  SystemClock clock;
  Sync s(server);
  Host a(io, clock, server.url());
  writes_survive_a_script_flush(a, s, io, clock);
}

// rediss://: hiredis speaks to the in-process TLS relay, which holds the TLS connection.
namespace {

struct TlsRedis {
  explicit TlsRedis(bool auth_clients = false) : pki(make(dir)) {
    server = std::make_unique<test::RedisServer>(
        test::RedisTls{(dir / "server.pem").string(), (dir / "server.key").string(),
                       (dir / "ca.pem").string(), auth_clients});
  }
  static bool make(const test::TempDir& d) {
    test::make_redis_pki(d.path());
    return true;
  }
  [[nodiscard]] TlsOptions trust(const std::string& ca = "ca.pem") const {
    TlsOptions t;
    t.ca_file = (dir / ca).string();
    return t;
  }
  test::TempDir dir;
  bool pki;
  std::unique_ptr<test::RedisServer> server;
};

/// Whatever the relay left in `tmp` (its socket folders: none once connected).
std::size_t leftovers(const std::filesystem::path& tmp) {
  std::size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(tmp))
    n += e.path().filename().string().starts_with("rpcroute-redis-") ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("rediss://: two stores share a breaker through TLS as through plain Redis",
          "[shared][redis][tls]") {
  TlsRedis redis;
  test::TempDir tmp;  // the relay's socket folder goes here, and is gone once connected
  ::setenv("TMPDIR", tmp.path().c_str(), 1);
  asio::io_context io;
  SystemClock clock;
  const auto profile = two_provider_profile();
  const auto& chain = profile.chains[0];
  const auto ka = provider_key(profile.name, chain.name, chain.providers[0]);
  const auto ck = chain_key(profile.name, chain);
  // By address and by name: both are in the certificate, the name sent as SNI.
  Host a(io, clock, redis.server->tls_url(), redis.trust());
  Host b(io, clock, redis.server->tls_url("localhost") + "/0", redis.trust());
  for (auto* h : {&a, &b}) {
    h->store->watch(profile);
    h->store->start();
  }
  const bool up = run_until(io, [&] {
    return a.store->status().state == LinkState::up && b.store->status().state == LinkState::up;
  });
  ::unsetenv("TMPDIR");
  INFO(a.store->status().last_error << " / " << b.store->status().last_error);
  REQUIRE(up);
  CHECK(a.store->status().url.starts_with("rediss://127.0.0.1:"));
  CHECK(leftovers(tmp.path()) == 0);
  a.store->record(AttemptEvent{ka, clock.now_ms(), OutcomeClass::provider_failure, "refused"},
                  profile.health);
  CHECK(run_until(
      io,
      [&] {
        auto* p = b.store->provider(ka);
        return p != nullptr && p->breaker.state == BreakerState::open;
      },
      1000));
  a.store->record(HighWaterEvent{ck, Height{700, clock.now_ms()}}, profile.health);
  CHECK(run_until(io, [&] {
    auto* c = b.store->chain(ck);
    return c != nullptr && c->high_water.block == 700;
  }));
  // It really went through TLS: the plain port saw none of these clients.
  Sync s(*redis.server);
  CHECK(s.run({"HGET", provider_hash("rpcroute:", ka), "b"}).starts_with("1 "));
  // Redis killed: the TLS side ends, the store falls back and says so.
  redis.server.reset();
  CHECK(run_until(
      io, [&] { return a.store->status().state == LinkState::down; }, 2000));
  CHECK(a.store->status().last_error.find("closed") != std::string::npos);
}

TEST_CASE("rediss://: a certificate the store does not trust fails with its cause",
          "[shared][redis][tls]") {
  TlsRedis redis;
  asio::io_context io;
  SystemClock clock;
  const auto profile = two_provider_profile();
  const auto& chain = profile.chains[0];
  const auto kb = provider_key(profile.name, chain.name, chain.providers[1]);
  SECTION("an unknown CA") {
    Host a(io, clock, redis.server->tls_url(), redis.trust("other_ca.pem"));
    a.store->watch(profile);
    a.store->start();
    REQUIRE(run_until(io, [&] { return a.store->status().state == LinkState::down; }));
    const auto& why = a.store->status().last_error;
    INFO(why);
    CHECK(why.find("TLS: ") != std::string::npos);
    CHECK(why.find("unknown certificate authority") != std::string::npos);
    REQUIRE(a.logs.size() == 1);
    CHECK(a.logs[0].find(why) != std::string::npos);
    // Routing goes on, on local state.
    a.store->record(AttemptEvent{kb, clock.now_ms(), OutcomeClass::provider_failure, "refused"},
                    profile.health);
    CHECK(a.store->provider(kb)->breaker.state == BreakerState::open);
  }
  SECTION("the system store (no ca_file) does not know the test CA either") {
    Host a(io, clock, redis.server->tls_url());
    a.store->watch(profile);
    a.store->start();
    REQUIRE(run_until(io, [&] { return a.store->status().state == LinkState::down; }));
    INFO(a.store->status().last_error);
    CHECK(a.store->status().last_error.find("TLS: ") != std::string::npos);
  }
  SECTION("a host name the certificate does not name") {
    // A server whose certificate (by the trusted CA) names other.invalid only.
    test::RedisServer wrong(test::RedisTls{(redis.dir / "wrong_host.pem").string(),
                                           (redis.dir / "server.key").string(),
                                           (redis.dir / "ca.pem").string()});
    Host a(io, clock, wrong.tls_url("localhost"), redis.trust());
    a.store->watch(profile);
    a.store->start();
    REQUIRE(run_until(io, [&] { return a.store->status().state == LinkState::down; }));
    INFO(a.store->status().last_error);
    CHECK(a.store->status().last_error.find("TLS: ") != std::string::npos);
    CHECK(a.store->status().last_error.find("host") != std::string::npos);
  }
  SECTION("insecure checks nothing, and says so") {
    TlsOptions t;
    t.insecure = true;
    Host a(io, clock, redis.server->tls_url(), t);
    a.store->watch(profile);
    a.store->start();
    CHECK(run_until(io, [&] { return a.store->status().state == LinkState::up; }));
    REQUIRE_FALSE(a.logs.empty());
    CHECK(a.logs[0].find("insecure") != std::string::npos);
  }
}

TEST_CASE("rediss://: a handshake that never comes is bounded by the budget",
          "[shared][redis][tls]") {
  // A plain Redis port: it never answers a ClientHello with TLS.
  test::RedisServer server;
  asio::io_context io;
  SystemClock clock;
  const auto profile = two_provider_profile();
  Host a(io, clock, "rediss://127.0.0.1:" + std::to_string(server.port()));
  a.store->watch(profile);
  a.store->start();
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(run_until(
      io, [&] { return a.store->status().state == LinkState::down; }, 3000));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(1500));
  INFO(a.store->status().last_error);
  CHECK(a.store->status().last_error.find("TLS") != std::string::npos);
}

TEST_CASE("rediss:// with client certificates: works with cert_file, fails without",
          "[shared][redis][tls]") {
  TlsRedis redis(true);
  asio::io_context io;
  SystemClock clock;
  const auto profile = two_provider_profile();
  auto with = redis.trust();
  with.cert_file = (redis.dir / "client.pem").string();
  with.key_file = (redis.dir / "client.key").string();
  Host a(io, clock, redis.server->tls_url(), with);
  Host b(io, clock, redis.server->tls_url(), redis.trust());
  for (auto* h : {&a, &b}) {
    h->store->watch(profile);
    h->store->start();
  }
  CHECK(run_until(io, [&] { return a.store->status().state == LinkState::up; }));
  REQUIRE(run_until(io, [&] { return b.store->status().state == LinkState::down; }));
  INFO(b.store->status().last_error);
  CHECK(b.store->status().last_error.find("certificate") != std::string::npos);
}

TEST_CASE("rediss://: SCRIPT FLUSH between two writes, the writes land as over plain Redis",
          "[shared][redis][noscript][tls]") {
  TlsRedis redis;
  asio::io_context io;
  SystemClock clock;
  Sync s(*redis.server);  // the plain port, for the test's own commands
  Host a(io, clock, redis.server->tls_url(), redis.trust());
  writes_survive_a_script_flush(a, s, io, clock);
}

}  // namespace unit_redis_test

// Planning one request: ranking + tiering (rank_candidates) alone, and the whole Router::plan
// (filters, breaker and lag checks, latency stats from the samples, rank, tier) that the router runs
// for every call, for 4 / 16 / 64 providers with the state of perf::state_for.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <string>
#include <vector>

#include "fixtures.hpp"
#include "rpcroute/router.hpp"

namespace {

using namespace rpcroute;

struct World {
  explicit World(int n) : profile(perf::profile_with(n)) {
    clock.set(perf::kNowMs);
    store.state() = perf::state_for(profile);
  }
  Profile profile;
  FakeClock clock;
  Random rng{42};
  asio::io_context io;
  Engine engine{io};
  StateStore store{std::nullopt, clock, [](const std::string&) {}};
  Router router{profile, engine, store, clock, rng};
  const Chain& chain() const { return profile.chains.front(); }
};

const std::string kParams = R"([{"to":"0x6b175474e89094c44da98b954eedeac495271d0f","data":"0x70a08231"},"latest"])";

/// rank_candidates (the strategy's order, then stable tiering) on the candidates Router::plan
/// builds, restored to profile order from a pool refilled outside the timing.
void rank_bench(benchmark::State& st, Strategy strategy, int n) {
  World w(n);
  RouteOptions opts;
  opts.strategy = strategy;
  opts.with_stats = true;
  auto proto = w.router.plan(w.chain(), "eth_call", kParams, opts).candidates;
  std::sort(proto.begin(), proto.end(), [](const Candidate& a, const Candidate& b) { return a.position < b.position; });
  RankInput in;
  in.strategy = strategy;
  in.params = &w.profile.strategies;
  in.rng = &w.rng;
  in.rr_cursor = 12'345;
  std::vector<std::vector<Candidate>> pool(256);
  std::size_t next = pool.size();
  for (auto _ : st) {
    if (next == pool.size()) {
      st.PauseTiming();
      for (auto& c : pool) c = proto;
      next = 0;
      st.ResumeTiming();
    }
    auto& c = pool[next++];
    rank_candidates(c, in);
    benchmark::DoNotOptimize(c.data());
  }
  st.SetLabel(std::to_string(proto.size()) + " candidates");
}

void plan_bench(benchmark::State& st, Strategy strategy, int n) {
  World w(n);
  RouteOptions opts;
  opts.strategy = strategy;
  std::size_t candidates = 0;
  for (auto _ : st) {
    auto plan = w.router.plan(w.chain(), "eth_call", kParams, opts);
    candidates = plan.candidates.size();
    benchmark::DoNotOptimize(plan);
  }
  st.SetLabel(std::to_string(candidates) + " candidates");
}

const bool registered = [] {
  for (Strategy s : kAllStrategies) {
    for (int n : {4, 16, 64}) {
      auto name = fmt::format("rank/{}/{}", strategy_name(s), n);
      benchmark::RegisterBenchmark(name.c_str(), [s, n](benchmark::State& st) { rank_bench(st, s, n); });
    }
  }
  for (Strategy s : {Strategy::load_balanced, Strategy::priority, Strategy::fastest, Strategy::latency_weighted}) {
    for (int n : {4, 16, 64}) {
      auto name = fmt::format("plan/{}/{}", strategy_name(s), n);
      benchmark::RegisterBenchmark(name.c_str(), [s, n](benchmark::State& st) { plan_bench(st, s, n); });
    }
  }
  return true;
}();

}  // namespace

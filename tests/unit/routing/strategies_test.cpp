#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "rpcroute/strategy.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_strategies_test {

using namespace rpcroute;

namespace {

constexpr int kDraws = 20'000;
constexpr double kTolerance = 0.02;

/// Providers live here so that candidates can point at them.
struct Fixture {
  std::vector<Provider> providers;
  StrategyParams params;
  Random rng{12345};

  Provider& add(const std::string& id, int priority = 0, double weight = 1.0) {
    Provider p;
    p.id = id;
    p.url = "http://" + id + ".test";
    p.priority = priority == 0 ? static_cast<int>(providers.size()) + 1 : priority;
    p.weight = weight;
    providers.push_back(p);
    return providers.back();
  }

  /// Candidates in profile order; stats[i] is given to the i-th provider.
  std::vector<Candidate> candidates(const std::vector<LatencyStats>& stats = {}) const {
    std::vector<Candidate> out;
    for (std::size_t i = 0; i < providers.size(); ++i) {
      Candidate c;
      c.provider = &providers[i];
      c.position = i;
      c.key = providers[i].id;
      if (i < stats.size()) c.stats = stats[i];
      out.push_back(c);
    }
    return out;
  }

  RankInput input(Strategy s, std::uint64_t cursor = 0) {
    RankInput in;
    in.strategy = s;
    in.params = &params;
    in.rng = &rng;
    in.rr_cursor = cursor;
    return in;
  }
};

LatencyStats known(double p50_ms, int calls = 10, double success_rate = 1.0) {
  LatencyStats s;
  s.calls = calls;
  s.answered = static_cast<int>(calls * success_rate + 0.5);
  s.success_rate = success_rate;
  s.p50_ms = p50_ms;
  s.newest_ms = 1;
  return s;
}

std::vector<std::string> ids(const std::vector<Candidate>& c) {
  std::vector<std::string> out;
  for (const auto& x : c) out.push_back(x.provider->id);
  return out;
}

/// How often each provider comes first over kDraws rankings of fresh candidate lists.
std::map<std::string, double> first_pick_frequency(Fixture& f, Strategy s,
                                                   const std::vector<LatencyStats>& stats = {}) {
  std::map<std::string, double> freq;
  for (const auto& p : f.providers) freq[p.id] = 0;
  for (int i = 0; i < kDraws; ++i) {
    auto c = f.candidates(stats);
    order_by_strategy(c, f.input(s));
    REQUIRE(c.size() == f.providers.size());
    freq[c.front().provider->id] += 1.0 / kDraws;
  }
  return freq;
}

double probability_sum(const std::vector<Candidate>& c) {
  return std::accumulate(c.begin(), c.end(), 0.0,
                         [](double a, const Candidate& x) { return a + x.first_probability; });
}

/// Every provider appears exactly once.
bool is_permutation_of_all(const std::vector<Candidate>& c, const Fixture& f) {
  auto got = ids(c);
  std::vector<std::string> want;
  for (const auto& p : f.providers) want.push_back(p.id);
  return std::is_permutation(got.begin(), got.end(), want.begin(), want.end());
}

}  // namespace

TEST_CASE("priority: ascending priority, ties in profile order", "[strategy]") {
  Fixture f;
  f.add("c", 3);
  f.add("a1", 1);
  f.add("b", 2);
  f.add("a2", 1);
  auto c = f.candidates();
  std::reverse(c.begin(), c.end());  // input order must not matter
  order_by_strategy(c, f.input(Strategy::priority));
  CHECK(ids(c) == std::vector<std::string>{"a1", "a2", "b", "c"});
  CHECK(c[0].metric == 1);
  CHECK(c[3].metric == 3);
  CHECK(c[0].first_probability == 1.0);
  CHECK(c[1].first_probability == 0.0);
  CHECK(probability_sum(c) == Approx(1.0));
}

TEST_CASE("round_robin: the cursor rotates the start position", "[strategy]") {
  Fixture f;
  f.add("a");
  f.add("b");
  f.add("c");
  auto rank = [&](std::uint64_t cursor) {
    auto c = f.candidates();
    std::reverse(c.begin(), c.end());
    order_by_strategy(c, f.input(Strategy::round_robin, cursor));
    CHECK(c.front().first_probability == 1.0);
    CHECK(probability_sum(c) == Approx(1.0));
    return ids(c);
  };
  CHECK(rank(0) == std::vector<std::string>{"a", "b", "c"});
  CHECK(rank(1) == std::vector<std::string>{"b", "c", "a"});
  CHECK(rank(2) == std::vector<std::string>{"c", "a", "b"});
  CHECK(rank(3) == std::vector<std::string>{"a", "b", "c"});
  CHECK(rank(5) == std::vector<std::string>{"c", "a", "b"});
  CHECK(rank(1'000'000'000'001ULL) == rank(1'000'000'000'001ULL % 3));
}

TEST_CASE("fastest: ascending p50 with the cold-start baseline in the middle", "[strategy]") {
  Fixture f;
  f.params.fastest = FastestParams{300'000, 3, 0.9};
  f.add("mid");    // 80 ms
  f.add("cold");   // no data
  f.add("slow");   // 400 ms
  f.add("fast");   // 40 ms
  f.add("flaky");  // 10 ms but 50 % success
  f.add("p120");   // 120 ms
  f.add("few");    // 5 ms over 2 calls: not enough to qualify
  std::vector<LatencyStats> stats = {known(80),          LatencyStats{}, known(400), known(40),
                                     known(10, 10, 0.5), known(120),     known(5, 2)};
  // Baseline = p75 (nearest rank) of the qualifying p50s {40, 80, 120, 400} = 120.
  auto candidates = f.candidates(stats);
  CHECK(cold_start_baseline(candidates, 3, 0.9) == Approx(120.0));

  order_by_strategy(candidates, f.input(Strategy::fastest));
  CHECK(ids(candidates) ==
        std::vector<std::string>{"fast", "mid", "cold", "p120", "few", "slow", "flaky"});

  auto at = [&](const std::string& id) -> const Candidate& {
    return *std::find_if(candidates.begin(), candidates.end(),
                         [&](const Candidate& c) { return c.provider->id == id; });
  };
  CHECK(at("fast").metric == Approx(40.0));
  CHECK_FALSE(at("fast").cold);
  CHECK(at("cold").cold);
  CHECK(at("cold").metric == Approx(120.0));
  CHECK(at("few").cold);
  CHECK(at("few").metric == Approx(120.0));
  CHECK_FALSE(at("flaky").cold);
  CHECK(at("flaky").metric > 400.0);  // after every qualifying provider despite its 10 ms
  CHECK(candidates.front().first_probability == 1.0);
  CHECK(probability_sum(candidates) == Approx(1.0));
}

TEST_CASE("fastest: without qualifying data every provider is cold, in profile order",
          "[strategy]") {
  Fixture f;
  f.add("a");
  f.add("b");
  f.add("c");
  auto c = f.candidates({known(300, 1), LatencyStats{}, known(5, 2)});
  CHECK(cold_start_baseline(c, 3, 0.9) == 0.0);
  std::reverse(c.begin(), c.end());
  order_by_strategy(c, f.input(Strategy::fastest));
  CHECK(ids(c) == std::vector<std::string>{"a", "b", "c"});
  for (const auto& x : c) CHECK(x.cold);
}

TEST_CASE("fastest: min_success_rate is inclusive and min_calls is honoured", "[strategy]") {
  Fixture f;
  f.params.fastest = FastestParams{300'000, 5, 0.9};
  f.add("exactly90");
  f.add("four_calls");
  f.add("ref");
  auto c = f.candidates({known(50, 10, 0.9), known(10, 4), known(100)});
  order_by_strategy(c, f.input(Strategy::fastest));
  // four_calls (10 ms) has too few calls: ranked at the baseline (p75 of {50, 100} = 100), tie by
  // position.
  CHECK(ids(c) == std::vector<std::string>{"exactly90", "four_calls", "ref"});
  CHECK_FALSE(c[0].cold);
  CHECK(c[1].cold);
}

TEST_CASE("weighted: first pick follows weight / sum of weights", "[strategy]") {
  Fixture f;
  f.add("w1", 0, 1);
  f.add("w3", 0, 3);
  f.add("w6", 0, 6);
  auto freq = first_pick_frequency(f, Strategy::weighted);
  CHECK(freq["w1"] == Approx(0.1).margin(kTolerance));
  CHECK(freq["w3"] == Approx(0.3).margin(kTolerance));
  CHECK(freq["w6"] == Approx(0.6).margin(kTolerance));

  auto c = f.candidates();
  order_by_strategy(c, f.input(Strategy::weighted));
  CHECK(is_permutation_of_all(c, f));
  CHECK(probability_sum(c) == Approx(1.0));
  for (const auto& x : c) {
    CHECK(x.first_probability == Approx(x.provider->weight / 10.0));
    CHECK(x.metric == x.provider->weight);
  }
}

TEST_CASE("weighted: the whole order is drawn by weight without replacement", "[strategy]") {
  // After the first pick, each next one is drawn in proportion to the weights left: the order
  // Efraimidis–Spirakis keys give. P(w6, w3, w1) = 0.6 × 3/4, P(w3, w6, w1) = 0.3 × 6/7, …
  Fixture f;
  f.add("w1", 0, 1);
  f.add("w3", 0, 3);
  f.add("w6", 0, 6);
  std::map<std::string, double> freq;
  for (int i = 0; i < kDraws; ++i) {
    auto c = f.candidates();
    order_by_strategy(c, f.input(Strategy::weighted));
    REQUIRE(is_permutation_of_all(c, f));
    auto order = ids(c);
    freq[order[0] + "," + order[1] + "," + order[2]] += 1.0 / kDraws;
  }
  CHECK(freq["w6,w3,w1"] == Approx(0.6 * 3 / 4).margin(kTolerance));
  CHECK(freq["w6,w1,w3"] == Approx(0.6 * 1 / 4).margin(kTolerance));
  CHECK(freq["w3,w6,w1"] == Approx(0.3 * 6 / 7).margin(kTolerance));
  CHECK(freq["w3,w1,w6"] == Approx(0.3 * 1 / 7).margin(kTolerance));
  CHECK(freq["w1,w6,w3"] == Approx(0.1 * 6 / 9).margin(kTolerance));
  CHECK(freq["w1,w3,w6"] == Approx(0.1 * 3 / 9).margin(kTolerance));

  SECTION("zero weights stay last, in profile order, behind any drawn order") {
    Fixture z;
    z.add("zero_a", 0, 0);
    z.add("one", 0, 1);
    z.add("zero_b", 0, 0);
    z.add("two", 0, 2);
    for (int i = 0; i < 500; ++i) {
      auto c = z.candidates();
      order_by_strategy(c, z.input(Strategy::weighted));
      auto order = ids(c);
      REQUIRE(order.size() == 4);
      CHECK(order[2] == "zero_a");
      CHECK(order[3] == "zero_b");
    }
  }
}

TEST_CASE("weighted: an excluded provider's share is redistributed", "[strategy]") {
  Fixture f;
  f.add("w1", 0, 1);
  f.add("w3", 0, 3);
  auto freq = first_pick_frequency(f, Strategy::weighted);
  CHECK(freq["w1"] == Approx(0.25).margin(kTolerance));
  CHECK(freq["w3"] == Approx(0.75).margin(kTolerance));
}

TEST_CASE("weighted: a zero-weight provider is never first while others exist", "[strategy]") {
  Fixture f;
  f.add("zero", 0, 0);
  f.add("a", 0, 1);
  f.add("b", 0, 1);
  for (int i = 0; i < 2'000; ++i) {
    auto c = f.candidates();
    order_by_strategy(c, f.input(Strategy::weighted));
    REQUIRE(c.size() == 3);
    CHECK(c.front().provider->id != "zero");
    CHECK(c.back().provider->id == "zero");
  }
  auto c = f.candidates();
  order_by_strategy(c, f.input(Strategy::weighted));
  CHECK(c.back().first_probability == 0.0);
  CHECK(probability_sum(c) == Approx(1.0));

  SECTION("all zero: profile order, still a full list") {
    Fixture z;
    z.add("x", 0, 0);
    z.add("y", 0, 0);
    auto zc = z.candidates();
    order_by_strategy(zc, z.input(Strategy::weighted));
    CHECK(ids(zc) == std::vector<std::string>{"x", "y"});
    CHECK(probability_sum(zc) == Approx(1.0));
  }
}

TEST_CASE("load_balanced and random: uniform first pick", "[strategy]") {
  for (Strategy s : {Strategy::load_balanced, Strategy::random}) {
    INFO(strategy_name(s));
    Fixture f;
    f.add("a");
    f.add("b");
    f.add("c");
    f.add("d");
    auto freq = first_pick_frequency(f, s);
    for (const auto& [id, share] : freq) {
      INFO(id);
      CHECK(share == Approx(0.25).margin(kTolerance));
    }
    auto c = f.candidates();
    order_by_strategy(c, f.input(s));
    CHECK(is_permutation_of_all(c, f));
    for (const auto& x : c) CHECK(x.first_probability == Approx(0.25));
  }
}

TEST_CASE("load_balanced shuffles the whole list, random only picks the first", "[strategy]") {
  Fixture f;
  f.add("a");
  f.add("b");
  f.add("c");
  f.add("d");
  std::map<std::string, int> second_after_a;
  for (int i = 0; i < 2'000; ++i) {
    auto c = f.candidates();
    order_by_strategy(c, f.input(Strategy::random));
    // The rest stays in profile order.
    std::vector<std::size_t> rest;
    for (std::size_t k = 1; k < c.size(); ++k) rest.push_back(c[k].position);
    CHECK(std::is_sorted(rest.begin(), rest.end()));

    auto lb = f.candidates();
    order_by_strategy(lb, f.input(Strategy::load_balanced));
    if (lb[0].provider->id == "a") ++second_after_a[lb[1].provider->id];
  }
  // A real shuffle puts each of b, c, d second after a.
  CHECK(second_after_a.size() == 3);
}

TEST_CASE("latency_weighted: the latency term is normalised by the best p50", "[strategy]") {
  LatencyWeightedParams p;  // beta 3, ms_floor 30, explore_floor 0.05, min_calls 3
  Fixture f;
  f.add("best");
  f.add("double");
  f.add("slow");
  auto c = f.candidates({known(50), known(100), known(10'000)});

  CHECK(latency_weight(c[0], 50, 0, p) == Approx(1.0));
  CHECK(latency_weight(c[1], 50, 0, p) == Approx(0.125));            // (50/100)^3
  CHECK(latency_weight(c[2], 50, 0, p) == Approx(p.explore_floor));  // floored

  // Scale-free: ten times slower everywhere gives the same weights.
  auto slow = f.candidates({known(500), known(1'000), known(100'000)});
  for (std::size_t i = 0; i < 3; ++i)
    CHECK(latency_weight(slow[i], 500, 0, p) == Approx(latency_weight(c[i], 50, 0, p)));

  // ms_floor: below it every provider is as good as the floor.
  auto tiny = f.candidates({known(5), known(20), known(30)});
  for (const auto& x : tiny) CHECK(latency_weight(x, 30, 0, p) == Approx(1.0));

  // Weights lie in (0, 1].
  for (double p50 : {1.0, 30.0, 31.0, 60.0, 1'000.0, 1e6}) {
    auto one = f.candidates({known(p50)});
    double w = latency_weight(one[0], std::max(p50, p.ms_floor), 0, p);
    CHECK(w > 0.0);
    CHECK(w <= 1.0);
  }
}

TEST_CASE("latency_weighted: success rate, confidence and cold providers", "[strategy]") {
  LatencyWeightedParams p;
  Fixture f;
  f.add("a");
  auto weight_of = [&](LatencyStats s, double best = 50, double baseline = 0) {
    f.params.latency_weighted = p;
    auto c = f.candidates({s});
    return latency_weight(c[0], best, baseline, p);
  };
  CHECK(weight_of(known(50, 10, 0.9)) == Approx(0.9));
  CHECK(weight_of(known(50, 10, 0.8)) == Approx(0.8 * 0.5));  // below min_success_rate: halved
  // One call: too few to trust the latency (taken at the baseline), confidence 0.5 + 0.5 * 1/3.
  CHECK(weight_of(known(50, 1)) == Approx(0.5 + 0.5 / 3.0));
  // Cold: ranked at the baseline with half confidence.
  CHECK(weight_of(LatencyStats{}, 50, 100) == Approx(0.125 * 0.5));
  CHECK(weight_of(LatencyStats{}, 50, 0) == Approx(0.5));
  // The floor holds for the worst case too.
  CHECK(weight_of(known(50, 10, 0.0)) == Approx(p.explore_floor));
}

TEST_CASE("latency_weighted: first picks match first_probability, the fastest most likely",
          "[strategy]") {
  Fixture f;
  f.add("slow");
  f.add("fast");
  f.add("mid");
  f.add("cold");
  std::vector<LatencyStats> stats = {known(200), known(50), known(100), LatencyStats{}};

  auto c = f.candidates(stats);
  order_by_strategy(c, f.input(Strategy::latency_weighted));
  CHECK(is_permutation_of_all(c, f));
  CHECK(probability_sum(c) == Approx(1.0));
  std::map<std::string, const Candidate*> by_id;
  for (const auto& x : c) by_id[x.provider->id] = &x;
  for (const auto& x : c) {
    CHECK(x.metric > 0.0);
    CHECK(x.metric <= 1.0);
    CHECK(x.metric >= f.params.latency_weighted.explore_floor);
  }
  CHECK(by_id["fast"]->metric == Approx(1.0));
  CHECK(by_id["fast"]->metric > by_id["mid"]->metric);
  CHECK(by_id["mid"]->metric > by_id["slow"]->metric);
  CHECK(by_id["cold"]->cold);
  CHECK_FALSE(by_id["fast"]->cold);
  CHECK(by_id["fast"]->first_probability > by_id["mid"]->first_probability);

  auto freq = first_pick_frequency(f, Strategy::latency_weighted, stats);
  for (const auto& [id, cand] : by_id) {
    INFO(id);
    CHECK(freq[id] == Approx(cand->first_probability).margin(kTolerance));
  }
}

TEST_CASE("latency_weighted: without latency data the choice is uniform", "[strategy]") {
  Fixture f;
  f.add("a");
  f.add("b");
  f.add("c");
  f.add("d");
  auto c = f.candidates();
  order_by_strategy(c, f.input(Strategy::latency_weighted));
  for (const auto& x : c) {
    CHECK(x.cold);
    CHECK(x.first_probability == Approx(0.25));
  }
  auto freq = first_pick_frequency(f, Strategy::latency_weighted);
  for (const auto& [id, share] : freq) CHECK(share == Approx(0.25).margin(kTolerance));
}

TEST_CASE("order_by_strategy: an empty list stays empty for every strategy", "[strategy]") {
  Fixture f;
  for (Strategy s : kAllStrategies) {
    std::vector<Candidate> c;
    order_by_strategy(c, f.input(s));
    CHECK(c.empty());
  }
}

TEST_CASE("every strategy ranks a single candidate first with certainty", "[strategy]") {
  Fixture f;
  f.add("only");
  for (Strategy s : kAllStrategies) {
    INFO(strategy_name(s));
    auto c = f.candidates({known(70)});
    rank_candidates(c, f.input(s, 7));
    REQUIRE(c.size() == 1);
    CHECK(c[0].provider->id == "only");
    CHECK(c[0].first_probability == Approx(1.0));
  }
}

}  // namespace unit_strategies_test

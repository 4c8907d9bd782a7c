#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "rpcroute/strategy.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_tiering_test {

using namespace rpcroute;

namespace {

struct Fixture {
  std::vector<Provider> providers;

  Fixture(std::initializer_list<const char*> names) {
    int priority = 0;
    for (const char* n : names) {
      Provider p;
      p.id = n;
      p.priority = ++priority;
      providers.push_back(p);
    }
  }

  /// One candidate per provider in profile order, with the given tiers and first probabilities.
  std::vector<Candidate> candidates(const std::vector<Tier>& tiers,
                                    const std::vector<double>& probabilities) const {
    std::vector<Candidate> out;
    for (std::size_t i = 0; i < providers.size(); ++i) {
      Candidate c;
      c.provider = &providers[i];
      c.position = i;
      c.key = providers[i].id;
      c.tier = tiers[i];
      c.first_probability = probabilities[i];
      out.push_back(c);
    }
    return out;
  }
};

std::vector<std::string> ids(const std::vector<Candidate>& c) {
  std::vector<std::string> out;
  for (const auto& x : c) out.push_back(x.provider->id);
  return out;
}

double probability_sum(const std::vector<Candidate>& c) {
  return std::accumulate(c.begin(), c.end(), 0.0,
                         [](double a, const Candidate& x) { return a + x.first_probability; });
}

}  // namespace

TEST_CASE("tier_of maps breaker state and rate limit to the four tiers", "[tiering]") {
  CHECK(tier_of(BreakerState::closed, false) == Tier::healthy);
  CHECK(tier_of(BreakerState::closed, true) == Tier::rate_limited);
  CHECK(tier_of(BreakerState::half_open, false) == Tier::half_open);
  CHECK(tier_of(BreakerState::half_open, true) == Tier::half_open_rate_limited);
  CHECK(static_cast<int>(Tier::healthy) == 1);
  CHECK(static_cast<int>(Tier::rate_limited) == 2);
  CHECK(static_cast<int>(Tier::half_open) == 3);
  CHECK(static_cast<int>(Tier::half_open_rate_limited) == 4);
  CHECK(tier_name(Tier::healthy) == "healthy");
  CHECK(tier_name(Tier::half_open_rate_limited) == "half_open_rate_limited");
}

TEST_CASE("apply_tiers: tiers 1 < 2 < 3 < 4, the strategy's order kept inside each", "[tiering]") {
  Fixture f{"h1", "ho", "rl1", "h2", "horl", "rl2", "h3"};
  using T = Tier;
  auto c = f.candidates({T::healthy, T::half_open, T::rate_limited, T::healthy,
                         T::half_open_rate_limited, T::rate_limited, T::healthy},
                        std::vector<double>(7, 1.0 / 7));
  // The strategy's order is not profile order: apply_tiers must keep it, not re-sort by position.
  std::reverse(c.begin(), c.end());
  apply_tiers(c);
  CHECK(ids(c) == std::vector<std::string>{"h3", "h2", "h1", "rl2", "rl1", "ho", "horl"});
  for (std::size_t i = 1; i < c.size(); ++i) CHECK(c[i - 1].tier <= c[i].tier);
}

TEST_CASE("apply_tiers: first_probability is renormalised over the best tier", "[tiering]") {
  Fixture f{"a", "b", "c", "d"};
  auto c = f.candidates({Tier::rate_limited, Tier::healthy, Tier::healthy, Tier::half_open},
                        {0.4, 0.1, 0.3, 0.2});
  apply_tiers(c);
  REQUIRE(ids(c) == std::vector<std::string>{"b", "c", "a", "d"});
  CHECK(c[0].first_probability == Approx(0.25));  // 0.1 / 0.4
  CHECK(c[1].first_probability == Approx(0.75));  // 0.3 / 0.4
  CHECK(c[2].first_probability == 0.0);
  CHECK(c[3].first_probability == 0.0);
  CHECK(probability_sum(c) == Approx(1.0));
}

TEST_CASE("apply_tiers: when every candidate is in a lower tier, that tier is the best",
          "[tiering]") {
  Fixture f{"a", "b", "c"};
  auto c = f.candidates({Tier::half_open_rate_limited, Tier::half_open, Tier::half_open},
                        {0.5, 0.25, 0.25});
  apply_tiers(c);
  CHECK(ids(c) == std::vector<std::string>{"b", "c", "a"});
  CHECK(c[0].first_probability == Approx(0.5));
  CHECK(c[1].first_probability == Approx(0.5));
  CHECK(c[2].first_probability == 0.0);
}

TEST_CASE("apply_tiers: a deterministic strategy whose first fell to a lower tier", "[tiering]") {
  Fixture f{"first", "second", "third"};
  // priority put "first" first with certainty, but it is rate limited.
  auto c = f.candidates({Tier::rate_limited, Tier::healthy, Tier::healthy}, {1.0, 0.0, 0.0});
  apply_tiers(c);
  REQUIRE(ids(c) == std::vector<std::string>{"second", "third", "first"});
  CHECK(c[0].first_probability == 1.0);
  CHECK(c[1].first_probability == 0.0);
  CHECK(c[2].first_probability == 0.0);
  CHECK(probability_sum(c) == Approx(1.0));
}

TEST_CASE("apply_tiers: an empty list and a single tier", "[tiering]") {
  std::vector<Candidate> none;
  apply_tiers(none);
  CHECK(none.empty());

  Fixture f{"a", "b"};
  auto c = f.candidates({Tier::healthy, Tier::healthy}, {0.5, 0.5});
  apply_tiers(c);
  CHECK(ids(c) == std::vector<std::string>{"a", "b"});
  CHECK(c[0].first_probability == Approx(0.5));
  CHECK(c[1].first_probability == Approx(0.5));
}

TEST_CASE("rank_candidates: strategy order, then tiers", "[tiering]") {
  Fixture f{"p1", "p2", "p3", "p4"};
  auto c = f.candidates({Tier::half_open, Tier::healthy, Tier::rate_limited, Tier::healthy},
                        {0, 0, 0, 0});
  StrategyParams params;
  Random rng(7);
  RankInput in;
  in.strategy = Strategy::priority;
  in.params = &params;
  in.rng = &rng;
  rank_candidates(c, in);
  CHECK(ids(c) == std::vector<std::string>{"p2", "p4", "p3", "p1"});
  CHECK(c[0].first_probability == 1.0);
  CHECK(probability_sum(c) == Approx(1.0));

  // load_balanced: healthy ones share the first pick evenly, the others never go first.
  int p2_first = 0;
  for (int i = 0; i < 4'000; ++i) {
    auto lb = f.candidates({Tier::half_open, Tier::healthy, Tier::rate_limited, Tier::healthy},
                           {0, 0, 0, 0});
    in.strategy = Strategy::load_balanced;
    rank_candidates(lb, in);
    REQUIRE(lb.size() == 4);
    CHECK(lb[0].tier == Tier::healthy);
    CHECK(lb[1].tier == Tier::healthy);
    CHECK(lb[2].provider->id == "p3");
    CHECK(lb[3].provider->id == "p1");
    CHECK(lb[0].first_probability == Approx(0.5));
    if (lb[0].provider->id == "p2") ++p2_first;
  }
  CHECK(p2_first / 4'000.0 == Approx(0.5).margin(0.03));
}

TEST_CASE("apply_tiers: backups come after every primary of their tier, before a worse tier",
          "[tiering][groups]") {
  Fixture f{"p1", "b1", "p2", "b2", "prl"};
  f.providers[1].group = ProviderGroup::backup;
  f.providers[3].group = ProviderGroup::backup;
  auto c = f.candidates({Tier::healthy, Tier::healthy, Tier::healthy, Tier::healthy,
                         Tier::rate_limited},
                        {0.2, 0.2, 0.2, 0.2, 0.2});
  std::reverse(c.begin(), c.end());  // the strategy's draw: kept inside each standing
  apply_tiers(c);
  REQUIRE(ids(c) == std::vector<std::string>{"p2", "p1", "b2", "b1", "prl"});
  // The strategy balances among the primaries; backups are never first while one is usable.
  CHECK(c[0].first_probability == Approx(0.5));
  CHECK(c[1].first_probability == Approx(0.5));
  CHECK(c[2].first_probability == 0.0);
  CHECK(c[3].first_probability == 0.0);
  CHECK(probability_sum(c) == Approx(1.0));
}

TEST_CASE("apply_tiers: with no primary usable, the backups are balanced", "[tiering][groups]") {
  Fixture f{"p1", "b1", "b2"};
  f.providers[1].group = ProviderGroup::backup;
  f.providers[2].group = ProviderGroup::backup;
  // The primary is rate-limited (or half-open, or stalled): not usable while a backup is healthy.
  auto c = f.candidates({Tier::rate_limited, Tier::healthy, Tier::healthy}, {1.0 / 3, 1.0 / 3, 1.0 / 3});
  apply_tiers(c);
  REQUIRE(ids(c) == std::vector<std::string>{"b1", "b2", "p1"});
  CHECK(c[0].first_probability == Approx(0.5));
  CHECK(c[1].first_probability == Approx(0.5));
  CHECK(c[2].first_probability == 0.0);
}

}  // namespace unit_tiering_test

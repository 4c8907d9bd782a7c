// The exclusion rules as a table (issue 16): each rule alone, and how the table combines them.
#include <catch2/catch.hpp>

#include "rpcroute/exclusions.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_exclusions_test {

using namespace rpcroute;

namespace {

constexpr const char* kProfile = R"(
chains:
  local:
    chain_id: 31337
    providers:
      - { id: a, url: "http://127.0.0.1:1", rate_limit: { rps: 1, burst: 1 }, methods: { deny: ["debug_*"] } }
      - { id: b, url: "http://127.0.0.1:2" }
)";

struct Fixture {
  Profile profile = *load_profile_text(kProfile, "test.yaml");
  const Chain& chain = profile.chains.front();
  MethodPolicy policy;
  std::map<std::string, int, std::less<>> trials;
  RuleInput in;
  ProviderState ps;
  ProviderView view;
  std::vector<Exclusion> excluded;

  Fixture() {
    in.chain = &chain;
    in.method = "eth_blockNumber";
    in.policy = &policy;
    in.now_ms = 1'000'000;
    in.half_open_trials = &trials;
    view.provider = &chain.providers[0];
    view.key = "a";
  }
  void open_breaker() {
    ps.breaker.state = BreakerState::open;
    ps.breaker.opened_ms = in.now_ms;
    ps.breaker.recovery_ms = 10'000;
    view.state = &ps;
    view.breaker = BreakerState::open;
  }
  void empty_bucket() {
    ps.quota = Bucket{0, in.now_ms};
    view.state = &ps;
  }
  Fate apply() { return apply_exclusion_rules(in, view, excluded); }
};

}  // namespace

TEST_CASE("exclusions: fifteen rules, asked in the order users see reasons", "[exclusions]") {
  CHECK(exclusion_rules().size() == 15);
  Fixture f;
  CHECK(f.apply() == Fate::candidate);
  CHECK(f.excluded.empty());
}

TEST_CASE("exclusions: the first rule that excludes gives the reason", "[exclusions]") {
  Fixture f;
  f.in.method = "debug_traceTransaction";  // denied by a's method list
  f.in.only_provider = "b";               // and not the provider asked for
  CHECK(f.apply() == Fate::out);
  REQUIRE(f.excluded.size() == 1);
  CHECK(f.excluded[0].kind == ExclusionKind::caller);
  CHECK(f.excluded[0].reason == "not selected (only b was requested)");
}

TEST_CASE("exclusions: a cordon takes the provider out with its reason and expiry", "[exclusions][cordon]") {
  Fixture f;
  f.ps.cordon.t_ms = f.in.now_ms - 1000;
  f.ps.cordon.on = true;
  f.ps.cordon.until_ms = f.in.now_ms + 600'000;
  f.ps.cordon.reason = "disk upgrade";
  f.view.state = &f.ps;
  f.open_breaker();  // a cordon is not a breaker: no trial when nothing else is usable
  CHECK(f.apply() == Fate::out);
  REQUIRE(f.excluded.size() == 1);
  CHECK(f.excluded[0].kind == ExclusionKind::cordon);
  CHECK(f.excluded[0].reason == "cordoned: disk upgrade (until 1970-01-01T00:26:40Z, in 600.0s)");
  CHECK(f.excluded[0].retry_in_ms == 600'000);
  CHECK(exclusion_kind_name(ExclusionKind::cordon) == "cordon");

  f.excluded.clear();
  f.ps.cordon.until_ms = 0;
  f.ps.cordon.reason.clear();
  CHECK(f.apply() == Fate::out);
  CHECK(f.excluded[0].reason == "cordoned (until uncordoned)");
  CHECK(f.excluded[0].retry_in_ms == 0);

  // Expired, or lifted: the rule says nothing (the breaker speaks again).
  for (auto [until, on] : {std::pair{f.in.now_ms, true}, std::pair{std::int64_t{0}, false}}) {
    f.excluded.clear();
    f.ps.cordon.until_ms = until;
    f.ps.cordon.on = on;
    CHECK(f.apply() == Fate::trial);
    REQUIRE(f.excluded.size() == 1);
    CHECK(f.excluded[0].kind == ExclusionKind::breaker);
  }
}

TEST_CASE("exclusions: a filter read goes to the provider that holds the filter", "[exclusions]") {
  Fixture f;
  f.in.filter_owner = "b";
  CHECK(f.apply() == Fate::out);
  REQUIRE(f.excluded.size() == 1);
  CHECK(f.excluded[0].kind == ExclusionKind::filter);
  CHECK(f.excluded[0].reason == "the filter lives on b");
}

TEST_CASE("exclusions: an empty bucket excludes with the wait for a token", "[exclusions]") {
  Fixture f;
  f.empty_bucket();
  CHECK(f.apply() == Fate::out);
  REQUIRE(f.excluded.size() == 1);
  CHECK(f.excluded[0].kind == ExclusionKind::quota);
  CHECK(f.excluded[0].retry_in_ms > 0);
}

TEST_CASE("exclusions: an open breaker is reported alone and kept for a trial", "[exclusions]") {
  Fixture f;
  f.open_breaker();
  CHECK(f.apply() == Fate::trial);
  REQUIRE(f.excluded.size() == 1);
  CHECK(f.excluded[0].kind == ExclusionKind::breaker);
  CHECK(f.excluded[0].retry_in_ms == 10'000);
}

TEST_CASE("exclusions: a later rule still drops an open provider, unreported", "[exclusions]") {
  Fixture f;
  f.open_breaker();
  f.empty_bucket();
  CHECK(f.apply() == Fate::out);
  REQUIRE(f.excluded.size() == 1);
  CHECK(f.excluded[0].kind == ExclusionKind::breaker);
}

TEST_CASE("exclusions: an open breaker with its trials in flight is out", "[exclusions]") {
  Fixture f;
  f.open_breaker();
  f.trials["a"] = 1;
  CHECK(f.apply() == Fate::out);
  CHECK(f.excluded.size() == 1);  // the breaker says why
}

TEST_CASE("exclusions: a quarantined claim keeps the provider for the lag fallback, not when open", "[exclusions]") {
  Fixture f;
  f.ps.height = Height{1ULL << 50, f.in.now_ms};
  f.view.state = &f.ps;
  f.view.judgement = ClaimJudgement{ClaimVerdict::absurd, 0};
  CHECK(f.apply() == Fate::lagging);
  REQUIRE(f.excluded.size() == 1);
  CHECK(f.excluded[0].kind == ExclusionKind::quarantine);

  f.excluded.clear();
  f.open_breaker();
  CHECK(f.apply() == Fate::trial);
  REQUIRE(f.excluded.size() == 1);
  CHECK(f.excluded[0].kind == ExclusionKind::breaker);
}

TEST_CASE("exclusions: eth_getLogs over more blocks than the provider's limit", "[exclusions]") {
  Fixture f;
  Profile p = *load_profile_text(R"(
chains:
  local:
    chain_id: 1
    providers:
      - { id: a, url: "http://127.0.0.1:1", limits: { max_block_range: 100 } }
)",
                                 "limit.yaml");
  f.view.provider = &p.chains.front().providers[0];
  f.in.log_range = 100;
  CHECK(f.apply() == Fate::candidate);
  f.in.log_range = 101;
  CHECK(f.apply() == Fate::out);
  REQUIRE(f.excluded.size() == 1);
  CHECK(f.excluded[0].reason == "eth_getLogs over 101 blocks exceeds its max_block_range 100");
}

TEST_CASE("exclusions: a learned eth_getLogs limit below the configured one wins", "[exclusions]") {
  Fixture f;
  f.ps.log_limit = {50, 1};
  f.view.state = &f.ps;
  f.in.log_range = 50;
  CHECK(f.apply() == Fate::candidate);
  f.in.log_range = 51;
  CHECK(f.apply() == Fate::out);
  REQUIRE(f.excluded.size() == 1);
  CHECK(f.excluded[0].kind == ExclusionKind::limit);
  CHECK(f.excluded[0].reason == "eth_getLogs over 51 blocks exceeds its learned block range limit 50");
}

TEST_CASE("exclusions: min-block keeps only providers observed at or past the block", "[exclusions]") {
  Fixture f;
  f.in.min_block = 30;
  CHECK(f.apply() == Fate::out);  // nothing observed
  REQUIRE(f.excluded.size() == 1);
  CHECK(f.excluded[0].kind == ExclusionKind::height);
  CHECK(f.excluded[0].reason.find("height unknown") != std::string::npos);
  f.excluded.clear();
  f.ps.height = {29, f.in.now_ms};
  f.view.state = &f.ps;
  f.view.estimate = 40;  // an estimate moved forward by time does not count
  CHECK(f.apply() == Fate::out);
  REQUIRE(f.excluded.size() == 1);
  CHECK(f.excluded[0].reason == "below the minimum block 30 the client asked (last seen at 29)");
  f.excluded.clear();
  f.ps.height = {30, f.in.now_ms};
  CHECK(f.apply() == Fate::candidate);
  f.in.min_block.reset();
  f.ps.height = {1, f.in.now_ms};
  CHECK(f.apply() == Fate::candidate);
}

}  // namespace unit_exclusions_test

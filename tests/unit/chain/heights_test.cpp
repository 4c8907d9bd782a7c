// The chain's head by one rule (issue 14.3, 15.1, 15.6): quorum and jump allowance, quarantine of
// lone or absurd claims, lag measured like for like, the never-backwards mark, doubtful head answers.
#include <catch2/catch.hpp>

#include "rpcroute/blocks.hpp"
#include "rpcroute/health/exchange.hpp"
#include "rpcroute/state.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_heights_test {

using namespace rpcroute;

namespace {

constexpr std::int64_t kT = 1'700'000'000'000;

Chain chain_with(std::int64_t block_time_ms) {
  Chain c;
  c.name = "local";
  c.chain_id = 31337;
  c.block_time_ms = block_time_ms;
  c.max_lag_blocks = 2;
  return c;
}

struct Judged {
  ChainHead head;
  std::vector<ClaimJudgement> judgements;
};

Judged judge(const std::vector<HeadClaim>& claims, const Chain& chain, std::int64_t now = kT) {
  Judged j;
  j.judgements.resize(claims.size());
  j.head = chain_head(claims, j.judgements, chain, now);
  return j;
}

HeadClaim at(std::uint64_t block, std::int64_t t = kT) { return HeadClaim{Height{block, t}, true}; }

}  // namespace

TEST_CASE("head: one provider over-reporting among three is quarantined; the others stay the head", "[heights]") {
  const auto chain = chain_with(12'000);
  auto j = judge({at(100), at(20'000'000), at(99)}, chain);
  REQUIRE(j.head.head);
  CHECK(j.head.head->block == 100);
  CHECK(j.judgements[1].verdict == ClaimVerdict::implausible);
  CHECK(j.judgements[1].base == 99);  // what the others reach: their lower median
  CHECK(j.judgements[0].verdict == ClaimVerdict::believed);
  CHECK(j.judgements[2].verdict == ClaimVerdict::believed);
  CHECK(lag_behind(Height{99, kT}, *j.head.head, chain) == 1);
  CHECK_THAT(claim_doubt(Height{20'000'000, kT}, j.judgements[1], chain),
             Catch::Contains("height 20000000 is not believed") && Catch::Contains("jump allowance 1000"));
}

TEST_CASE("head: a lone lead within the allowance is unconfirmed with three providers, believed with two",
          "[heights]") {
  const auto chain = chain_with(12'000);
  auto three = judge({at(100), at(150), at(100)}, chain);
  CHECK(three.head.head->block == 100);
  CHECK(three.judgements[1].verdict == ClaimVerdict::unconfirmed);
  CHECK(three.judgements[1].base == 100);
  // Honest drift: one block ahead, two behind within max_lag_blocks, one lagging.
  auto drift = judge({at(101), at(100), at(90)}, chain);
  CHECK(drift.head.head->block == 101);
  CHECK(drift.head.believed == 3);
  CHECK(lag_behind(Height{90, kT}, *drift.head.head, chain) == 11);
  // Two providers: no quorum to tell a lead from lag; the higher is believed (lag stays detectable).
  auto two = judge({at(90), at(100)}, chain);
  CHECK(two.head.head->block == 100);
  CHECK(two.head.believed == 2);
  // Four: half of them is a quorum, so two up-to-date providers are the head over two lagging.
  auto four = judge({at(101), at(100), at(90), at(90)}, chain);
  CHECK(four.head.head->block == 101);
  CHECK(four.head.believed == 4);
}

TEST_CASE("head: two providers far apart: the jump is not believed", "[heights]") {
  const auto chain = chain_with(12'000);
  auto j = judge({at(5), at(20'000'000)}, chain);
  CHECK(j.head.head->block == 5);
  CHECK(j.judgements[1].verdict == ClaimVerdict::implausible);
  CHECK(j.judgements[0].verdict == ClaimVerdict::believed);
}

TEST_CASE("head: 0x7fffffffffffffff is absurd even alone; a single provider's plausible jump is believed",
          "[heights]") {
  const auto chain = chain_with(12'000);
  auto alone = judge({at(0x7fffffffffffffffULL)}, chain);
  CHECK_FALSE(alone.head.head);
  CHECK(alone.judgements[0].verdict == ClaimVerdict::absurd);
  CHECK(quarantined(alone.judgements[0].verdict));
  CHECK_THAT(claim_doubt(Height{0x7fffffffffffffffULL, kT}, alone.judgements[0], chain),
             Catch::Contains("no chain is that long"));
  auto single = judge({at(20'000'000)}, chain);
  CHECK(single.head.head->block == 20'000'000);
  CHECK(single.judgements[0].verdict == ClaimVerdict::believed);
}

TEST_CASE("head: the jump allowance grows with the blocks the others have likely made since", "[heights]") {
  const auto chain = chain_with(12'000);  // allowance max(1000, 300) = 1000
  REQUIRE(jump_allowance(chain) == 1000);
  CHECK(jump_allowance(chain_with(1'000)) == 3600);  // one hour of blocks
  // A seen at 100 a minute ago: ~105 now; B may claim up to 105 + 1000.
  auto ok = judge({at(100, kT - 60'000), at(1105)}, chain);
  CHECK(ok.judgements[1].verdict == ClaimVerdict::believed);
  auto jump = judge({at(100, kT - 60'000), at(1106)}, chain);
  CHECK(jump.judgements[1].verdict == ClaimVerdict::implausible);
  CHECK(jump.judgements[1].base == 105);
}

TEST_CASE("head: stale and non-counting claims are ignored; nothing fresh means no head", "[heights]") {
  const auto chain = chain_with(2'000);  // horizon 60 s
  auto stale = judge({at(500, kT - 61'000), HeadClaim{Height{600, kT}, false}, at(100)}, chain);
  CHECK(stale.head.head->block == 100);
  CHECK(stale.judgements[0].verdict == ClaimVerdict::none);
  CHECK(stale.judgements[1].verdict == ClaimVerdict::none);
  CHECK_FALSE(judge({at(5, kT - 61'000)}, chain).head.head);
  CHECK_FALSE(judge({}, chain).head.head);
}

TEST_CASE("lag: like for like, and it does not fade while both heights are fresh", "[heights]") {
  const auto chain = chain_with(1'000);
  // Seen together: 15 behind, whenever asked.
  const Height head{20, kT}, behind{5, kT};
  CHECK(lag_behind(behind, head, chain) == 15);
  for (std::int64_t later : {0, 3'000, 30'000, 59'000}) {
    auto j = judge({HeadClaim{head, true}, HeadClaim{behind, true}}, chain, kT + later);
    REQUIRE(j.head.head);
    CHECK(lag_behind(behind, *j.head.head, chain) == 15);
  }
  // An older observation gets the benefit of the doubt (moved forward to the head's time); a newer
  // one is not moved back (an idle chain does not move).
  CHECK(lag_behind(Height{5, kT - 10'000}, head, chain) == 5);
  CHECK(lag_behind(Height{20, kT + 10'000}, Height{20, kT}, chain) == 0);
  CHECK(lag_behind(Height{20, kT}, Height{20, kT + 10'000}, chain) == -10);
}

TEST_CASE("mark: supported while the providers' head reaches it; a reset chain or a liar's mark is not",
          "[heights]") {
  Profile profile = *load_profile_text(R"(
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - { id: a, url: "http://127.0.0.1:1" }
      - { id: b, url: "http://127.0.0.1:2" }
)",
                                       "test.yaml");
  const Chain& chain = profile.chains.front();
  State state;
  const StateView view(state);
  auto key = [&](const char* id) { return provider_key(profile.name, chain.name, *chain.find_provider(id)); };
  std::int64_t t = kT;  // each observation newer than the last (the newest wins)
  auto seen = [&](const char* id, std::uint64_t block) {
    apply_event(state, HeightEvent{key(id), Height{block, ++t}}, profile.health);
  };
  seen("a", 20);
  seen("b", 19);
  CHECK(mark_supported(view, profile, chain, Height{20, kT}, t));
  CHECK(mark_supported(view, profile, chain, Height{21, kT}, t));  // within max_lag_blocks
  // Both went back to 0: a restarted chain. The mark of 20 is gone at once.
  seen("a", 0);
  seen("b", 0);
  CHECK_FALSE(mark_supported(view, profile, chain, Height{20, kT}, t));
  // A liar's height as the mark: the head of the believed claims does not reach it.
  seen("a", 100);
  seen("b", 20'000'000);
  CHECK_FALSE(mark_supported(view, profile, chain, Height{20'000'000, kT}, t));
  CHECK(mark_supported(view, profile, chain, Height{100, kT}, t));
  // A provider whose breaker is open still counts: its height happened.
  seen("b", 100);
  for (int i = 0; i < 5; ++i) {
    apply_event(state, AttemptEvent{key("a"), t, OutcomeClass::provider_failure, "refused"}, profile.health);
  }
  seen("a", 110);
  seen("b", 100);
  CHECK(mark_supported(view, profile, chain, Height{110, kT}, t));
  CHECK(best_known_height(view, profile, chain, t) == 100);  // the head for lag leaves it out
}

TEST_CASE("head_elsewhere: the believed head of the other providers, never a liar's, else the fresh mark",
          "[heights][finality]") {
  Profile profile = *load_profile_text(R"(
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    max_lag_blocks: 2
    providers:
      - { id: a, url: "http://127.0.0.1:1" }
      - { id: b, url: "http://127.0.0.1:2" }
      - { id: c, url: "http://127.0.0.1:3" }
)",
                                       "test.yaml");
  const Chain& chain = profile.chains.front();
  State state;
  const StateView view(state);
  const auto ck = chain_key(profile.name, chain);
  const Provider& a = *chain.find_provider("a");
  const Provider& b = *chain.find_provider("b");
  auto key = [&](const char* id) { return provider_key(profile.name, chain.name, *chain.find_provider(id)); };
  std::int64_t t = kT;
  auto seen = [&](const char* id, std::uint64_t block) {
    apply_event(state, HeightEvent{key(id), Height{block, ++t}}, profile.health);
  };
  CHECK(head_elsewhere(view, profile, chain, a, ck, t) == 0);  // nothing known
  seen("a", 100);
  seen("b", 101);
  seen("c", 1'000'000'000);  // a jump: not believed
  CHECK(head_elsewhere(view, profile, chain, a, ck, t) == 101);
  CHECK(head_elsewhere(view, profile, chain, b, ck, t) == 100);
  // Alone ahead of the two others by more than max_lag_blocks: unconfirmed, so not "elsewhere"
  // (left out of the judgement, c would be one of two and believed).
  seen("c", 110);
  CHECK(head_elsewhere(view, profile, chain, a, ck, t) == 101);
  // Once the others confirm it, it is the head.
  seen("b", 110);
  CHECK(head_elsewhere(view, profile, chain, a, ck, t) == 110);
  // The fresh mark when higher (the provider's own polls raise it while its socket is silent).
  apply_event(state, HighWaterEvent{ck, Height{112, t}}, profile.health);
  CHECK(head_elsewhere(view, profile, chain, a, ck, t) == 112);
  // No other fresh claim: the fresh mark.
  const auto later = t + height_horizon_ms(chain) + 1;
  apply_event(state, HeightEvent{key("a"), Height{120, later}}, profile.health);
  apply_event(state, HighWaterEvent{ck, Height{120, later}}, profile.health);
  CHECK(head_elsewhere(view, profile, chain, a, ck, later) == 120);
  CHECK(head_elsewhere(view, profile, chain, a, ck, later + height_horizon_ms(chain) + 1) == 0);
}

TEST_CASE("refuse_doubtful_heads: a head answer the rule would quarantine becomes a provider failure",
          "[heights][exchange]") {
  Profile profile = *load_profile_text(R"(
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - { id: a, url: "http://127.0.0.1:1" }
      - { id: b, url: "http://127.0.0.1:2" }
      - { id: liar, url: "http://127.0.0.1:3" }
)",
                                       "test.yaml");
  const Chain& chain = profile.chains.front();
  FakeClock clock;
  StateStore store{std::nullopt, clock, [](const std::string&) {}};
  auto key = [&](const char* id) { return provider_key(profile.name, chain.name, *chain.find_provider(id)); };
  store.record(HeightEvent{key("a"), Height{100, clock.now_ms()}}, profile.health);
  store.record(HeightEvent{key("b"), Height{100, clock.now_ms()}}, profile.health);
  const std::vector<UpstreamCall> calls{{"eth_blockNumber", "[]"}};
  auto answer = [&](std::string result) {
    HttpResponse r;
    r.status = 200;
    r.body = R"({"jsonrpc":"2.0","id":0,"result":)" + result + "}";
    return classify_exchange(std::move(r), UpstreamIds{0, 1}, clock.now_ms(), profile, calls);
  };
  const Provider& liar = *chain.find_provider("liar");

  auto honest = answer(R"("0x65")");
  CHECK_FALSE(refuse_doubtful_heads(store, profile, chain, liar, key("liar"), calls, honest, clock.now_ms()));
  CHECK(honest.per_call[0].cls == OutcomeClass::success);

  auto lie = answer(R"("0x1312d00")");  // 20 000 000
  CHECK(refuse_doubtful_heads(store, profile, chain, liar, key("liar"), calls, lie, clock.now_ms()));
  CHECK(lie.per_call[0].cls == OutcomeClass::provider_failure);
  CHECK(lie.per_call[0].outcome == Outcome::bad_response);
  CHECK_THAT(lie.per_call[0].message, Catch::Contains("eth_blockNumber: height 20000000 is not believed"));
  CHECK(lie.overall.cls == OutcomeClass::provider_failure);
  CHECK(store.state().providers.at(key("liar")).height.block == 20'000'000);  // kept as its claim

  auto absurd = answer(R"("0x7fffffffffffffff")");
  CHECK(refuse_doubtful_heads(store, profile, chain, liar, key("liar"), calls, absurd, clock.now_ms()));
  CHECK_THAT(absurd.per_call[0].message, Catch::Contains("no chain is that long"));
}

}  // namespace unit_heights_test

#include <fmt/format.h>

#include <catch2/catch.hpp>

#include "../support/fake_transport.hpp"
#include "rpcroute/blocks.hpp"
#include "rpcroute/poller.hpp"
#include "rpcroute/state.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_poller_test {

using namespace rpcroute;

TEST_CASE("poller: the interval is the block time within 1 s and 30 s", "[poller]") {
  Chain chain;
  chain.block_time_ms = 12'000;
  CHECK(poll_interval_ms(chain) == 12'000);
  chain.block_time_ms = 250;  // an L2
  CHECK(poll_interval_ms(chain) == 1'000);
  chain.block_time_ms = 600'000;
  CHECK(poll_interval_ms(chain) == 30'000);
}

TEST_CASE("poller: a poll's timeout is the provider's, at most 5 s and the interval (at least 2 s)", "[poller]") {
  Provider p;
  p.timeout_ms = 10'000;
  CHECK(poll_timeout_ms(p, 12'000) == 5'000);
  CHECK(poll_timeout_ms(p, 1'000) == 2'000);
  CHECK(poll_timeout_ms(p, 3'000) == 3'000);
  p.timeout_ms = 1'500;
  CHECK(poll_timeout_ms(p, 12'000) == 1'500);
}

TEST_CASE("poller: failed polls back off, not beyond the breaker's recovery time", "[poller]") {
  HealthConfig health;
  health.circuit_breaker.recovery_timeout_ms = 30'000;
  CHECK(poll_backoff_ms(2'000, 2'000, health) == 4'000);
  CHECK(poll_backoff_ms(16'000, 2'000, health) == 30'000);
  CHECK(poll_backoff_ms(30'000, 2'000, health) == 30'000);
  // A recovery time shorter than the interval: the interval; longer than a minute: a minute.
  health.circuit_breaker.recovery_timeout_ms = 500;
  CHECK(poll_backoff_ms(12'000, 12'000, health) == 12'000);
  health.circuit_breaker.recovery_timeout_ms = 600'000;
  CHECK(poll_backoff_ms(50'000, 2'000, health) == 60'000);
}

TEST_CASE("poller: the recovery probe waits 250 ms, doubling to 1 s", "[poller]") {
  CHECK(recovery_backoff_ms(kRecoveryFirstMs) == 500);
  CHECK(recovery_backoff_ms(500) == 1'000);
  CHECK(recovery_backoff_ms(1'000) == 1'000);
}

TEST_CASE("poller: no provider is usable only when every breaker is open (not half-open, not unknown)",
          "[poller]") {
  Profile profile;
  profile.name = "p";
  Chain chain;
  chain.name = "local";
  chain.providers.resize(2);
  chain.providers[0].id = "a";
  chain.providers[1].id = "b";
  State state;
  const StateView view(state);
  CHECK_FALSE(no_provider_usable(view, profile, chain, 1'000));  // nothing known: usable

  auto open = [&](const Provider& p, std::int64_t opened, std::int64_t recovery) {
    auto& b = state.providers[provider_key(profile.name, chain.name, p)].breaker;
    b.state = BreakerState::open;
    b.opened_ms = opened;
    b.recovery_ms = recovery;
  };
  open(chain.providers[0], 0, 10'000);
  CHECK_FALSE(no_provider_usable(view, profile, chain, 1'000));
  open(chain.providers[1], 0, 5'000);
  CHECK(no_provider_usable(view, profile, chain, 1'000));
  CHECK_FALSE(no_provider_usable(view, profile, chain, 5'000));  // b half-opens
}

namespace {

constexpr const char* kPollProfile = R"(
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - { id: a, url: "http://a.test" }
health:
  circuit_breaker: { failure_threshold: 1, recovery_timeout_ms: 10000, jitter: 0 }
)";

struct PollFixture {
  Profile profile = *load_profile_text(kPollProfile, "test.yaml");
  FakeClock clock;
  Random rng{7};
  asio::io_context io;
  test::FakeTransport transport{io, &clock};
  StateStore store{std::nullopt, clock, [](const std::string&) {}};
  const Chain& chain = profile.chains.front();
  const Provider& provider = chain.providers.front();
  PollTarget target{transport, store, clock, rng, profile, chain, provider, nullptr};

  bool poll(RecordOptions options = {}) {
    bool answered = false;
    asio::co_spawn(
        io, [&]() -> asio::awaitable<void> { answered = co_await poll_head_once(target, 2'000, options); },
        asio::detached);
    io.run();
    io.restart();
    return answered;
  }
  const ProviderState* state() const { return store.provider(provider_key(profile.name, chain.name, provider)); }
};

}  // namespace

TEST_CASE("poller: one poll records the head the provider answers, like live traffic", "[poller]") {
  PollFixture f;
  f.transport.on("http://a.test", test::FakeTransport::results("\"0x64\""));
  CHECK(f.poll());
  REQUIRE(f.transport.log.size() == 1);
  CHECK(f.transport.log[0].calls.at(0).method == "eth_blockNumber");
  CHECK(f.transport.log[0].timeout_ms == 2'000);
  REQUIRE(f.state() != nullptr);
  CHECK(f.state()->height.block == 100);
}

TEST_CASE("poller: a failed poll opens the breaker; a recovery trial that succeeds closes it", "[poller]") {
  PollFixture f;
  f.transport.on("http://a.test", test::FakeTransport::status(503));
  CHECK_FALSE(f.poll());
  REQUIRE(f.state() != nullptr);
  CHECK(f.state()->breaker.effective_state(f.clock.now_ms()) == BreakerState::open);
  CHECK(no_provider_usable(f.store, f.profile, f.chain, f.clock.now_ms()));

  f.transport.on("http://a.test", test::FakeTransport::results("\"0x65\""));
  CHECK(f.poll({.trial = true}));
  CHECK(f.state()->breaker.effective_state(f.clock.now_ms()) == BreakerState::closed);
  CHECK(f.state()->height.block == 101);
  CHECK_FALSE(no_provider_usable(f.store, f.profile, f.chain, f.clock.now_ms()));
}

namespace {

constexpr const char* kThreeProfile = R"(
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    providers:
      - { id: a, url: "http://a.test" }
      - { id: b, url: "http://b.test" }
      - { id: c, url: "http://c.test" }
)";

/// Three providers polled in turn: the mark their heights make.
struct MarkFixture {
  Profile profile = *load_profile_text(kThreeProfile, "test.yaml");
  FakeClock clock;
  Random rng{7};
  asio::io_context io;
  test::FakeTransport transport{io, &clock};
  StateStore store{std::nullopt, clock, [](const std::string&) {}};
  const Chain& chain = profile.chains.front();

  /// Provider `i` answers the head poll with `height`.
  void poll(std::size_t i, std::uint64_t height) {
    const Provider& p = chain.providers.at(i);
    transport.on(p.url, test::FakeTransport::results(fmt::format("\"{:#x}\"", height)));
    PollTarget target{transport, store, clock, rng, profile, chain, p, nullptr};
    bool answered = false;
    asio::co_spawn(
        io, [&]() -> asio::awaitable<void> { answered = co_await poll_head_once(target, 2'000); },
        asio::detached);
    io.run();
    io.restart();
    REQUIRE(answered);
  }
  [[nodiscard]] Height mark() const {
    const ChainState* cs = store.chain(chain_key(profile.name, chain));
    return cs != nullptr ? cs->high_water : Height{};
  }
};

}  // namespace

TEST_CASE("poller: a head poll raises the high-water mark when the other providers confirm it",
          "[poller][highwater]") {
  MarkFixture f;
  f.poll(1, 100);
  f.poll(2, 100);
  CHECK(f.mark().block == 100);  // no client asked: the polls alone raised it
  f.clock.advance(500);
  f.poll(0, 101);  // one block ahead: within max_lag_blocks of what the others reach
  CHECK(f.mark().block == 101);
  CHECK(f.mark().t_ms == f.clock.now_ms());
  // A lagging provider's poll does not lower it.
  f.poll(1, 99);
  CHECK(f.mark().block == 101);
}

TEST_CASE("poller: a lone provider's claim the others do not confirm never moves the mark",
          "[poller][highwater]") {
  MarkFixture f;
  f.poll(1, 100);
  f.poll(2, 100);
  REQUIRE(f.mark().block == 100);
  // Ahead of the two others by more than max_lag_blocks (2): unconfirmed, not believed.
  f.poll(0, 110);
  CHECK(f.mark().block == 100);
  // A jump far beyond the others, and a figure no chain reaches.
  f.poll(0, 5'000'000);
  CHECK(f.mark().block == 100);
  f.poll(0, kMaxPlausibleHeight + 1);
  CHECK(f.mark().block == 100);
  // Once another provider confirms it, the height is the chain's.
  f.poll(0, 110);
  f.poll(1, 110);
  CHECK(f.mark().block == 110);
}

TEST_CASE("poller: a provider on another chain never moves the mark", "[poller][highwater]") {
  MarkFixture f;
  const auto kc = provider_key(f.profile.name, f.chain.name, f.chain.providers[2]);
  ProbeFindings other_chain;
  other_chain.t_ms = f.clock.now_ms();
  other_chain.chain_id = 1;
  f.store.record(ProbeEvent{kc, other_chain}, f.profile.health);
  f.poll(0, 100);
  f.poll(1, 100);
  REQUIRE(f.mark().block == 100);
  f.poll(2, 101);  // within max_lag_blocks, but of another chain
  CHECK(f.mark().block == 100);
}

TEST_CASE("liveness: up only with a closed breaker and a recent last exchange that succeeded", "[poller]") {
  Chain chain;
  chain.block_time_ms = 1'000;  // window: 3 polls of 1 s and a 2 s poll timeout
  Provider p;
  p.timeout_ms = 10'000;
  CHECK(liveness_window_ms(chain, p) == 5'000);
  chain.block_time_ms = 12'000;
  CHECK(liveness_window_ms(chain, p) == 41'000);
  chain.block_time_ms = 1'000;

  const std::int64_t now = 1'000'000;
  CHECK(liveness_problem(nullptr, chain, p, now, true) == "has not answered yet");
  ProviderState s;
  CHECK(liveness_problem(&s, chain, p, now, true) == "has not answered yet");
  s.last_ok_ms = now - 1'000;
  CHECK(liveness_problem(&s, chain, p, now, true).empty());
  // Its last exchange failed: not up, whatever the breaker's count.
  s.last_failed_ms = now - 500;
  s.breaker.reason = "connect";
  CHECK(liveness_problem(&s, chain, p, now, true).starts_with("its last exchange failed (connect)"));
  s.last_ok_ms = now - 100;
  CHECK(liveness_problem(&s, chain, p, now, true).empty());
  // Too long ago: not up while the polls should keep it fresh; up without them (--no-probe).
  CHECK(liveness_problem(&s, chain, p, now + 5'101, true).starts_with("no answer for 5201 ms"));
  CHECK(liveness_problem(&s, chain, p, now + 5'101, false).empty());
  // Open, then half-open: not up until a probe closes the breaker.
  s.breaker.state = BreakerState::open;
  s.breaker.opened_ms = now;
  s.breaker.recovery_ms = 1'000;
  CHECK(liveness_problem(&s, chain, p, now + 10, true).starts_with("breaker open (connect)"));
  CHECK(liveness_problem(&s, chain, p, now + 1'000, true).starts_with("breaker half-open"));
  s.breaker = Breaker{};
  CHECK(liveness_problem(&s, chain, p, now + 1'000, true).empty());
}

TEST_CASE("liveness: a success and a failure are remembered by the provider state", "[poller]") {
  PollFixture f;
  f.transport.on("http://a.test", test::FakeTransport::results("\"0x64\""));
  CHECK(f.poll());
  const auto ok_at = f.clock.now_ms();
  CHECK(f.state()->last_ok_ms == ok_at);
  CHECK(f.state()->last_failed_ms == 0);
  f.clock.advance(100);
  f.transport.on("http://a.test", test::FakeTransport::status(503));
  CHECK_FALSE(f.poll());
  CHECK(f.state()->last_ok_ms == ok_at);
  CHECK(f.state()->last_failed_ms == ok_at + 100);
}

TEST_CASE("wrong chain: a warning only when every provider was seen on another chain", "[poller]") {
  Profile profile;
  profile.name = "p";
  Chain chain;
  chain.name = "local";
  chain.chain_id = 31337;
  chain.providers.resize(2);
  chain.providers[0].id = "a";
  chain.providers[1].id = "b";
  State state;
  const StateView view(state);
  auto seen = [&](const Provider& p, std::uint64_t id) {
    state.providers[provider_key(profile.name, chain.name, p)].probe.chain_id = id;
  };
  CHECK(wrong_chain_warning(view, profile, chain).empty());  // nothing known
  seen(chain.providers[0], 1);
  CHECK(wrong_chain_warning(view, profile, chain).empty());  // b unknown
  CHECK_FALSE(chain_id_confirmed(view, profile, chain));
  seen(chain.providers[1], 31337);
  CHECK(wrong_chain_warning(view, profile, chain).empty());
  CHECK(chain_id_confirmed(view, profile, chain));
  seen(chain.providers[1], 5);
  CHECK(wrong_chain_warning(view, profile, chain) ==
        "every provider of chain 'local' is on another chain than the profile's 31337 (a is on 1, "
        "b is on 5): its requests will be refused and /healthz is 503 until the profile or the "
        "providers are fixed");
}

TEST_CASE("poller: finality is asked at first, after the head moved 8 blocks, and every 32 polls",
          "[poller][finality]") {
  FinalityPace pace;
  CHECK(pace.due(100));
  pace.done(100, true);
  CHECK_FALSE(pace.due(100));
  CHECK_FALSE(pace.due(107));
  CHECK(pace.due(108));
  pace.polls = kFinalityEveryPolls;
  CHECK(pace.due(100));  // a head that stands still: asked now and then anyway
  // A provider that answers neither tag is asked less and less often, not on head moves.
  pace.done(100, false);
  CHECK_FALSE(pace.due(200));
  pace.polls = 2 * kFinalityEveryPolls - 1;
  CHECK_FALSE(pace.due(200));
  pace.polls = 2 * kFinalityEveryPolls;
  CHECK(pace.due(200));
  for (int i = 0; i < 10; ++i) pace.done(100, false);
  pace.polls = 8 * kFinalityEveryPolls;
  CHECK(pace.due(100));  // capped
}

TEST_CASE("poller: block_object_number reads a block's number; null or junk is none", "[poller][finality]") {
  CHECK(block_object_number(R"({"number":"0x1b4","hash":"0x01"})") == 436U);
  CHECK_FALSE(block_object_number("null").has_value());
  CHECK_FALSE(block_object_number(R"({"number":436})").has_value());
  CHECK_FALSE(block_object_number(R"({"hash":"0x01"})").has_value());
  CHECK_FALSE(block_object_number("[1]").has_value());
}

TEST_CASE("poller: a finality poll records safe and finalized on the chain, tolerating an unknown tag",
          "[poller][finality]") {
  PollFixture f;
  f.transport.on("http://a.test", test::FakeTransport::results("\"0x64\""));
  REQUIRE(f.poll());  // the head first: 100
  f.transport.on("http://a.test", [](const HttpRequest&, const std::vector<test::FakeTransport::Call>& calls) {
    return test::FakeTransport::reply(calls, [](const test::FakeTransport::Call& c) -> std::string {
      if (c.params.find("safe") != std::string::npos) return R"("error":{"code":-32602,"message":"unknown block tag"})";
      return R"("result":{"number":"0x40","hash":"0x01"})";
    });
  });
  bool answered = false;
  asio::co_spawn(
      f.io, [&]() -> asio::awaitable<void> { answered = co_await poll_finality_once(f.target, 2'000); },
      asio::detached);
  f.io.run();
  f.io.restart();
  CHECK(answered);
  const ChainState* cs = f.store.chain(chain_key(f.profile.name, f.chain));
  REQUIRE(cs != nullptr);
  CHECK(cs->finalized.block == 64);
  CHECK(cs->safe.t_ms == 0);  // not answered: not known
  // Neither finality lookup counts as traffic for the breaker.
  CHECK(f.state()->breaker.failures == 0);
}

TEST_CASE("finality: rises only, never above the reporting provider's head, and goes with a reset mark",
          "[poller][finality]") {
  State state;
  const HealthConfig health;
  apply_event(state, HighWaterEvent{"c", Height{100, 1}}, health);
  apply_event(state, FinalityEvent{"c", Height{90, 2}, Height{60, 2}, 100}, health);
  CHECK(state.chains["c"].safe.block == 90);
  CHECK(state.chains["c"].finalized.block == 60);
  apply_event(state, FinalityEvent{"c", Height{80, 3}, Height{50, 3}, 100}, health);  // lower: kept
  CHECK(state.chains["c"].finalized.block == 60);
  apply_event(state, FinalityEvent{"c", Height{0, 0}, Height{500, 4}, 400}, health);  // past its head
  CHECK(state.chains["c"].finalized.block == 60);
  CHECK(state.chains["c"].safe.block == 90);  // an unanswered tag changes nothing
  apply_event(state, HighWaterEvent{"c", Height{10, 5}, true}, health);  // a restarted chain
  CHECK(state.chains["c"].finalized.t_ms == 0);
  CHECK(state.chains["c"].safe.t_ms == 0);
}

TEST_CASE("finality: kept across a save of the state file", "[poller][finality]") {
  PendingEvents pending;
  const HealthConfig health;
  pending.add(HighWaterEvent{"c", Height{100, 1}}, health);
  pending.add(FinalityEvent{"c", Height{90, 2}, Height{60, 2}, 100}, health);
  pending.add(FinalityEvent{"c", Height{0, 0}, Height{64, 3}, 100}, health);
  State onto;
  pending.replay(onto);
  CHECK(onto.chains["c"].safe.block == 90);
  CHECK(onto.chains["c"].finalized.block == 64);
  const auto text = serialize_state(onto, 10, 1);
  auto back = parse_state(text);
  REQUIRE(back);
  CHECK(back->chains["c"].finalized.block == 64);
  CHECK(back->chains["c"].safe.block == 90);
  CHECK(back->chains["c"].safe.t_ms == 2);
}

namespace {

constexpr const char* kFinalityProfile = R"(
chains:
  local:
    chain_id: 31337
    block_time_ms: 1000
    max_lag_blocks: 2
    providers:
      - { id: a, url: "http://a.test" }
      - { id: b, url: "http://b.test" }
      - { id: c, url: "http://c.test" }
)";

/// Three providers whose heads are set by hand, each answering its safe and finalized blocks.
struct FinalityFixture {
  Profile profile = *load_profile_text(kFinalityProfile, "test.yaml");
  FakeClock clock;
  Random rng{7};
  asio::io_context io;
  test::FakeTransport transport{io, &clock};
  StateStore store{std::nullopt, clock, [](const std::string&) {}};
  const Chain& chain = profile.chains.front();
  FinalityVotes votes;

  void head(const char* id, std::uint64_t block) {
    clock.advance(1);  // each observation newer than the last: the newest wins
    store.record(HeightEvent{provider_key(profile.name, chain.name, *chain.find_provider(id)),
                             Height{block, clock.now_ms()}},
                 profile.health);
  }
  /// The provider answers `safe` and `finalized` with these blocks; returns whether it answered.
  bool report(const char* id, std::uint64_t safe, std::uint64_t finalized, bool with_votes = true) {
    transport.on(fmt::format("http://{}.test", id),
                 [safe, finalized](const HttpRequest&, const std::vector<test::FakeTransport::Call>& calls) {
                   return test::FakeTransport::reply(calls, [safe, finalized](const test::FakeTransport::Call& c) {
                     const auto n = c.params.find("safe") != std::string::npos ? safe : finalized;
                     return fmt::format(R"("result":{{"number":"0x{:x}","hash":"0x01"}})", n);
                   });
                 });
    PollTarget target{transport, store, clock, rng, profile, chain, *chain.find_provider(id),
                      with_votes ? &votes : nullptr};
    bool answered = false;
    asio::co_spawn(
        io, [&]() -> asio::awaitable<void> { answered = co_await poll_finality_once(target, 2'000); },
        asio::detached);
    io.run();
    io.restart();
    return answered;
  }
  [[nodiscard]] const ChainState* chain_state() const { return store.chain(chain_key(profile.name, chain)); }
  [[nodiscard]] std::uint64_t finalized() const {
    const ChainState* cs = chain_state();
    return cs != nullptr && cs->finalized.t_ms != 0 ? cs->finalized.block : 0;
  }
  [[nodiscard]] std::uint64_t safe() const {
    const ChainState* cs = chain_state();
    return cs != nullptr && cs->safe.t_ms != 0 ? cs->safe.block : 0;
  }
};

}  // namespace

TEST_CASE("finality: a provider whose head is not believed changes nothing, nor a claim above the head",
          "[poller][finality]") {
  FinalityFixture f;
  f.head("a", 100);
  f.head("b", 100);
  f.head("c", 1'000'000'000);  // a liar: a jump far above the others
  CHECK(f.report("c", 999'999'990, 999'999'999, false));  // it answered; nothing believed
  CHECK(f.finalized() == 0);
  CHECK(f.safe() == 0);
  CHECK(f.report("a", 80, 64, false));
  CHECK(f.finalized() == 64);
  CHECK(f.safe() == 80);
  // Not even a plausible figure below the head: its head is not believed, so nothing it says is.
  CHECK(f.report("c", 95, 90, false));
  CHECK(f.finalized() == 64);
  CHECK(f.safe() == 80);
  // Above the chain's believed head (100): left out, the other tag still counts.
  CHECK(f.report("a", 90, 150, false));
  CHECK(f.finalized() == 64);
  CHECK(f.safe() == 90);
  // The liar again, and one unconfirmed by the other two (3 blocks ahead, max_lag_blocks 2).
  CHECK(f.report("c", 999'999'990, 999'999'999, false));
  f.head("c", 103);
  CHECK(f.report("c", 103, 103, false));
  CHECK(f.finalized() == 64);
  CHECK(f.safe() == 90);
  // Once the others confirm its head, its report counts.
  f.head("a", 103);
  CHECK(f.report("c", 99, 95, false));
  CHECK(f.finalized() == 95);
}

TEST_CASE("finality: with votes, the mark is what more than half of the believed providers reach",
          "[poller][finality]") {
  FinalityFixture f;
  f.head("a", 100);
  f.head("b", 100);
  f.head("c", 100);
  // A buggy node calls its head final: alone of three (the others not asked yet), it is no mark.
  f.report("a", 100, 100);
  CHECK(f.finalized() == 0);
  f.report("b", 90, 64);
  CHECK(f.finalized() == 64);  // a and b both reach 64; c not asked yet
  CHECK(f.safe() == 90);
  f.report("c", 92, 70);
  CHECK(f.finalized() == 70);  // two of three reach 70, only a reaches 100
  CHECK(f.safe() == 92);
  // A liar's vote does not count: c turns into one, and its later report is not believed.
  f.head("c", 1'000'000'000);
  f.report("c", 999'999'000, 999'999'000);
  CHECK(f.finalized() == 70);
  f.report("b", 95, 80);  // a (100) and b (80) believed: the lower of two
  CHECK(f.finalized() == 80);
}

TEST_CASE("finality: the quorum counts believed providers, not-asked ones as nothing, silent ones not",
          "[finality]") {
  using V = FinalityVotes::Vote;
  const ClaimJudgement yes{ClaimVerdict::believed, 0};
  const ClaimJudgement liar{ClaimVerdict::implausible, 100};
  const ClaimJudgement none{};
  auto fin = [](std::uint64_t b) { return V{true, {}, Height{b, 1}}; };
  auto q = [](std::vector<V> v, std::vector<ClaimJudgement> j) { return finality_quorum(v, j).finalized.block; };
  CHECK(q({fin(50)}, {yes}) == 50);                              // one alone
  CHECK(q({fin(50), fin(60)}, {yes, yes}) == 50);                // the lower of two
  CHECK(q({fin(50), fin(60), fin(70)}, {yes, yes, yes}) == 60);  // two of three
  CHECK(q({fin(50), fin(60), fin(70), fin(80)}, {yes, yes, yes, yes}) == 60);  // three of four
  CHECK(q({fin(50), fin(900), fin(60)}, {yes, liar, yes}) == 50);  // a quarantined one: left out
  CHECK(q({fin(50), fin(900), fin(60)}, {yes, none, yes}) == 50);  // breaker open, stale: left out
  CHECK(q({fin(50), V{}, fin(60)}, {yes, yes, yes}) == 50);        // not asked: reaches nothing
  CHECK(q({fin(50), V{}, V{}}, {yes, yes, yes}) == 0);
  CHECK(q({fin(50), V{true, {}, {}}, V{true, {}, {}}}, {yes, yes, yes}) == 50);  // no tag: silent
  CHECK(finality_quorum(std::vector<V>{fin(50)}, std::vector<ClaimJudgement>{yes}).safe.t_ms == 0);
}

TEST_CASE("finality: a mark above the head a report was judged against is dropped, from a state file too",
          "[poller][finality]") {
  // What a liar left in a state file before finality followed the head.
  State old;
  old.chains["c"].high_water = Height{100, 1};
  old.chains["c"].safe = Height{999'999'990, 1};
  old.chains["c"].finalized = Height{999'999'999, 1};
  auto state = parse_state(serialize_state(old, 10, 1));
  REQUIRE(state);
  REQUIRE(state->chains["c"].finalized.block == 999'999'999);
  const HealthConfig health;
  // The first report judged against the believed head (100) drops both marks, keeps its own.
  apply_event(*state, FinalityEvent{"c", Height{}, Height{64, 2}, 100}, health);
  CHECK(state->chains["c"].finalized.block == 64);
  CHECK(state->chains["c"].safe.t_ms == 0);
  // Through a save (pending events replayed onto the file's state) alike.
  PendingEvents pending;
  pending.add(FinalityEvent{"c", Height{}, Height{64, 2}, 100}, health);
  auto file = parse_state(serialize_state(old, 10, 1));
  REQUIRE(file);
  pending.replay(*file);
  CHECK(file->chains["c"].finalized.block == 64);
  CHECK(file->chains["c"].safe.t_ms == 0);
}

}  // namespace unit_poller_test

#include "rpcroute/state.hpp"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "../support/temp_dir.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_state_test {

using namespace rpcroute;
using rpcroute::test::fake_env;
using rpcroute::test::read_file;
using rpcroute::test::TempDir;
using rpcroute::test::write_file;

namespace {

constexpr std::int64_t kNow = 1'700'000'000'000;
const std::string kKey = "prof/eth/alpha#0123456789ab";
const std::string kKey2 = "prof/eth/beta#ba9876543210";
const std::string kChain = "prof/eth";

HealthConfig test_health() {
  HealthConfig h;
  h.circuit_breaker.failure_threshold = 3;
  h.circuit_breaker.recovery_timeout_ms = 1'000;
  h.circuit_breaker.max_recovery_timeout_ms = 4'000;
  h.circuit_breaker.jitter = 0;
  h.rate_limit_default_ms = 30'000;
  return h;
}

SampleEvent sample(const std::string& key, const std::string& method, std::int64_t t_ms,
                   std::int64_t latency_us, Outcome outcome = Outcome::success) {
  return SampleEvent{key, method, Sample{t_ms, latency_us, outcome}};
}

std::size_t sample_count(const State& s) {
  std::size_t n = 0;
  for (const auto& [key, ps] : s.providers) {
    for (const auto& [method, samples] : ps.methods) n += samples.size();
  }
  return n;
}

/// Field-by-field equality with a readable failure.
void check_equal(const State& a, const State& b) {
  REQUIRE(a.providers.size() == b.providers.size());
  for (const auto& [key, pa] : a.providers) {
    INFO("provider " << key);
    auto it = b.providers.find(key);
    REQUIRE(it != b.providers.end());
    const auto& pb = it->second;
    CHECK(pa.profile == pb.profile);
    CHECK(pa.chain == pb.chain);
    CHECK(pa.provider == pb.provider);
    CHECK(pa.fingerprint == pb.fingerprint);
    CHECK(pa.breaker.state == pb.breaker.state);
    CHECK(pa.breaker.failures == pb.breaker.failures);
    CHECK(pa.breaker.successes == pb.breaker.successes);
    CHECK(pa.breaker.reopens == pb.breaker.reopens);
    CHECK(pa.breaker.opened_ms == pb.breaker.opened_ms);
    CHECK(pa.breaker.recovery_ms == pb.breaker.recovery_ms);
    CHECK(pa.breaker.reason == pb.breaker.reason);
    CHECK(pa.rate_limited_until_ms == pb.rate_limited_until_ms);
    CHECK(pa.height.block == pb.height.block);
    CHECK(pa.height.t_ms == pb.height.t_ms);
    CHECK(pa.last_used_ms == pb.last_used_ms);
    CHECK(pa.last_ok_ms == pb.last_ok_ms);
    CHECK(pa.last_failed_ms == pb.last_failed_ms);
    REQUIRE(pa.methods.size() == pb.methods.size());
    for (const auto& [method, sa] : pa.methods) {
      INFO("method " << method);
      auto mit = pb.methods.find(method);
      REQUIRE(mit != pb.methods.end());
      const auto& sb = mit->second;
      REQUIRE(sa.size() == sb.size());
      for (std::size_t i = 0; i < sa.size(); ++i) {
        CHECK(sa[i].t_ms == sb[i].t_ms);
        CHECK(sa[i].latency_us == sb[i].latency_us);
        CHECK(sa[i].outcome == sb[i].outcome);
      }
    }
  }
  REQUIRE(a.chains.size() == b.chains.size());
  for (const auto& [key, ca] : a.chains) {
    INFO("chain " << key);
    auto it = b.chains.find(key);
    REQUIRE(it != b.chains.end());
    CHECK(ca.high_water.block == it->second.high_water.block);
    CHECK(ca.high_water.t_ms == it->second.high_water.t_ms);
    CHECK(ca.rr_cursor == it->second.rr_cursor);
  }
  REQUIRE(a.filters.size() == b.filters.size());
  for (const auto& [key, fa] : a.filters) {
    INFO("filter " << key);
    auto it = b.filters.find(key);
    REQUIRE(it != b.filters.end());
    CHECK(fa.provider == it->second.provider);
    CHECK(fa.t_ms == it->second.t_ms);
  }
}

/// A state that uses every field.
State rich_state() {
  State s;
  auto& a = s.providers[kKey];
  a.profile = "prof";
  a.chain = "eth";
  a.provider = "alpha";
  a.fingerprint = "0123456789ab";
  a.breaker = Breaker{
      BreakerState::open, 3, 0, 2, kNow - 500, 4'000, "HTTP 502: \"bad gateway\"\n\ttab \\ slash"};
  a.rate_limited_until_ms = kNow + 30'000;
  a.height = Height{18'000'000'000'000'000'000ULL, kNow - 10};
  a.last_used_ms = kNow - 5;
  a.last_ok_ms = kNow - 7;
  a.last_failed_ms = kNow - 6;
  a.methods["eth_call"] = {Sample{kNow - 3, 1'500, Outcome::success},
                           Sample{kNow - 2, 900'000, Outcome::timeout},
                           Sample{kNow - 1, 20, Outcome::rpc_error}};
  a.methods[std::string(kOtherMethod)] = {Sample{kNow, 7, Outcome::wrong_id}};  // odd names share it
  auto& b = s.providers[kKey2];
  b.profile = "prof";
  b.chain = "eth";
  b.provider = "beta";
  b.fingerprint = "ba9876543210";
  b.breaker.state = BreakerState::half_open;
  b.breaker.successes = 1;
  b.last_used_ms = kNow;
  s.chains[kChain] = ChainState{Height{19'000'000, kNow - 100}, 12'345'678'901ULL, {}, {}};
  s.chains["other/base"] = ChainState{};
  s.filters["prof/eth/0xabc"] = FilterPin{"alpha", kNow - 1'000};
  return s;
}

}  // namespace

TEST_CASE("state keys", "[state]") {
  Provider p;
  p.id = "alpha";
  p.fingerprint = "0123456789ab";
  CHECK(provider_key("prof", "eth", p) == kKey);
  Chain chain;
  chain.name = "eth";
  chain.chain_id = 1;
  chain.providers = {p};
  const auto ck = chain_key("prof", chain);
  CHECK_THAT(ck, Catch::StartsWith("prof/eth#1:"));
  CHECK(filter_key("prof", chain, "0xABCdef") == ck + "/0xabcdef");
}

TEST_CASE("state keys: two profiles with the same file stem and chain name share no chain state", "[state]") {
  // Two projects' local.yaml: chain "local", provider "a", at different URLs or chain ids.
  auto chain = [](std::uint64_t id, std::vector<std::string> urls) {
    Chain c;
    c.name = "local";
    c.chain_id = id;
    for (std::size_t i = 0; i < urls.size(); ++i) {
      Provider p;
      p.id = i == 0 ? "a" : "b";
      p.url = urls[i];
      p.fingerprint = url_fingerprint(p.url);
      c.providers.push_back(p);
    }
    return c;
  };
  const auto one = chain(31337, {"http://127.0.0.1:8545"});
  const auto other_url = chain(31337, {"http://127.0.0.1:9545"});
  const auto other_id = chain(1, {"http://127.0.0.1:8545"});
  CHECK(chain_key("local", one) != chain_key("local", other_url));
  CHECK(chain_key("local", one) != chain_key("local", other_id));
  CHECK(filter_key("local", one, "0x1") != filter_key("local", other_url, "0x1"));
  // Provider keys already differ by the URL's fingerprint.
  CHECK(provider_key("local", "local", one.providers[0]) != provider_key("local", "local", other_url.providers[0]));
  // The same providers in another order are the same chain.
  const auto ab = chain(31337, {"http://127.0.0.1:8545", "http://127.0.0.1:8546"});
  const auto ba = chain(31337, {"http://127.0.0.1:8546", "http://127.0.0.1:8545"});
  CHECK(chain_key("local", ab) == chain_key("local", ba));
  // The key shows no URL.
  CHECK(chain_key("local", one).find("8545") == std::string::npos);
}

TEST_CASE("prune: a chain entry whose mark is older than the retention goes (keys that no longer match)",
          "[state]") {
  State s;
  const std::string fresh = "prof/eth#1:0123456789ab";
  s.chains["prof/eth"] = ChainState{Height{5, kNow - kProviderRetentionMs - 1}, 3, {}, {}};  // a key of old
  s.chains[fresh] = ChainState{Height{7, kNow - 1'000}, 0, {}, {}};
  s.chains["cursor-only"] = ChainState{Height{}, 4, {}, {}};
  prune(s, kNow);
  CHECK_FALSE(s.chains.contains("prof/eth"));
  CHECK(s.chains.contains(fresh));
  CHECK(s.chains.contains("cursor-only"));
}

TEST_CASE("apply_event: AttemptEvent drives the breaker and the rate-limit mark", "[state]") {
  State s;
  auto health = test_health();
  apply_event(s, AttemptEvent{kKey, kNow, OutcomeClass::success, "", -1, 0}, health);
  REQUIRE(s.providers.count(kKey) == 1);
  const auto& ps = s.providers.at(kKey);
  // The entry's identity comes from its key.
  CHECK(ps.profile == "prof");
  CHECK(ps.chain == "eth");
  CHECK(ps.provider == "alpha");
  CHECK(ps.fingerprint == "0123456789ab");
  CHECK(ps.last_used_ms == kNow);

  for (int i = 1; i <= 3; ++i) {
    apply_event(s, AttemptEvent{kKey, kNow + i, OutcomeClass::provider_failure, "HTTP 503", -1, 0},
                health);
  }
  CHECK(ps.breaker.state == BreakerState::open);
  CHECK(ps.breaker.reason == "HTTP 503");
  CHECK(ps.breaker.opened_ms == kNow + 3);
  CHECK(ps.last_used_ms == kNow + 3);

  SECTION("rate limit with a retry-after") {
    apply_event(s, AttemptEvent{kKey2, kNow, OutcomeClass::rate_limited, "429", 7'000, 0}, health);
    const auto& b = s.providers.at(kKey2);
    CHECK(b.rate_limited_until_ms == kNow + 7'000);
    CHECK(b.rate_limited(kNow + 6'999));
    CHECK_FALSE(b.rate_limited(kNow + 7'000));
    CHECK(b.breaker.state == BreakerState::closed);
    CHECK(b.breaker.failures == 0);
    // A shorter, later one does not shorten the deadline.
    apply_event(s, AttemptEvent{kKey2, kNow + 1'000, OutcomeClass::rate_limited, "429", 1'000, 0},
                health);
    CHECK(s.providers.at(kKey2).rate_limited_until_ms == kNow + 7'000);
  }
  SECTION("rate limit without one: the default") {
    apply_event(s, AttemptEvent{kKey2, kNow, OutcomeClass::rate_limited, "429", -1, 0}, health);
    CHECK(s.providers.at(kKey2).rate_limited_until_ms == kNow + 30'000);
  }
}

TEST_CASE("apply_event: SampleEvent keeps time order and the newest kMaxSamplesPerMethod",
          "[state]") {
  State s;
  auto health = test_health();
  apply_event(s, sample(kKey, "eth_call", kNow + 20, 2), health);
  apply_event(s, sample(kKey, "eth_call", kNow + 10, 1), health);  // older, merged in later
  apply_event(s, sample(kKey, "eth_call", kNow + 30, 3), health);
  apply_event(s, sample(kKey, "eth_getLogs", kNow + 5, 9, Outcome::timeout), health);
  const auto& ps = s.providers.at(kKey);
  REQUIRE(ps.methods.at("eth_call").size() == 3);
  CHECK(ps.methods.at("eth_call")[0].latency_us == 1);
  CHECK(ps.methods.at("eth_call")[1].latency_us == 2);
  CHECK(ps.methods.at("eth_call")[2].latency_us == 3);
  CHECK(ps.methods.at("eth_getLogs").front().outcome == Outcome::timeout);
  CHECK(ps.last_used_ms == kNow + 30);

  for (std::size_t i = 0; i < kMaxSamplesPerMethod + 50; ++i) {
    apply_event(
        s, sample(kKey2, "x_m", kNow + static_cast<std::int64_t>(i), static_cast<std::int64_t>(i)),
        health);
  }
  const auto& m = s.providers.at(kKey2).methods.at("x_m");
  REQUIRE(m.size() == kMaxSamplesPerMethod);
  CHECK(m.front().latency_us == 50);
  CHECK(m.back().latency_us == static_cast<std::int64_t>(kMaxSamplesPerMethod + 49));
}

TEST_CASE("apply_event: heights, high-water marks, cursors and filters", "[state]") {
  State s;
  auto health = test_health();
  // The newest observation wins, even when lower (a restarted node); older ones are ignored, so
  // events merged from several processes settle on the latest.
  apply_event(s, HeightEvent{kKey, Height{100, kNow}}, health);
  apply_event(s, HeightEvent{kKey, Height{90, kNow + 10}}, health);
  CHECK(s.providers.at(kKey).height.block == 90);
  CHECK(s.providers.at(kKey).height.t_ms == kNow + 10);
  apply_event(s, HeightEvent{kKey, Height{100, kNow + 20}}, health);
  CHECK(s.providers.at(kKey).height.block == 100);
  CHECK(s.providers.at(kKey).height.t_ms == kNow + 20);
  apply_event(s, HeightEvent{kKey, Height{101, kNow + 5}}, health);  // older: ignored
  CHECK(s.providers.at(kKey).height.block == 100);

  apply_event(s, HighWaterEvent{kChain, Height{500, kNow}}, health);
  apply_event(s, HighWaterEvent{kChain, Height{400, kNow + 1}}, health);
  CHECK(s.chains.at(kChain).high_water.block == 500);
  CHECK(s.chains.at(kChain).high_water.t_ms == kNow);
  apply_event(s, HighWaterEvent{kChain, Height{501, kNow + 2}}, health);
  CHECK(s.chains.at(kChain).high_water.block == 501);

  apply_event(s, CursorEvent{kChain, 1}, health);
  apply_event(s, CursorEvent{kChain, 1}, health);
  apply_event(s, CursorEvent{kChain, 5}, health);
  CHECK(s.chains.at(kChain).rr_cursor == 7);

  apply_event(s, FilterEvent{"prof/eth/0x1", FilterPin{"alpha", kNow}}, health);
  apply_event(s, FilterEvent{"prof/eth/0x1", FilterPin{"beta", kNow + 1}}, health);
  REQUIRE(s.filters.count("prof/eth/0x1") == 1);
  CHECK(s.filters.at("prof/eth/0x1").provider == "beta");
  CHECK(s.filters.at("prof/eth/0x1").t_ms == kNow + 1);
}

TEST_CASE("serialize_state and parse_state round-trip", "[state]") {
  State s = rich_state();
  auto text = serialize_state(s, kNow);
  auto parsed = parse_state(text);
  REQUIRE(parsed.has_value());
  check_equal(s, *parsed);
  CHECK(serialize_state(*parsed, kNow) == text);

  auto empty = parse_state(serialize_state(State{}, kNow));
  REQUIRE(empty.has_value());
  CHECK(empty->providers.empty());
  CHECK(empty->chains.empty());
  CHECK(empty->filters.empty());
}

TEST_CASE("serialize_state writes no URL and a version", "[state]") {
  State s = rich_state();
  auto text = serialize_state(s, kNow);
  CHECK(text.find("\"version\":1") != std::string::npos);
  CHECK(text.find("http") == std::string::npos);
}

TEST_CASE("parse_state rejects what is not a version 1 state", "[state]") {
  const char* bad[] = {
      "{not json",
      "",
      "[]",
      "\"state\"",
      "{}",
      R"({"version":2})",
      R"({"version":"1"})",
      R"({"version":1,"providers":[]})",
      R"({"version":1,"chains":7})",
  };
  for (const char* text : bad) {
    INFO(text);
    auto r = parse_state(text);
    CHECK_FALSE(r.has_value());
    if (!r) CHECK_FALSE(r.error().message.empty());
  }
  auto version = parse_state(R"({"version":2})");
  REQUIRE_FALSE(version.has_value());
  CHECK(version.error().message.find("unknown version 2") != std::string::npos);
}

TEST_CASE("parse_state drops a bad entry of a version 1 state, not the state", "[state]") {
  const char* bad[] = {
      R"({"version":1,"providers":{"k":5}})",
      R"({"version":1,"providers":{"k":{"breaker":{"state":"ajar"}}}})",
      R"({"version":1,"providers":{"k":{"breaker":{"state":"open","failures":"3"}}}})",
      R"({"version":1,"providers":{"k":{"last_used_ms":"yesterday"}}})",
      R"({"version":1,"providers":{"k":{"profile":7}}})",
      R"({"version":1,"providers":{"k":{"height":{"block":-1}}}})",
      R"({"version":1,"providers":{"k":{"methods":{"x_m":{"samples":[[1,2,"exploded"]]}}}}})",
      R"({"version":1,"providers":{"k":{"methods":{"x_m":{"samples":[[1,2]]}}}}})",
      R"({"version":1,"providers":{"k":{"methods":{"x_m":{"samples":[["1",2,"success"]]}}}}})",
      R"({"version":1,"providers":{"k":{"methods":{"x_m":{"samples":{}}}}}})",
      R"({"version":1,"providers":{"k":{"methods":{"m":{"samples":[]}}}}})",
      R"({"version":1,"chains":{"c":{"rr_cursor":-1}}})",
      R"({"version":1,"chains":{"c":[]}})",
      R"({"version":1,"filters":{"f":{"provider":1}}})",
  };
  for (const char* text : bad) {
    INFO(text);
    std::size_t dropped = 0;
    auto r = parse_state(text, &dropped);
    REQUIRE(r.has_value());
    CHECK(dropped == 1);
    const bool method_only = std::string_view(text).find("methods") != std::string_view::npos;
    CHECK(r->providers.size() == (method_only ? 1U : 0U));
    if (method_only) CHECK(r->providers.at("k").methods.empty());
    CHECK(r->chains.empty());
    CHECK(r->filters.empty());
  }
}

TEST_CASE("parse_state accepts a minimal state and missing fields", "[state]") {
  auto r = parse_state(R"({"version":1,"providers":{"k":{}},"chains":{"c":{}}})");
  REQUIRE(r.has_value());
  CHECK(r->providers.at("k").breaker.state == BreakerState::closed);
  CHECK(r->chains.at("c").rr_cursor == 0);
}

TEST_CASE("prune drops old samples, filters and stale providers", "[state]") {
  State s;
  auto& live = s.providers["p/c/live#1"];
  live.last_used_ms = kNow - 3'600'000;
  live.methods["old_and_new"] = {Sample{kNow - kSampleRetentionMs - 1, 1, Outcome::success},
                                 Sample{kNow - 3'600'000, 2, Outcome::success}};
  live.methods["all_old"] = {Sample{kNow - kSampleRetentionMs - 10, 3, Outcome::success}};
  auto& many = live.methods["many"];
  for (std::size_t i = 0; i < kMaxSamplesPerMethod + 20; ++i) {
    many.push_back(Sample{kNow - 1'000 + static_cast<std::int64_t>(i), static_cast<std::int64_t>(i),
                          Outcome::success});
  }

  s.providers["p/c/stale#2"].last_used_ms = kNow - kProviderRetentionMs - 1;
  auto& stale_open = s.providers["p/c/stale_open#3"];
  stale_open.last_used_ms = kNow - kProviderRetentionMs - 1;
  stale_open.breaker.state = BreakerState::open;
  auto& stale_limited = s.providers["p/c/stale_limited#4"];
  stale_limited.last_used_ms = kNow - kProviderRetentionMs - 1;
  stale_limited.rate_limited_until_ms = kNow + 1'000;

  s.filters["p/c/0xold"] = FilterPin{"live", kNow - kFilterRetentionMs - 1};
  s.filters["p/c/0xnew"] = FilterPin{"live", kNow - 60'000};

  prune(s, kNow);

  CHECK(s.providers.count("p/c/live#1") == 1);
  CHECK(s.providers.count("p/c/stale#2") == 0);
  CHECK(s.providers.count("p/c/stale_open#3") == 1);
  CHECK(s.providers.count("p/c/stale_limited#4") == 1);

  const auto& methods = s.providers.at("p/c/live#1").methods;
  REQUIRE(methods.count("old_and_new") == 1);
  REQUIRE(methods.at("old_and_new").size() == 1);
  CHECK(methods.at("old_and_new").front().latency_us == 2);
  CHECK(methods.count("all_old") == 0);
  REQUIRE(methods.at("many").size() == kMaxSamplesPerMethod);
  CHECK(methods.at("many").front().latency_us == 20);
  CHECK(methods.at("many").back().latency_us ==
        static_cast<std::int64_t>(kMaxSamplesPerMethod + 19));

  CHECK(s.filters.count("p/c/0xold") == 0);
  CHECK(s.filters.count("p/c/0xnew") == 1);
}

TEST_CASE("default_state_path: RPCROUTE_STATE, XDG_STATE_HOME, HOME", "[state]") {
  CHECK(default_state_path(fake_env(
            {{"RPCROUTE_STATE", "/x/s.json"}, {"XDG_STATE_HOME", "/xdg"}, {"HOME", "/h"}})) ==
        "/x/s.json");
  CHECK(default_state_path(fake_env({{"XDG_STATE_HOME", "/xdg"}, {"HOME", "/h"}})) ==
        "/xdg/rpcroute/state.json");
  CHECK(default_state_path(fake_env({{"HOME", "/h"}})) == "/h/.local/state/rpcroute/state.json");
  // Empty values count as unset.
  CHECK(default_state_path(
            fake_env({{"RPCROUTE_STATE", ""}, {"XDG_STATE_HOME", ""}, {"HOME", "/h"}})) ==
        "/h/.local/state/rpcroute/state.json");
  auto fallback = default_state_path(fake_env({}));
  CHECK(fallback.filename() == "state.json");
  CHECK(fallback.is_absolute());
}

TEST_CASE("StateStore: save creates the file with mode 0600", "[state][store]") {
  TempDir dir;
  auto path = dir / "nested/deeper/state.json";
  FakeClock clock(kNow);
  std::vector<std::string> warnings;
  StateStore store(path, clock, [&](const std::string& w) { warnings.push_back(w); });
  store.load();
  CHECK(store.state().providers.empty());

  // Nothing recorded: nothing written.
  REQUIRE(store.save().has_value());
  CHECK_FALSE(std::filesystem::exists(path));

  store.record(sample(kKey, "eth_call", kNow, 1'234), test_health());
  CHECK(store.dirty());
  REQUIRE(store.save().has_value());
  CHECK_FALSE(store.dirty());
  REQUIRE(std::filesystem::exists(path));
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(warnings.empty());

  auto parsed = parse_state(read_file(path));
  REQUIRE(parsed.has_value());
  CHECK(sample_count(*parsed) == 1);
  CHECK(parsed->providers.at(kKey).methods.at("eth_call").front().latency_us == 1'234);

  // No temporary files are left behind.
  for (const auto& entry : std::filesystem::directory_iterator(path.parent_path())) {
    auto name = entry.path().filename().string();
    CHECK(name.find(".tmp") == std::string::npos);
  }
}

TEST_CASE("StateStore: a second save does not replay the first one's events", "[state][store]") {
  TempDir dir;
  auto path = dir / "state.json";
  FakeClock clock(kNow);
  StateStore store(path, clock, [](const std::string&) {});
  store.load();
  store.record(sample(kKey, "m", kNow, 1), test_health());
  store.record(CursorEvent{kChain, 1}, test_health());
  REQUIRE(store.save().has_value());
  store.record(sample(kKey, "m", kNow + 1, 2), test_health());
  store.record(CursorEvent{kChain, 1}, test_health());
  REQUIRE(store.save().has_value());
  auto parsed = parse_state(read_file(path));
  REQUIRE(parsed.has_value());
  CHECK(sample_count(*parsed) == 2);
  CHECK(parsed->chains.at(kChain).rr_cursor == 2);
  CHECK(sample_count(store.state()) == 2);
}

TEST_CASE("StateStore: two writers of one file merge, nothing lost", "[state][store]") {
  TempDir dir;
  auto path = dir / "state.json";
  FakeClock clock(kNow);
  auto health = test_health();
  auto quiet = [](const std::string&) {};

  {
    StateStore seed(path, clock, quiet);
    seed.load();
    seed.record(sample(kKey, "eth_call", kNow - 100, 1), health);
    seed.record(FilterEvent{"prof/eth/0xf", FilterPin{"alpha", kNow}}, health);
    REQUIRE(seed.save().has_value());
  }

  StateStore a(path, clock, quiet);
  StateStore b(path, clock, quiet);
  a.load();
  b.load();
  REQUIRE(sample_count(a.state()) == 1);
  REQUIRE(sample_count(b.state()) == 1);

  for (int i = 0; i < 3; ++i) a.record(sample(kKey, "eth_call", kNow + i, 100 + i), health);
  for (int i = 0; i < 3; ++i)
    a.record(AttemptEvent{kKey2, kNow + i, OutcomeClass::provider_failure, "timeout", -1, 0},
             health);
  a.record(CursorEvent{kChain, 1}, health);
  a.record(HighWaterEvent{kChain, Height{1'000, kNow}}, health);

  for (int i = 0; i < 4; ++i) b.record(sample(kKey, "eth_call", kNow + 10 + i, 200 + i), health);
  b.record(sample(kKey2, "eth_getLogs", kNow, 300), health);
  b.record(HeightEvent{kKey, Height{1'002, kNow}}, health);
  b.record(CursorEvent{kChain, 1}, health);
  b.record(HighWaterEvent{kChain, Height{999, kNow}}, health);

  REQUIRE(a.save().has_value());
  REQUIRE(b.save().has_value());

  auto parsed = parse_state(read_file(path));
  REQUIRE(parsed.has_value());
  const auto& alpha = parsed->providers.at(kKey);
  REQUIRE(alpha.methods.at("eth_call").size() == 8);  // 1 seeded + 3 from a + 4 from b
  std::set<std::int64_t> latencies;
  for (const auto& smp : alpha.methods.at("eth_call")) latencies.insert(smp.latency_us);
  CHECK(latencies == std::set<std::int64_t>{1, 100, 101, 102, 200, 201, 202, 203});
  CHECK(std::is_sorted(alpha.methods.at("eth_call").begin(), alpha.methods.at("eth_call").end(),
                       [](const Sample& x, const Sample& y) { return x.t_ms < y.t_ms; }));
  CHECK(alpha.height.block == 1'002);
  const auto& beta = parsed->providers.at(kKey2);
  CHECK(beta.breaker.state == BreakerState::open);  // a's failures survived b's save
  CHECK(beta.methods.at("eth_getLogs").size() == 1);
  CHECK(parsed->chains.at(kChain).rr_cursor == 2);
  CHECK(parsed->chains.at(kChain).high_water.block == 1'000);
  CHECK(parsed->filters.count("prof/eth/0xf") == 1);

  // The second writer's live state now includes the first writer's changes.
  check_equal(*parsed, b.state());
}

TEST_CASE("StateStore: a corrupt file is moved aside and a fresh state starts", "[state][store]") {
  const char* contents[] = {"{not json", "", R"({"version":99,"providers":{}})", "[1,2,3]"};
  for (const char* content : contents) {
    INFO("file content: '" << content << "'");
    TempDir dir;
    auto path = dir / "state.json";
    write_file(path, content);
    FakeClock clock(kNow);
    std::vector<std::string> warnings;
    StateStore store(path, clock, [&](const std::string& w) { warnings.push_back(w); });
    store.load();

    CHECK(store.state().providers.empty());
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find(path.string()) != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(path));
    std::vector<std::filesystem::path> aside;
    for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
      if (entry.path().filename().string().rfind("state.json.corrupt-", 0) == 0)
        aside.push_back(entry.path());
    }
    REQUIRE(aside.size() == 1);
    CHECK(read_file(aside[0]) == content);  // kept for inspection, not destroyed

    // The command still works: new state is saved normally.
    store.record(sample(kKey, "m", kNow, 5), test_health());
    REQUIRE(store.save().has_value());
    auto parsed = parse_state(read_file(path));
    REQUIRE(parsed.has_value());
    CHECK(sample_count(*parsed) == 1);
  }
}

TEST_CASE("StateStore: a file corrupted between load and save is moved aside at save",
          "[state][store]") {
  TempDir dir;
  auto path = dir / "state.json";
  FakeClock clock(kNow);
  std::vector<std::string> warnings;
  StateStore store(path, clock, [&](const std::string& w) { warnings.push_back(w); });
  store.load();
  store.record(sample(kKey, "m", kNow, 5), test_health());
  write_file(path, "garbage");
  REQUIRE(store.save().has_value());
  CHECK(warnings.size() == 1);
  auto parsed = parse_state(read_file(path));
  REQUIRE(parsed.has_value());
  CHECK(sample_count(*parsed) == 1);
  bool moved = false;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    moved = moved || entry.path().filename().string().rfind("state.json.corrupt-", 0) == 0;
  }
  CHECK(moved);
}

TEST_CASE("StateStore: reset removes the file and the live state", "[state][store]") {
  TempDir dir;
  auto path = dir / "state.json";
  FakeClock clock(kNow);
  StateStore store(path, clock, [](const std::string&) {});
  store.load();
  store.record(sample(kKey, "m", kNow, 5), test_health());
  REQUIRE(store.save().has_value());
  REQUIRE(std::filesystem::exists(path));
  store.record(sample(kKey, "m", kNow + 1, 6), test_health());

  REQUIRE(store.reset().has_value());
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK(store.state().providers.empty());
  CHECK_FALSE(store.dirty());
  // Resetting again, with no file, is fine.
  REQUIRE(store.reset().has_value());
  // A later load starts empty.
  StateStore again(path, clock, [](const std::string&) {});
  again.load();
  CHECK(again.state().providers.empty());
}

TEST_CASE("StateStore without a path is memory-only", "[state][store]") {
  FakeClock clock(kNow);
  StateStore store(std::nullopt, clock, [](const std::string&) {});
  store.load();
  store.record(sample(kKey, "m", kNow, 5), test_health());
  CHECK(sample_count(store.state()) == 1);
  CHECK_FALSE(store.dirty());
  CHECK(store.save().has_value());
  CHECK(store.reset().has_value());
  CHECK(store.state().providers.empty());
}

TEST_CASE("StateStore: 16 processes saving to one file lose nothing",
          "[state][store][multiprocess]") {
  TempDir dir;
  auto path = dir / "state.json";
  constexpr int kChildren = 16;
  constexpr int kSamplesEach = 5;

  std::vector<pid_t> children;
  for (int child = 0; child < kChildren; ++child) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // Child: no Catch2 here; report through the exit status only.
      int status = 0;
      try {
        FakeClock clock(kNow + child);
        StateStore store(path, clock, [&](const std::string&) { status = 2; });
        store.load();
        for (int i = 0; i < kSamplesEach; ++i) {
          store.record(sample(kKey, "eth_call", kNow + child * 10 + i, child * 100 + i),
                       test_health());
        }
        if (!store.save()) status = 1;
      } catch (...) {
        status = 3;
      }
      ::_exit(status);
    }
    children.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  CHECK(failed == 0);

  auto text = read_file(path);
  auto parsed = parse_state(text);
  REQUIRE(parsed.has_value());
  CHECK(sample_count(*parsed) == kChildren * kSamplesEach);
  std::set<std::int64_t> latencies;
  for (const auto& smp : parsed->providers.at(kKey).methods.at("eth_call"))
    latencies.insert(smp.latency_us);
  CHECK(latencies.size() == static_cast<std::size_t>(kChildren * kSamplesEach));
  // No corrupt or temporary files: every writer saw a whole file.
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    auto name = entry.path().filename().string();
    CHECK(name.find("corrupt") == std::string::npos);
    CHECK(name.find(".tmp") == std::string::npos);
  }
}

TEST_CASE("quota bucket: refills at rps up to burst; draws may overdraw down to -burst", "[state][quota]") {
  const Quota q{5, 5};
  Bucket b;
  CHECK(bucket_level(b, q, kNow) == 5.0);  // never drawn: full
  CHECK(bucket_wait_ms(b, q, kNow) == 0);
  State s;
  const auto health = test_health();
  for (int i = 0; i < 5; ++i) apply_event(s, QuotaEvent{kKey, kNow, 1, q}, health);
  const auto& bucket = s.providers.at(kKey).quota;
  CHECK(bucket_level(bucket, q, kNow) == Approx(0.0));
  CHECK(bucket_wait_ms(bucket, q, kNow) == 200);
  CHECK(bucket_level(bucket, q, kNow + 400) == Approx(2.0));
  CHECK(bucket_level(bucket, q, kNow + 60'000) == Approx(5.0));  // capped at burst
  for (int i = 0; i < 20; ++i) apply_event(s, QuotaEvent{kKey, kNow, 1, q}, health);
  CHECK(s.providers.at(kKey).quota.tokens == Approx(-5.0));
  CHECK(bucket_wait_ms(s.providers.at(kKey).quota, q, kNow) == 1'200);
  // An event older than the bucket's time does not refill it backwards.
  apply_event(s, QuotaEvent{kKey, kNow - 10'000, 0, q}, health);
  CHECK(s.providers.at(kKey).quota.t_ms == kNow);
}

TEST_CASE("StateStore: two processes drawing from one quota share the bucket through the file",
          "[state][store][quota]") {
  TempDir dir;
  const auto path = dir / "state.json";
  FakeClock clock(kNow);
  const auto health = test_health();
  auto quiet = [](const std::string&) {};
  const Quota q{5, 5};
  {
    StateStore a(path, clock, quiet);
    a.load();
    for (int i = 0; i < 3; ++i) a.record(QuotaEvent{kKey, kNow, 1, q}, health);
    REQUIRE(a.save().has_value());
  }
  StateStore b(path, clock, quiet);
  b.load();
  CHECK(bucket_level(b.state().providers.at(kKey).quota, q, kNow) == Approx(2.0));
  StateStore c(path, clock, quiet);
  c.load();
  b.record(QuotaEvent{kKey, kNow, 1, q}, health);
  c.record(QuotaEvent{kKey, kNow, 1, q}, health);
  c.record(QuotaEvent{kKey, kNow, 1, q}, health);
  REQUIRE(b.save().has_value());
  REQUIRE(c.save().has_value());
  auto parsed = parse_state(read_file(path));
  REQUIRE(parsed.has_value());
  CHECK(bucket_level(parsed->providers.at(kKey).quota, q, kNow) == Approx(-1.0));  // 6 drawn from 5
}

TEST_CASE("state: lag marks, learned archival and a high-water reset round-trip and merge", "[state]") {
  const auto health = test_health();
  State s;
  apply_event(s, LagEvent{kKey, LagMark{kNow - 5'000, kNow, 12}}, health);
  apply_event(s, LagEvent{kKey, LagMark{0, kNow - 1}}, health);  // older judgement: ignored
  CHECK(s.providers.at(kKey).lag.behind_since_ms == kNow - 5'000);
  apply_event(s, ArchivalEvent{kKey, ArchivalSeen{false, kNow}}, health);
  apply_event(s, LogLimitEvent{kKey, LogLimit{2'000, kNow}}, health);
  apply_event(s, LogLimitEvent{kKey, LogLimit{500, kNow - 1}}, health);  // older statement: ignored
  apply_event(s, QuotaEvent{kKey2, kNow, 2, Quota{1, 10}}, health);
  apply_event(s, HighWaterEvent{kChain, Height{500, kNow}}, health);
  apply_event(s, HighWaterEvent{kChain, Height{500, kNow + 7}}, health);  // seen again: fresher
  CHECK(s.chains.at(kChain).high_water.t_ms == kNow + 7);
  apply_event(s, HighWaterEvent{kChain, Height{3, kNow + 9}, true}, health);  // a restarted chain
  CHECK(s.chains.at(kChain).high_water.block == 3);

  auto trip = AttemptEvent{kKey, kNow, OutcomeClass::provider_failure, "lag: 20 blocks behind", -1, 0, true};
  apply_event(s, trip, health);
  CHECK(s.providers.at(kKey).breaker.state == BreakerState::open);
  CHECK(s.providers.at(kKey).breaker.reason == "lag: 20 blocks behind");

  auto parsed = parse_state(serialize_state(s, kNow));
  REQUIRE(parsed.has_value());
  const auto& p = parsed->providers.at(kKey);
  CHECK(p.lag.behind_since_ms == kNow - 5'000);
  CHECK(p.lag.blocks == 12);
  CHECK(p.lag.t_ms == kNow);
  CHECK(p.archival_seen.archival == false);
  CHECK(p.archival_seen.t_ms == kNow);
  CHECK(p.log_limit.blocks == 2'000);
  CHECK(p.log_limit.t_ms == kNow);
  CHECK(p.breaker.state == BreakerState::open);
  CHECK(parsed->providers.at(kKey2).quota.tokens == Approx(8.0));
  CHECK(parsed->providers.at(kKey2).quota.t_ms == kNow);
  CHECK(parsed->chains.at(kChain).high_water.block == 3);

  std::size_t dropped = 0;
  CHECK(parse_state(R"({"version":1,"providers":{"k":{"quota":{"tokens":"x"}}}})", &dropped)->providers.empty());
  CHECK(dropped == 1);
}

TEST_CASE("breaker_trip: opens a closed or half-open breaker at once, leaves an open one", "[state][breaker]") {
  const auto cfg = test_health().circuit_breaker;
  Breaker b;
  breaker_trip(b, kNow, "lag", cfg, 0);
  CHECK(b.state == BreakerState::open);
  CHECK(b.opened_ms == kNow);
  CHECK(b.recovery_ms == 1'000);
  breaker_trip(b, kNow + 10, "lag again", cfg, 0);  // still open: unchanged
  CHECK(b.opened_ms == kNow);
  breaker_trip(b, kNow + 1'000, "lag again", cfg, 0);  // half-open by now: reopens, doubled
  CHECK(b.state == BreakerState::open);
  CHECK(b.reopens == 1);
  CHECK(b.recovery_ms == 2'000);
}

TEST_CASE("StateStore: a temporary file left by a killed writer is removed at the next save", "[state][store]") {
  TempDir dir;
  const auto path = dir / "state.json";
  FakeClock clock(kNow);
  auto quiet = [](const std::string&) {};
  // A pid that cannot be alive (beyond pid_max) stands for a writer killed mid-write.
  const auto orphan = dir / "state.json.tmp.2147483000";
  write_file(orphan, "{\"version\":1,\"provid");
  const auto mine = dir / fmt::format("state.json.tmp.{}", ::getppid());  // a live process: kept
  write_file(mine, "{}");
  StateStore store(path, clock, quiet);
  store.load();
  store.record(sample(kKey, "eth_call", kNow, 5), test_health());
  REQUIRE(store.save().has_value());
  CHECK_FALSE(std::filesystem::exists(orphan));
  CHECK(std::filesystem::exists(mine));
  CHECK(parse_state(read_file(path)).has_value());
}

TEST_CASE("StateStore: a FIFO at the state path is left alone; a directory is refused, never moved", "[state][store]") {
  TempDir dir;
  FakeClock clock(kNow);
  std::vector<std::string> warnings;
  auto warn = [&](const std::string& m) { warnings.push_back(m); };
  const auto fifo = dir / "fifo.json";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  StateStore store(fifo, clock, warn);
  store.load();  // would block forever on a blocking open
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("is a FIFO"));
  CHECK_FALSE(store.path().has_value());
  store.record(sample(kKey, "eth_call", kNow, 5), test_health());
  CHECK(store.save().has_value());
  struct stat st {};
  REQUIRE(::stat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));

  // A directory is refused (RPCROUTE_STATE=$HOME must not move the home directory).
  const auto folder = dir / "folder.json";
  std::filesystem::create_directory(folder);
  StateStore in_folder(folder, clock, warn);
  auto loaded = in_folder.load();
  REQUIRE_FALSE(loaded.has_value());
  CHECK_THAT(loaded.error().message, Catch::Contains("is a directory"));
  CHECK(std::filesystem::is_directory(folder));
  in_folder.record(sample(kKey, "eth_call", kNow, 5), test_health());
  REQUIRE(in_folder.save().has_value());
  CHECK(std::filesystem::is_directory(folder));
}

}  // namespace unit_state_test

#include <sys/stat.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <string>

#include <fmt/format.h>

#include "../support/temp_dir.hpp"
#include "rpcroute/config.hpp"

// Each test file in its own namespace: the unit tests build in unity batches (CMakeLists.txt).
namespace unit_profile_test {

using namespace rpcroute;
using rpcroute::test::fake_env;
using rpcroute::test::TempDir;
using rpcroute::test::write_file;

namespace {

const EnvLookup kNoEnv = fake_env({});

constexpr std::string_view kValidProfile = R"(name: Test providers
description: for unit tests
chains:
  ethereum:
    chain_id: 1
    providers:
      - id: first
        url: http://127.0.0.1:8545
      - id: second
        url: https://eth.example.com/v2/abc
        priority: 7
        weight: 60
        archival: true
        rate_limit: { rps: 25 }
        methods: { deny: ["debug_*"], allow: ["eth_*"] }
        limits: { max_block_range: 10000, max_batch: 100 }
        timeout_ms: 8000
        ws_url: wss://eth.example.com/ws
      - id: third
        url: http://127.0.0.1:8547
  sepolia:
    chain_id: 11155111
    block_time_ms: 6000
    max_lag_blocks: 4
    archival_threshold: 64
    lag_trip_ms: 1000
    providers:
      - id: s1
        url: http://127.0.0.1:8546
routing:
  method_overrides:
    eth_getLogs: { strategy: fastest }
    eth_call: { providers: [second, first], timeout_ms: 5000 }
    eth_sendRawTransaction: { broadcast: true }
    "debug_*": { strategy: round-robin }
)";

/// Loads `yaml` and returns the error message; fails the test when it loads.
std::string load_error(std::string_view yaml, const EnvLookup& env = kNoEnv) {
  auto p = load_profile_text(yaml, "t.yaml", env);
  REQUIRE_FALSE(p.has_value());
  CHECK(p.error().exit == ExitCode::usage);
  return p.error().message;
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

/// A profile with one chain (eth, id 1) and one provider (a) holding these keys.
std::string provider_with(std::initializer_list<std::string_view> keys) {
  std::string out = "chains:\n  eth:\n    chain_id: 1\n    providers:\n      - id: a\n";
  for (auto k : keys) out.append("        ").append(k).append("\n");
  return out;
}

}  // namespace

TEST_CASE("a valid profile loads with every default filled in", "[config]") {
  auto loaded = load_profile_text(kValidProfile, "t.yaml", kNoEnv);
  REQUIRE(loaded.has_value());
  const Profile& p = *loaded;

  CHECK(p.title == "Test providers");
  CHECK(p.description == "for unit tests");
  CHECK(p.source == "t.yaml");
  REQUIRE(p.chains.size() == 2);

  const Chain& eth = p.chains[0];
  CHECK(eth.name == "ethereum");
  CHECK(eth.chain_id == 1);
  CHECK(eth.block_time_ms == 12'000);
  CHECK(eth.max_lag_blocks == 2);
  CHECK(eth.archival_threshold == 128);
  CHECK(eth.lag_trip_ms == 30'000);
  REQUIRE(eth.providers.size() == 3);

  const Provider& first = eth.providers[0];
  CHECK(first.id == "first");
  CHECK(first.url == "http://127.0.0.1:8545");
  CHECK(first.priority == 1);  // its position, 1-based
  CHECK(first.weight == 1.0);
  CHECK(first.timeout_ms == 10'000);
  CHECK_FALSE(first.archival.has_value());
  CHECK_FALSE(first.rate_limit.has_value());
  CHECK(first.methods.allow.empty());
  CHECK(first.methods.deny.empty());
  CHECK_FALSE(first.limits.max_block_range.has_value());
  CHECK_FALSE(first.limits.max_batch.has_value());
  CHECK(first.headers.empty());
  CHECK(first.ws_url.empty());
  CHECK(first.fingerprint == url_fingerprint(first.url));

  const Provider& second = eth.providers[1];
  CHECK(second.priority == 7);
  CHECK(second.weight == 60.0);
  CHECK(second.archival == std::optional<bool>(true));
  REQUIRE(second.rate_limit.has_value());
  CHECK(second.rate_limit->rps == 25.0);
  CHECK(second.rate_limit->burst == 25.0);  // burst defaults to rps
  CHECK(second.methods.deny == std::vector<std::string>{"debug_*"});
  CHECK(second.methods.allow == std::vector<std::string>{"eth_*"});
  CHECK(second.limits.max_block_range == std::optional<std::uint64_t>(10'000));
  CHECK(second.limits.max_batch == std::optional<std::size_t>(100));
  CHECK(second.timeout_ms == 8'000);
  CHECK(second.ws_url == "wss://eth.example.com/ws");
  CHECK(second.fingerprint != first.fingerprint);

  CHECK(eth.providers[2].priority == 3);
  CHECK(eth.find_provider("third") == &eth.providers[2]);
  CHECK(eth.find_provider("fourth") == nullptr);

  const Chain& sep = p.chains[1];
  CHECK(sep.chain_id == 11'155'111);
  CHECK(sep.block_time_ms == 6'000);
  CHECK(sep.max_lag_blocks == 4);
  CHECK(sep.archival_threshold == 64);
  CHECK(sep.lag_trip_ms == 1'000);
  CHECK(sep.providers[0].priority == 1);  // positions count per chain

  CHECK(p.routing.default_strategy == Strategy::load_balanced);
  CHECK(p.routing.timeout_ms == 30'000);
  CHECK_FALSE(p.routing.max_attempts.has_value());

  const auto& cb = p.health.circuit_breaker;
  CHECK(cb.failure_threshold == 5);
  CHECK(cb.recovery_timeout_ms == 30'000);
  CHECK(cb.max_recovery_timeout_ms == 600'000);
  CHECK(cb.success_threshold == 2);
  CHECK(cb.half_open_max_inflight == 1);
  CHECK(cb.jitter == Approx(0.05));
  CHECK(p.health.rate_limit_default_ms == 30'000);

  CHECK(p.strategies.fastest.window_ms == 300'000);
  CHECK(p.strategies.fastest.min_calls == 3);
  CHECK(p.strategies.fastest.min_success_rate == Approx(0.9));
  CHECK(p.strategies.latency_weighted.beta == Approx(3.0));
  CHECK(p.strategies.latency_weighted.ms_floor == Approx(30.0));
  CHECK(p.strategies.latency_weighted.explore_floor == Approx(0.05));
  CHECK(p.strategies.latency_weighted.min_calls == 3);
  CHECK(p.strategies.latency_weighted.min_success_rate == Approx(0.85));

  CHECK(p.secrets.empty());  // nothing was substituted and no header or api_key was given
}

TEST_CASE("method overrides: first matching pattern wins, defaults elsewhere", "[config]") {
  auto p = load_profile_text(kValidProfile, "t.yaml", kNoEnv);
  REQUIRE(p.has_value());
  REQUIRE(p->routing.method_overrides.size() == 4);

  auto logs = p->policy_for("eth_getLogs");
  CHECK(logs.strategy == std::optional<Strategy>(Strategy::fastest));
  CHECK(logs.providers.empty());
  CHECK_FALSE(logs.broadcast);

  auto call = p->policy_for("eth_call");
  CHECK_FALSE(call.strategy.has_value());
  CHECK(call.providers == std::vector<std::string>{"second", "first"});
  CHECK(call.timeout_ms == std::optional<std::int64_t>(5'000));

  CHECK(p->policy_for("eth_sendRawTransaction").broadcast);
  CHECK(p->policy_for("debug_traceTransaction").strategy ==
        std::optional<Strategy>(Strategy::round_robin));

  auto none = p->policy_for("eth_blockNumber");
  CHECK_FALSE(none.strategy.has_value());
  CHECK(none.providers.empty());
  CHECK_FALSE(none.timeout_ms.has_value());
  CHECK_FALSE(none.broadcast);
}

TEST_CASE("explicit health, routing and strategy settings are read", "[config]") {
  auto p = load_profile_text(R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: http://h
routing:
  default_strategy: latency-weighted
  timeout_ms: 5000
  max_attempts: 2
health:
  rate_limit_default_ms: 1000
  circuit_breaker: { failure_threshold: 3, recovery_timeout_ms: 1000, max_recovery_timeout_ms: 4000, success_threshold: 1, jitter: 0 }
strategies:
  fastest: { window_ms: 60000, min_calls: 5, min_success_rate: 0.5 }
  latency_weighted: { beta: 2, ms_floor: 10, explore_floor: 0.1 }
)",
                             "t.yaml", kNoEnv);
  REQUIRE(p.has_value());
  CHECK(p->routing.default_strategy == Strategy::latency_weighted);
  CHECK(p->routing.timeout_ms == 5'000);
  CHECK(p->routing.max_attempts == std::optional<int>(2));
  CHECK(p->health.rate_limit_default_ms == 1'000);
  const auto& cb = p->health.circuit_breaker;
  CHECK(cb.failure_threshold == 3);
  CHECK(cb.recovery_timeout_ms == 1'000);
  CHECK(cb.max_recovery_timeout_ms == 4'000);
  CHECK(cb.success_threshold == 1);
  CHECK(cb.jitter == 0.0);
  CHECK(p->strategies.fastest.window_ms == 60'000);
  CHECK(p->strategies.fastest.min_calls == 5);
  CHECK(p->strategies.fastest.min_success_rate == Approx(0.5));
  CHECK(p->strategies.latency_weighted.beta == Approx(2.0));
  CHECK(p->strategies.latency_weighted.ms_floor == Approx(10.0));
  CHECK(p->strategies.latency_weighted.explore_floor == Approx(0.1));
  CHECK(p->strategies.latency_weighted.min_calls == 3);  // not given: default
}

TEST_CASE("a chain's websocket settings are read, with their defaults", "[config]") {
  auto p = load_profile_text(R"(chains:
  eth:
    chain_id: 1
    websocket: { stall_blocks: 0, resubscribe_timeout_ms: 2500 }
    providers:
      - id: a
        url: http://h
)",
                             "t.yaml", kNoEnv);
  REQUIRE(p.has_value());
  const WsChainConfig& ws = p->chains.front().websocket;
  CHECK(ws.stall_blocks == 0);
  CHECK(ws.resubscribe_timeout_ms == 2'500);
  CHECK(ws.max_backfill_blocks == 128);  // not given: defaults
  CHECK(ws.backfill_timeout_ms == 10'000);
  CHECK(WsChainConfig{}.resubscribe_timeout_ms == 30'000);
  CHECK_THAT(load_error("chains:\n  eth:\n    chain_id: 1\n"
                        "    websocket: { resubscribe_timeout_ms: 0 }\n"
                        "    providers:\n      - id: a\n        url: http://h\n"),
             Catch::Matchers::Contains("resubscribe_timeout_ms"));
}

TEST_CASE("validation errors name the source, line and column", "[config]") {
  // Every YAML below starts at line 1, column 1 of its raw string.
  struct Case {
    const char* what;
    const char* yaml;
    const char* where;    // "t.yaml:L:C:"
    const char* message;  // substring
  };
  // clang-format off
  const Case cases[] = {
      {"unknown key at the top level", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: http://h
colour: blue
)", "t.yaml:7:1:", "unknown key 'colour' in profile"},
      {"unknown key in a chain", R"(chains:
  eth:
    chain_id: 1
    block_tim_ms: 5
    providers:
      - id: a
        url: http://h
)", "t.yaml:4:5:", "unknown key 'block_tim_ms' in chain 'eth'"},
      {"unknown key in a provider", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: http://h
        wieght: 3
)", "t.yaml:7:9:", "unknown key 'wieght' in provider"},
      {"unknown key in a nested mapping", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: http://h
health:
  circuit_breaker: { threshold: 3 }
)", "t.yaml:8:22:", "unknown key 'threshold' in health.circuit_breaker"},
      {"unknown key in routing", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: http://h
routing:
  retries: 3
)", "t.yaml:8:3:", "unknown key 'retries' in routing"},
      {"unknown key in a method override", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: http://h
routing:
  method_overrides:
    eth_call: { stratgy: fastest }
)", "t.yaml:9:17:", "unknown key 'stratgy' in method override"},
      {"duplicate key in a provider", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: http://h
        url: http://g
)", "t.yaml:7:9:", "duplicate key 'url'"},
      {"a chain given twice (a fuzz finding: both were kept)", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: http://h
  eth:
    chain_id: 2
    providers:
      - id: a
        url: http://h
)", "t.yaml:7:3:", "duplicate key 'eth'"},
      {"a string for chain_id", R"(chains:
  eth:
    chain_id: mainnet
    providers:
      - id: a
        url: http://h
)", "t.yaml:3:15:", "'chain_id' must be an integer"},
      {"a fraction for chain_id", R"(chains:
  eth:
    chain_id: 1.5
    providers:
      - id: a
        url: http://h
)", "t.yaml:3:15:", "'chain_id' must be an integer"},
      {"a list for weight", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: http://h
        weight: [1, 2]
)", "t.yaml:7:17:", "'weight' must be a number"},
      {"a negative weight", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: http://h
        weight: -1
)", "t.yaml:7:17:", "'weight' must be between 0 and"},
      {"a list for an id", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: [a]
        url: http://h
)", "t.yaml:5:13:", "'id' must be a string"},
      {"not a boolean for archival", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: http://h
        archival: maybe
)", "t.yaml:7:19:", "expected true or false"},
      {"a negative priority", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: http://h
        priority: -1
)", "t.yaml:7:19:", "'priority' must be at least 0"},
      {"a zero timeout", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: http://h
        timeout_ms: 0
)", "t.yaml:7:21:", "'timeout_ms' must be at least 1"},
      {"rate_limit without rps", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: http://h
        rate_limit: { burst: 5 }
)", "t.yaml:7:21:", "rate_limit needs 'rps'"},
      {"a header value with a line break", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: http://h
        headers: { X-A: "a\nb" }
)", "t.yaml:7:25:", "header value holds a line break"},
      {"duplicate provider id", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: http://h1
      - id: a
        url: http://h2
)", "t.yaml:7:13:", "duplicate provider id 'a'"},
      {"unknown default strategy", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: http://h
routing:
  default_strategy: fastes
)", "t.yaml:8:21:", "unknown strategy 'fastes'"},
      {"unknown strategy in a method override", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: http://h
routing:
  method_overrides:
    eth_call: { strategy: quickest }
)", "t.yaml:9:27:", "unknown strategy 'quickest'"},
      {"URL without a scheme", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: 127.0.0.1:8545
)", "t.yaml:6:14:", "bad URL"},
      {"ftp URL", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: ftp://files.example.com
)", "t.yaml:6:14:", "scheme must be http or https"},
      {"http ws_url", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: http://h
        ws_url: http://h
)", "t.yaml:7:17:", "scheme must be ws or wss"},
      {"duplicate chain id", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: http://h
  mainnet:
    chain_id: 1
    providers:
      - id: b
        url: http://h
)", "t.yaml:7:3:", "chain id 1 is used by two chains"},
      {"method override naming an unknown provider", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: http://h
routing:
  method_overrides:
    eth_call: { providers: [a, ghost] }
)", "t.yaml:9:32:", "unknown provider id 'ghost'"},
      {"recovery above its maximum", R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: http://h
health:
  circuit_breaker:
    recovery_timeout_ms: 5000
    max_recovery_timeout_ms: 1000
)", "t.yaml:9:5:", "max_recovery_timeout_ms must not be below recovery_timeout_ms"},
      {"YAML syntax error", R"(chains:
  eth: [1,
)", "t.yaml:", ""},
  };
  // clang-format on
  for (const auto& c : cases) {
    INFO(c.what);
    auto message = load_error(c.yaml);
    INFO(message);
    CHECK(starts_with(message, c.where));
    CHECK(message.find(c.message) != std::string::npos);
  }
}

TEST_CASE("missing required pieces are errors", "[config]") {
  CHECK(load_error("name: nothing\n").find("missing required key 'chains'") != std::string::npos);
  CHECK(load_error("- a\n- b\n").find("must be a mapping") != std::string::npos);
  CHECK(load_error("chains: {}\n").find("at least one chain") != std::string::npos);
  CHECK(load_error("chains:\n  eth:\n    providers:\n      - id: a\n        url: http://h\n")
            .find("needs a 'chain_id'") != std::string::npos);
  CHECK(load_error("chains:\n  eth:\n    chain_id: 1\n").find("needs a 'providers' list") !=
        std::string::npos);
  CHECK(
      load_error("chains:\n  eth:\n    chain_id: 1\n    providers: []\n").find("non-empty list") !=
      std::string::npos);
  CHECK(load_error("chains:\n  eth:\n    chain_id: 1\n    providers:\n      - url: http://h\n")
            .find("needs an 'id'") != std::string::npos);
  CHECK(load_error(provider_with({"timeout_ms: 5"})).find("needs a 'url'") != std::string::npos);
  CHECK(load_error(provider_with({"url: http://h", "id: b"})).find("duplicate key 'id'") !=
        std::string::npos);
  CHECK(load_error("chains:\n  eth:\n    chain_id: 1\n    providers:\n      - id: a b\n")
            .find("may only hold") != std::string::npos);
}

TEST_CASE("a quoted number is a string, not an integer", "[config]") {
  // DESIGN.md section 10: wrong types are errors. yaml-cpp's convert<int64_t> ignores the
  // quoting, so `chain_id: "1"` is accepted as 1 (profile.cpp opt_int).
  auto p = load_profile_text(R"(chains:
  eth:
    chain_id: "1"
    providers:
      - id: a
        url: http://h
)",
                             "t.yaml", kNoEnv);
  CHECK_FALSE(p.has_value());
  if (!p) CHECK(starts_with(p.error().message, "t.yaml:3:15: 'chain_id' must be an integer"));
}

TEST_CASE("${VAR} is substituted from the environment and kept as a secret", "[config]") {
  auto env =
      fake_env({{"ALCHEMY_KEY", "alc-secret-123"}, {"TEAM_TOKEN", "tok-456789"}, {"EMPTY", ""}});
  auto p = load_profile_text(R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: alchemy
        url: https://eth-mainnet.g.alchemy.com/v2/${ALCHEMY_KEY}
        headers: { X-Token: "${TEAM_TOKEN}", X-Empty: "a${EMPTY}b" }
)",
                             "t.yaml", env);
  REQUIRE(p.has_value());
  const auto& prov = p->chains[0].providers[0];
  CHECK(prov.url == "https://eth-mainnet.g.alchemy.com/v2/alc-secret-123");
  REQUIRE(prov.headers.size() == 2);
  CHECK(prov.headers[0].name == "X-Token");
  CHECK(prov.headers[0].value == "tok-456789");
  CHECK(prov.headers[1].value == "ab");
  auto has_secret = [&](const std::string& s) {
    return std::find(p->secrets.begin(), p->secrets.end(), s) != p->secrets.end();
  };
  CHECK(has_secret("alc-secret-123"));
  CHECK(has_secret("tok-456789"));
  CHECK_FALSE(has_secret(""));
  // The fingerprint is of the substituted URL but does not contain the key.
  CHECK(prov.fingerprint == url_fingerprint(prov.url));
  CHECK(prov.fingerprint.find("alc-secret") == std::string::npos);
}

TEST_CASE("an unset variable is an error naming it, never showing values", "[config]") {
  auto env = fake_env({{"HOST_KEY", "visible-secret-value"}});
  auto message = load_error(R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: a
        url: https://${HOST_KEY}.example.com/v2/${HOST_KEY}
      - id: b
        url: https://b.example.com/${HOST_KEY}/${MISSING_KEY}
)",
                            env);
  CHECK(starts_with(message, "t.yaml:8:14:"));
  CHECK(message.find("MISSING_KEY") != std::string::npos);
  CHECK(message.find("not set") != std::string::npos);
  CHECK(message.find("visible-secret-value") == std::string::npos);

  CHECK(load_error(provider_with({"url: http://h/${bad-name}"})).find("invalid variable name") !=
        std::string::npos);
  CHECK(load_error(provider_with({"url: http://h/${OPEN"})).find("unterminated") !=
        std::string::npos);
}

TEST_CASE("a bad URL error redacts the substituted secret", "[config]") {
  auto env = fake_env({{"KEY", "leaky-secret-999"}});
  auto message = load_error(provider_with({"url: ftp://h.example.com/${KEY}"}), env);
  CHECK(message.find("scheme must be http or https") != std::string::npos);
  CHECK(message.find("leaky-secret-999") == std::string::npos);
}

TEST_CASE("a bad URL error never shows a substituted value, even in the host",
          "[config]") {
  // check_url redacts path and query, but a ${VAR} in the host (or a port that makes the URL
  // invalid) is printed as substituted (profile.cpp check_url, the two `bad URL` messages).
  auto env = fake_env({{"K", "kval-secret-1234"}});
  auto ws = load_profile_text(provider_with({"url: http://h", "ws_url: ftp://${K}.example.com/"}),
                              "t.yaml", env);
  REQUIRE_FALSE(ws.has_value());
  CHECK(ws.error().message.find("scheme must be ws or wss") != std::string::npos);
  CHECK(ws.error().message.find("kval-secret-1234") == std::string::npos);

  auto port =
      load_profile_text(provider_with({"url: https://${K}.example.com:99999/"}), "t.yaml", env);
  REQUIRE_FALSE(port.has_value());
  CHECK(port.error().message.find("bad URL") != std::string::npos);
  CHECK(port.error().message.find("kval-secret-1234") == std::string::npos);
}

TEST_CASE("ws_url: from_url is the provider's URL on ws:// or wss://, its key included",
          "[config]") {
  auto env = fake_env({{"KEY", "Abcdef0123456789xyz"}});
  const auto ws_of = [&](std::string_view url) {
    auto p = load_profile_text(
        provider_with({fmt::format("url: {}", url), "ws_url: from_url"}), "t.yaml", env);
    REQUIRE(p.has_value());
    return p->chains.at(0).providers.at(0).ws_url;
  };
  CHECK(ws_of("https://eth.example.com/v2/${KEY}") == "wss://eth.example.com/v2/Abcdef0123456789xyz");
  CHECK(ws_of("http://127.0.0.1:8545") == "ws://127.0.0.1:8545");
  CHECK(ws_of("HTTPS://Node.example.com:8443/rpc?x=1") == "wss://Node.example.com:8443/rpc?x=1");
  // The key in the derived URL is as secret as in the HTTP one.
  auto p = load_profile_text(provider_with({"url: https://eth.example.com/v2/${KEY}",
                                            "ws_url: from_url"}),
                             "t.yaml", env);
  REQUIRE(p.has_value());
  CHECK(std::find(p->secrets.begin(), p->secrets.end(), "Abcdef0123456789xyz") != p->secrets.end());
  // Any other word is a URL, and not one.
  CHECK(load_error(provider_with({"url: http://h", "ws_url: from-url"})).find("bad URL") !=
        std::string::npos);
}

TEST_CASE("api_key goes into {api_key} in the URL, or else into an Authorization header",
          "[config]") {
  auto env = fake_env({{"INFURA_KEY", "inf-key-0001"}});
  SECTION("with {api_key} in the URL") {
    auto p = load_profile_text(R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: infura
        url: https://mainnet.infura.io/v3/{api_key}
        api_key: ${INFURA_KEY}
)",
                               "t.yaml", env);
    REQUIRE(p.has_value());
    const auto& prov = p->chains[0].providers[0];
    CHECK(prov.url == "https://mainnet.infura.io/v3/inf-key-0001");
    CHECK(prov.headers.empty());
    CHECK(std::find(p->secrets.begin(), p->secrets.end(), "inf-key-0001") != p->secrets.end());
  }
  SECTION("without {api_key}: a bearer header") {
    auto p = load_profile_text(R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: infura
        url: https://mainnet.infura.io/v3
        api_key: ${INFURA_KEY}
)",
                               "t.yaml", env);
    REQUIRE(p.has_value());
    const auto& prov = p->chains[0].providers[0];
    CHECK(prov.url == "https://mainnet.infura.io/v3");
    REQUIRE(prov.headers.size() == 1);
    CHECK(prov.headers[0].name == "Authorization");
    CHECK(prov.headers[0].value == "Bearer inf-key-0001");
    CHECK(std::find(p->secrets.begin(), p->secrets.end(), "inf-key-0001") != p->secrets.end());
  }
  SECTION("a literal api_key is a secret too") {
    auto p = load_profile_text(R"(chains:
  eth:
    chain_id: 1
    providers:
      - id: infura
        url: https://mainnet.infura.io/v3/{api_key}
        api_key: literal-key-77
)",
                               "t.yaml", env);
    REQUIRE(p.has_value());
    CHECK(p->chains[0].providers[0].url == "https://mainnet.infura.io/v3/literal-key-77");
    CHECK(std::find(p->secrets.begin(), p->secrets.end(), "literal-key-77") != p->secrets.end());
    CHECK(p->scrub(p->chains[0].providers[0].url) == "https://mainnet.infura.io/v3/***");
  }
}

TEST_CASE("redact_url keeps the origin and hides path, query and user info", "[config]") {
  CHECK(redact_url("https://eth-mainnet.g.alchemy.com/v2/KEY") ==
        "https://eth-mainnet.g.alchemy.com/***");
  CHECK(redact_url("https://rpc.example.com/?apikey=KEY") == "https://rpc.example.com/***");
  CHECK(redact_url("https://rpc.example.com?apikey=KEY") == "https://rpc.example.com/***");
  CHECK(redact_url("https://rpc.example.com#KEY") == "https://rpc.example.com/***");
  CHECK(redact_url("https://user:KEY@rpc.example.com:8443/path") ==
        "https://rpc.example.com:8443/***");
  CHECK(redact_url("https://user:KEY@rpc.example.com") == "https://rpc.example.com");
  CHECK(redact_url("http://127.0.0.1:8545") == "http://127.0.0.1:8545");
  CHECK(redact_url("http://127.0.0.1:8545/") == "http://127.0.0.1:8545");
  CHECK(redact_url("wss://ws.example.com/ws/KEY") == "wss://ws.example.com/***");
  CHECK(redact_url("not a url KEY") == "***");
  for (const char* url : {"https://h/v2/KEY", "https://u:KEY@h/", "https://h/?k=KEY", "KEY"}) {
    INFO(url);
    CHECK(redact_url(url).find("KEY") == std::string::npos);
  }
}

TEST_CASE("Profile::scrub replaces every secret of four characters or more", "[config]") {
  Profile p;
  p.secrets = {"abcd1234", "zz", "tok-xyz"};
  CHECK(p.scrub("GET https://h/v2/abcd1234?x=abcd1234") == "GET https://h/v2/***?x=***");
  CHECK(p.scrub("header tok-xyz; zz stays") == "header ***; zz stays");
  CHECK(p.scrub("nothing secret") == "nothing secret");
  CHECK(p.scrub("") == "");
  // A secret that contains "***" cannot loop forever.
  p.secrets = {"****"};
  CHECK(p.scrub("a****b") == "a***b");
}

TEST_CASE("find_chain by name or decimal chain id", "[config]") {
  auto p = load_profile_text(kValidProfile, "t.yaml", kNoEnv);
  REQUIRE(p.has_value());
  REQUIRE(p->find_chain("ethereum") != nullptr);
  CHECK(p->find_chain("ethereum")->chain_id == 1);
  CHECK(p->find_chain("1") == p->find_chain("ethereum"));
  REQUIRE(p->find_chain("11155111") != nullptr);
  CHECK(p->find_chain("11155111")->name == "sepolia");
  CHECK(p->find_chain("sepolia") == p->find_chain("11155111"));
  CHECK(p->find_chain("2") == nullptr);
  CHECK(p->find_chain("") == nullptr);
  CHECK(p->find_chain("0x1") == nullptr);
  CHECK(p->find_chain("Ethereum") == nullptr);
}

TEST_CASE("glob_match with * and ?", "[config]") {
  CHECK(glob_match("debug_*", "debug_traceTransaction"));
  CHECK(glob_match("debug_*", "debug_"));
  CHECK_FALSE(glob_match("debug_*", "eth_debug_x"));
  CHECK(glob_match("*", ""));
  CHECK(glob_match("*", "anything"));
  CHECK(glob_match("", ""));
  CHECK_FALSE(glob_match("", "x"));
  CHECK(glob_match("eth_get?alance", "eth_getBalance"));
  CHECK_FALSE(glob_match("eth_get?alance", "eth_getbbBalance"));
  CHECK(glob_match("eth_*Filter*", "eth_newBlockFilter"));
  CHECK(glob_match("eth_*Filter*", "eth_getFilterChanges"));
  CHECK_FALSE(glob_match("eth_*Filter*", "eth_getLogs"));
  CHECK(glob_match("*_call", "eth_call"));
  CHECK_FALSE(glob_match("*_call", "eth_callx"));
  CHECK(glob_match("a*b*c", "aXXbYYc"));
  CHECK_FALSE(glob_match("a*b*c", "aXXcYYb"));
  CHECK(glob_match("eth_call", "eth_call"));
  CHECK_FALSE(glob_match("eth_call", "eth_calls"));
  CHECK_FALSE(glob_match("eth_calls", "eth_call"));
}

TEST_CASE("MethodFilter: deny wins, an empty allow list allows all", "[config]") {
  MethodFilter open;
  CHECK(open.permits("eth_call"));
  CHECK(open.permits("debug_traceTransaction"));

  MethodFilter deny_only{{}, {"debug_*", "trace_*"}};
  CHECK(deny_only.permits("eth_call"));
  CHECK_FALSE(deny_only.permits("debug_traceTransaction"));
  CHECK_FALSE(deny_only.permits("trace_block"));

  MethodFilter allow_only{{"eth_*", "net_version"}, {}};
  CHECK(allow_only.permits("eth_getBalance"));
  CHECK(allow_only.permits("net_version"));
  CHECK_FALSE(allow_only.permits("web3_clientVersion"));

  MethodFilter both{{"eth_*"}, {"eth_sign*"}};
  CHECK(both.permits("eth_call"));
  CHECK_FALSE(both.permits("eth_sign"));
  CHECK_FALSE(both.permits("eth_signTransaction"));
  CHECK_FALSE(both.permits("debug_x"));
}

TEST_CASE("parse_strategy accepts snake_case and kebab-case", "[config]") {
  for (Strategy s : kAllStrategies) {
    auto name = std::string(strategy_name(s));
    INFO(name);
    CHECK(parse_strategy(name) == std::optional<Strategy>(s));
    auto kebab = name;
    std::replace(kebab.begin(), kebab.end(), '_', '-');
    CHECK(parse_strategy(kebab) == std::optional<Strategy>(s));
  }
  CHECK(parse_strategy("load-balanced") == std::optional<Strategy>(Strategy::load_balanced));
  CHECK(parse_strategy("latency-weighted") == std::optional<Strategy>(Strategy::latency_weighted));
  CHECK(parse_strategy("round-robin") == std::optional<Strategy>(Strategy::round_robin));
  CHECK_FALSE(parse_strategy("").has_value());
  CHECK_FALSE(parse_strategy("fastes").has_value());
  CHECK_FALSE(parse_strategy("Fastest").has_value());
  CHECK_FALSE(parse_strategy("load balanced").has_value());
}

TEST_CASE("url_fingerprint is short, stable and hex", "[config]") {
  auto a = url_fingerprint("https://h/v2/KEY1");
  CHECK(a == url_fingerprint("https://h/v2/KEY1"));
  CHECK(a != url_fingerprint("https://h/v2/KEY2"));
  CHECK(a.size() == 12);
  CHECK(std::all_of(a.begin(), a.end(),
                    [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }));
}

TEST_CASE("the embedded public profile loads with its six chains", "[config]") {
  auto text = embedded_profile("public");
  REQUIRE_FALSE(text.empty());
  CHECK(embedded_profile("no-such-profile").empty());

  TempDir home;
  auto env = fake_env({{"HOME", home.path().string()}});
  auto p = find_profile("public", env);
  REQUIRE(p.has_value());
  CHECK(p->name == "public");
  CHECK(p->source == "embedded");
  const std::pair<const char*, std::uint64_t> chains[] = {{"ethereum", 1},  {"sepolia", 11'155'111},
                                                          {"base", 8453},   {"arbitrum", 42161},
                                                          {"optimism", 10}, {"polygon", 137}};
  CHECK(p->chains.size() == std::size(chains));
  for (const auto& [name, id] : chains) {
    INFO(name);
    const Chain* c = p->find_chain(name);
    REQUIRE(c != nullptr);
    CHECK(c->chain_id == id);
    CHECK_FALSE(c->providers.empty());
    CHECK(p->find_chain(std::to_string(id)) == c);
    for (const auto& prov : c->providers) CHECK(prov.url.rfind("https://", 0) == 0);
  }
  CHECK(p->secrets.empty());
}

TEST_CASE("find_profile by path and by name on RPCROUTE_PROFILES", "[config]") {
  TempDir dir;
  const std::string yaml = "name: Team\n" + provider_with({"url: http://h"});
  write_file(dir / "files/mine.yaml", yaml);
  write_file(dir / "profiles/team.yaml", yaml);
  write_file(dir / "profiles/public.yaml", yaml);  // overrides the embedded one
  write_file(dir / "profiles/broken.yml", "chains: [\n");
  auto env = fake_env(
      {{"RPCROUTE_PROFILES", (dir / "profiles").string()}, {"HOME", (dir / "home").string()}});

  SECTION("a path") {
    auto path = (dir / "files/mine.yaml").string();
    auto p = find_profile(path, env);
    REQUIRE(p.has_value());
    CHECK(p->name == "mine");
    CHECK(p->title == "Team");
    CHECK(p->source == path);
  }
  SECTION("a missing path") {
    auto p = find_profile((dir / "files/absent.yaml").string(), env);
    REQUIRE_FALSE(p.has_value());
    CHECK(p.error().message.find("does not exist") != std::string::npos);
  }
  SECTION("a name on the search path") {
    auto p = find_profile("team", env);
    REQUIRE(p.has_value());
    CHECK(p->name == "team");
    CHECK(p->source == (dir / "profiles/team.yaml").string());
  }
  SECTION("a file on the search path overrides the embedded profile") {
    auto p = find_profile("public", env);
    REQUIRE(p.has_value());
    CHECK(p->source == (dir / "profiles/public.yaml").string());
    CHECK(p->chains.size() == 1);
  }
  SECTION("a broken profile reports its file") {
    auto p = find_profile("broken", env);
    REQUIRE_FALSE(p.has_value());
    CHECK(p.error().message.find((dir / "profiles/broken.yml").string() + ":") == 0);
  }
  SECTION("an unknown name") {
    auto p = find_profile("nope", env);
    REQUIRE_FALSE(p.has_value());
    CHECK(p.error().message.find("unknown profile 'nope'") != std::string::npos);
    CHECK(p.error().exit == ExitCode::usage);
  }
  SECTION("list_profiles: search path first, embedded public not repeated") {
    auto list = list_profiles(env);
    std::vector<std::string> names;
    for (const auto& l : list) names.push_back(l.name);
    CHECK(names == std::vector<std::string>{"broken", "public", "team"});
    CHECK(list[1].source == (dir / "profiles/public.yaml").string());
  }
}

TEST_CASE("profile_search_path order: RPCROUTE_PROFILES entries, then the config home",
          "[config]") {
  auto env = fake_env({{"RPCROUTE_PROFILES", "/a::/b"}, {"HOME", "/home/u"}});
  auto dirs = profile_search_path(env);
  REQUIRE(dirs.size() >= 3);
  CHECK(dirs[0] == "/a");
  CHECK(dirs[1] == "/b");
  CHECK(dirs[2] == "/home/u/.config/rpcroute/profiles");

  auto xdg = profile_search_path(fake_env({{"XDG_CONFIG_HOME", "/x"}, {"HOME", "/home/u"}}));
  REQUIRE_FALSE(xdg.empty());
  CHECK(xdg[0] == "/x/rpcroute/profiles");
}

TEST_CASE("load_profile_file reads a file and names the profile by its stem", "[config]") {
  TempDir dir;
  write_file(dir / "ops.yml", provider_with({"url: http://h"}));
  auto p = load_profile_file(dir / "ops.yml", kNoEnv);
  REQUIRE(p.has_value());
  CHECK(p->name == "ops");
  auto missing = load_profile_file(dir / "none.yml", kNoEnv);
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().message.find("cannot read profile") != std::string::npos);
}

TEST_CASE("load_profile_file refuses what is not a regular file: a FIFO does not hang, /dev/zero is not read",
          "[config][hostile]") {
  TempDir dir;
  const auto fifo = dir / "fifo.yaml";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto f = load_profile_file(fifo, kNoEnv);  // nobody writes to it: reading would block forever
  REQUIRE_FALSE(f.has_value());
  CHECK(f.error().message == fmt::format("profile {} is not a regular file", fifo.string()));
  auto z = load_profile_file("/dev/zero", kNoEnv);
  REQUIRE_FALSE(z.has_value());
  CHECK(z.error().message == "profile /dev/zero is not a regular file");
  auto d = load_profile_file(dir.path(), kNoEnv);
  REQUIRE_FALSE(d.has_value());
  CHECK(d.error().message.find("not a regular file") != std::string::npos);
  // By path through find_profile too.
  auto by_path = find_profile(fifo.string(), kNoEnv);
  REQUIRE_FALSE(by_path.has_value());
  CHECK(by_path.error().message.find("not a regular file") != std::string::npos);
}

TEST_CASE("a profile over 1 MiB is refused before it is parsed", "[config][hostile]") {
  TempDir dir;
  // Valid YAML all the way: a comment pads it past the bound.
  const std::string big = provider_with({"url: http://h"}) + "#" + std::string(kMaxProfileBytes, 'x') + "\n";
  write_file(dir / "big.yaml", big);
  auto p = load_profile_file(dir / "big.yaml", kNoEnv);
  REQUIRE_FALSE(p.has_value());
  CHECK(p.error().message == fmt::format("profile {} is larger than 1024 KiB", (dir / "big.yaml").string()));
  CHECK(load_error(big).find("at most 1024 KiB") != std::string::npos);
  // Just under the bound loads.
  const std::string fits = provider_with({"url: http://h"}) + "#" +
                           std::string(kMaxProfileBytes - provider_with({"url: http://h"}).size() - 2, 'x') + "\n";
  REQUIRE(fits.size() == kMaxProfileBytes);
  write_file(dir / "fits.yaml", fits);
  CHECK(load_profile_file(dir / "fits.yaml", kNoEnv).has_value());
}

TEST_CASE("aliases that expand past the bound are refused with file, line and column", "[config][hostile]") {
  // A billion laughs: ten levels of ten aliases each, 10^10 nodes once expanded, from 600 bytes.
  std::string laughs = "x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i <= 9; ++i) {
    laughs += fmt::format("x{}: &a{} [", i, i);
    for (int k = 0; k < 10; ++k) laughs += fmt::format("{}*a{}", k == 0 ? "" : ", ", i - 1);
    laughs += "]\n";
  }
  auto y = load_error(laughs);
  CHECK(y.starts_with("t.yaml:"));
  CHECK(y.find("more than 100000 nodes once aliases are expanded") != std::string::npos);
  // A long string quoted through aliases: 300 KiB of text, read 20 times, is 6 MiB.
  std::string wide = provider_with({"url: http://h", "methods: { allow: [*s, *s, *s, *s, *s, *s, *s, *s, *s, *s, "
                                                     "*s, *s, *s, *s, *s, *s, *s, *s, *s, *s] }"});
  wide = "s: &s " + std::string(300 * 1024, 'm') + "\n" + wide;
  auto w = load_error(wide);
  CHECK(w.find("more than 4 MiB of text once aliases are expanded") != std::string::npos);
  // A few aliases are fine.
  CHECK(load_profile_text(provider_with({"url: http://h", "methods: &m { deny: [\"debug_*\"] }"}) +
                              "      - { id: b, url: \"http://i\", methods: *m }\n",
                          "t.yaml", kNoEnv)
            .has_value());
}

TEST_CASE("nesting too deep is an error with file, line and column, not yaml-cpp's \"bad file\"",
          "[config][hostile]") {
  // Past yaml-cpp's own depth guard.
  auto deep = load_error("a: " + std::string(5000, '[') + std::string(5000, ']') + "\n");
  CHECK(deep.find("bad file") == std::string::npos);
  CHECK(deep.starts_with("t.yaml:1:"));
  CHECK(deep.find("nested more than 64 levels deep") != std::string::npos);
  // Within it, past ours.
  auto mid = load_error("a: " + std::string(100, '[') + std::string(100, ']') + "\n");
  CHECK(mid.find("t.yaml:1:") == 0);
  CHECK(mid.find("nested more than 64 levels deep") != std::string::npos);
}

TEST_CASE("url_credentials: key-looking path segments and query values, credential parameters, user info",
          "[config][secrets]") {
  using V = std::vector<std::string>;
  CHECK(url_credentials("https://eth-mainnet.g.alchemy.com/v2/Ab3dEfGh1jKlMn0pQrStUvWxYz012345") ==
        V{"Ab3dEfGh1jKlMn0pQrStUvWxYz012345"});
  CHECK(url_credentials("https://mainnet.infura.io/v3/0123456789abcdef0123456789abcdef?x=1") ==
        V{"0123456789abcdef0123456789abcdef"});
  CHECK(url_credentials("https://h/rpc?apikey=short1&chain=mainnet") == V{"short1"});
  CHECK(url_credentials("https://h/?access_token=tok%2Bvalue99") == V{"tok%2Bvalue99", "tok+value99"});
  CHECK(url_credentials("https://user:pw-1234@h/") == V{"pw-1234"});
  CHECK(url_credentials("https://KEYKEYKEY12@h") == V{"KEYKEYKEY12"});
  // Nothing that reads as a word: versions, chain names, an archive path.
  CHECK(url_credentials("https://1rpc.io/eth").empty());
  CHECK(url_credentials("https://h/v2/eth-mainnet-archive/rpc?chain=ethereum").empty());
  CHECK(url_credentials("http://127.0.0.1:8545").empty());
  CHECK(looks_like_credential("0123456789abcdef"));
  CHECK(looks_like_credential("AbcdefghIjklmnop"));
  CHECK_FALSE(looks_like_credential("abcdefghijklmnopqrstuvwxyz"));
  CHECK_FALSE(looks_like_credential("0123456789abcde"));  // 15
  CHECK(url_path_and_query("https://h/v2/KEY?x=1#frag") == "/v2/KEY?x=1");
  CHECK(url_path_and_query("https://h/").empty());
  CHECK(url_path_and_query("https://h").empty());
}

TEST_CASE("a key pasted into a URL is a secret: scrub() hides it wherever it is echoed", "[config][secrets]") {
  const std::string key = "Zq8RtW2xYb5vN7mK3pL9";
  auto p = load_profile_text(provider_with({fmt::format("url: https://h.example/v2/{}?apikey=qk-991&net=main", key)}) +
                                 "      - { id: b, url: \"https://i.example/rpc/eth\" }\n",
                             "t.yaml", kNoEnv);
  REQUIRE(p.has_value());
  CHECK(std::find(p->secrets.begin(), p->secrets.end(), key) != p->secrets.end());
  CHECK(std::find(p->secrets.begin(), p->secrets.end(), "qk-991") != p->secrets.end());
  CHECK(p->scrub(fmt::format("invalid key {} (apikey qk-991)", key)) == "invalid key *** (apikey ***)");
  CHECK(p->scrub(fmt::format("POST /v2/{}?apikey=qk-991&net=main 401", key)) ==
        "POST /v2/***?apikey=***&net=main 401");
  // A key that does not look like one is hidden with the whole path around it.
  auto q = load_profile_text(provider_with({"url: https://h.example/v1/shortkey"}), "t.yaml", kNoEnv);
  REQUIRE(q.has_value());
  CHECK(q->secrets.empty());
  CHECK(q->scrub("POST /v1/shortkey: 401") == "POST ***: 401");
  // A path without a key is only hidden where the whole of it is echoed: words stay words.
  CHECK(p->scrub("no route for /rpc/eth on eth") == "no route for *** on eth");
  CHECK(p->scrub("header not found on main") == "header not found on main");
}

namespace {

std::string tls_profile(std::string_view url, std::string_view tls_block) {
  return fmt::format(R"(chains:
  ethereum:
    chain_id: 1
    providers:
      - id: node
        url: {}
        tls:
{}
)",
                     url, tls_block);
}

}  // namespace

TEST_CASE("tls: paths are checked at load, relative ones taken from the profile's folder",
          "[config][tls]") {
  TempDir dir;
  write_file(dir / "certs/ca.pem", "ca");
  write_file(dir / "certs/client.pem", "cert");
  write_file(dir / "certs/client.key", "key");
  std::filesystem::create_directories(dir / "cas");
  const auto text = tls_profile("https://node.example:8545",
                                fmt::format("          ca_file: certs/ca.pem\n"
                                            "          ca_dir: {}\n"
                                            "          cert_file: certs/client.pem\n"
                                            "          key_file: ./certs/client.key",
                                            (dir / "cas").string()));
  write_file(dir / "p.yaml", text);
  auto p = load_profile_file(dir / "p.yaml", kNoEnv);
  REQUIRE(p);
  const auto& tls = p->chains[0].providers[0].tls;
  CHECK(tls.ca_file == (dir / "certs/ca.pem").string());
  CHECK(tls.ca_dir == (dir / "cas").string());
  CHECK(tls.cert_file == (dir / "certs/client.pem").string());
  CHECK(tls.key_file == (dir / "certs/client.key").string());
  CHECK_FALSE(tls.insecure);
  CHECK_FALSE(tls.empty());
  CHECK(p->warnings().empty());
}

TEST_CASE("shared_state.tls: rediss:// only, paths checked and resolved like a provider's",
          "[config][tls][shared]") {
  TempDir dir;
  write_file(dir / "certs/ca.pem", "ca");
  write_file(dir / "certs/client.pem", "cert");
  auto with = [](std::string_view url, std::string_view tls) {
    return fmt::format(R"(shared_state:
  redis: "{}"
  tls:
{}
chains:
  ethereum:
    chain_id: 1
    providers:
      - id: node
        url: http://127.0.0.1:8545
)",
                       url, tls);
  };
  write_file(dir / "p.yaml", with("rediss://10.0.0.5:6380/0",
                                  "    ca_file: certs/ca.pem\n    cert_file: certs/client.pem"));
  auto p = load_profile_file(dir / "p.yaml", kNoEnv);
  REQUIRE(p);
  CHECK(p->shared_state.tls.ca_file == (dir / "certs/ca.pem").string());
  CHECK(p->shared_state.tls.cert_file == (dir / "certs/client.pem").string());
  auto plain =
      load_profile_text(with("redis://10.0.0.5:6379/0", "    insecure: true"), "t.yaml", kNoEnv);
  REQUIRE_FALSE(plain);
  CHECK_THAT(plain.error().message, Catch::Contains("not rediss://"));
  auto missing = load_profile_text(
      with("rediss://10.0.0.5:6380/0", "    ca_file: " + (dir / "nope.pem").string()), "t.yaml",
      kNoEnv);
  REQUIRE_FALSE(missing);
  CHECK_THAT(missing.error().message, Catch::Contains("not a readable file"));
}

TEST_CASE("tls: what cannot work is a profile error naming it", "[config][tls]") {
  TempDir dir;
  write_file(dir / "ca.pem", "ca");
  const auto ca = (dir / "ca.pem").string();
  auto error_of = [&](std::string_view url, const std::string& block) {
    auto p = load_profile_text(tls_profile(url, block), "t.yaml", kNoEnv);
    REQUIRE_FALSE(p);
    return p.error().message;
  };
  CHECK_THAT(error_of("https://n.example", "          ca_file: " + (dir / "nope.pem").string()),
             Catch::Contains("ca_file") && Catch::Contains("nope.pem") &&
                 Catch::Contains("not a readable file"));
  CHECK_THAT(error_of("https://n.example", "          ca_dir: " + ca),
             Catch::Contains("not a readable folder"));
  CHECK_THAT(error_of("http://127.0.0.1:8545", "          ca_file: " + ca),
             Catch::Contains("not https://"));
  CHECK_THAT(error_of("http://127.0.0.1:8545\n        ws_url: ws://127.0.0.1:8546",
                      "          ca_file: " + ca),
             Catch::Contains("not https://") && Catch::Contains("not wss://"));
  // A wss:// ws_url alone takes tls: (it applies to both of the provider's URLs).
  const auto wss_only = load_profile_text(
      tls_profile("http://127.0.0.1:8545\n        ws_url: wss://127.0.0.1:8546",
                  "          ca_file: " + ca),
      "t.yaml", kNoEnv);
  REQUIRE(wss_only);
  CHECK(wss_only->chains.at(0).providers.at(0).tls.ca_file == ca);
  CHECK_THAT(error_of("https://n.example", "          ca_file: " + ca + "\n          insecure: true"),
             Catch::Contains("insecure"));
  CHECK_THAT(error_of("https://n.example", "          key_file: " + ca),
             Catch::Contains("'key_file' needs 'cert_file'"));
  CHECK_THAT(error_of("https://n.example", "          ca: " + ca), Catch::Contains("ca_file"));
  CHECK_THAT(error_of("https://n.example", "          ca_file: ''"), Catch::Contains("empty"));
}

TEST_CASE("tls: insecure is allowed, and warned about", "[config][tls]") {
  auto p = load_profile_text(tls_profile("https://n.example", "          insecure: true"), "t.yaml",
                             kNoEnv);
  REQUIRE(p);
  CHECK(p->chains[0].providers[0].tls.insecure);
  REQUIRE(p->warnings().size() == 1);
  CHECK_THAT(p->warnings()[0],
             Catch::Contains("'node'") && Catch::Contains("tls.insecure") &&
                 Catch::Contains("not checked"));
  auto plain = load_profile_text(kValidProfile, "t.yaml", kNoEnv);
  REQUIRE(plain);
  CHECK(plain->warnings().empty());
  CHECK(plain->chains[0].providers[0].tls.empty());
}

TEST_CASE("profile: http picks HTTP/1.1 (the default) or HTTP/2 per provider", "[config]") {
  auto version_of = [](std::string_view line) {
    auto p = load_profile_text(provider_with({"url: https://h.example", line}), "t.yaml", kNoEnv);
    REQUIRE(p.has_value());
    return p->chains.at(0).providers.at(0).http;
  };
  CHECK(version_of("weight: 1") == HttpVersion::http1_1);
  CHECK(version_of("http: \"1.1\"") == HttpVersion::http1_1);
  CHECK(version_of("http: 1.1") == HttpVersion::http1_1);
  CHECK(version_of("http: \"2\"") == HttpVersion::http2);
  CHECK(version_of("http: 2") == HttpVersion::http2);
  for (auto bad : {"http: 3", "http: \"1.0\"", "http: h2", "http: [2]"}) {
    INFO(bad);
    CHECK(load_error(provider_with({"url: https://h.example", bad})).find("'http'") != std::string::npos);
  }
}

TEST_CASE("provider URLs: what the URL check accepts and refuses", "[config]") {
  // yaml_reader.cpp url_scheme: the rules curl's URL parser applied before libcurl was loaded
  // lazily (no linking, so the profile check needs its own).
  for (const char* good :
       {"http://h", "HTTPS://Mainnet.Example.com/v3/abc?x=1#f", "http://127.0.0.1:8545",
        "http://[::1]:8545/", "https://user:pw@host.example.com/", "http://h:/",
        "https://eth-mainnet.g.alchemy.com/v2/a+b=c/{x}", "http://node_1.local~x:65535"}) {
    INFO(good);
    auto p =
        load_profile_text(provider_with({std::string("url: \"") + good + "\""}), "t.yaml", kNoEnv);
    CHECK(p.has_value());
  }
  for (const char* bad :
       {"http://", "http://:8545", "http:///path", "//h", "h:8545", "http://h:65536",
        "http://h:80x", "http://h:1:2", "http://a b/", "http://h/a b", "http://[::1",
        "http://[zz]/", "http://h$x/", "http://h+q=/", "1http://h", "ht tp://h"}) {
    INFO(bad);
    auto message = load_error(provider_with({std::string("url: \"") + bad + "\""}));
    CHECK(message.find("bad URL") != std::string::npos);
  }
}

}  // namespace unit_profile_test

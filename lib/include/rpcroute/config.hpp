#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rpcroute/error.hpp"

namespace rpcroute {

/// The seven routing strategies of DESIGN.md section 5.
enum class Strategy {
  load_balanced,
  round_robin,
  random,
  weighted,
  priority,
  fastest,
  latency_weighted,
};

inline constexpr Strategy kAllStrategies[] = {
    Strategy::load_balanced, Strategy::round_robin, Strategy::random,          Strategy::weighted,
    Strategy::priority,      Strategy::fastest,     Strategy::latency_weighted};

[[nodiscard]] std::string_view strategy_name(Strategy s);
/// Accepts snake_case and the URL's kebab-case ("load-balanced").
[[nodiscard]] std::optional<Strategy> parse_strategy(std::string_view name);

struct Quota {
  double rps = 0;
  double burst = 0;
};

struct ProviderLimits {
  std::optional<std::uint64_t> max_block_range;
  std::optional<std::size_t> max_batch;
  std::optional<std::uint64_t> max_response_bytes;  // limits.max_response_mb
};

/// allow/deny lists of method globs ("debug_*"). Deny wins; an empty allow list allows all.
struct MethodFilter {
  std::vector<std::string> allow;
  std::vector<std::string> deny;
  [[nodiscard]] bool permits(std::string_view method) const;
};

struct Header {
  std::string name;
  std::string value;
};

/// A provider's `tls:` (https:// only). Paths are absolute once the profile is loaded (relative
/// ones are taken from the profile's folder) and were readable then.
struct TlsOptions {
  std::string ca_file;    // trust exactly these CAs instead of the system store
  std::string ca_dir;     // a hashed CA folder (openssl rehash), with or instead of ca_file
  std::string cert_file;  // client certificate (mTLS); may hold the key too
  std::string key_file;   // its key, when not in cert_file
  bool insecure = false;  // no certificate or host name check: warned on every run

  [[nodiscard]] bool empty() const {
    return ca_file.empty() && ca_dir.empty() && cert_file.empty() && key_file.empty() && !insecure;
  }
};

/// The HTTP version asked of an https:// provider (profile `http: "1.1" | "2"`); plain http:// is
/// always HTTP/1.1. 1.1 by default: through curl an HTTP/2 request costs ~40% more instructions and
/// ~60% more system calls than one on a kept HTTP/1.1 connection (DECISIONS.md, transport).
enum class HttpVersion : std::uint8_t { http1_1, http2 };

/// A provider's `group:` backups are used only when no primary is usable (DECISIONS.md, groups).
enum class ProviderGroup : std::uint8_t { primary, backup };
[[nodiscard]] std::string_view group_name(ProviderGroup g);

/// How the sidecar may send a provider's single requests (profile `transport:`, issue 18): over
/// HTTP only (the default), preferring its WebSocket (`ws`: HTTP while the WebSocket's breaker is
/// open), or whichever the latency strategies measure faster (`auto`). One-shot commands and
/// batches always use HTTP.
enum class TransportMode : std::uint8_t { http, ws, automatic };
[[nodiscard]] std::string_view transport_mode_name(TransportMode m);

/// The way one attempt reaches a provider.
enum class TransportKind : std::uint8_t { http, ws };
[[nodiscard]] std::string_view transport_name(TransportKind k);

struct Provider {
  std::string id;
  std::string url;  // after ${VAR} substitution: may hold a secret, never print it (redact_url)
  std::string ws_url;
  std::vector<Header> headers;
  TlsOptions tls;
  HttpVersion http = HttpVersion::http1_1;
  ProviderGroup group = ProviderGroup::primary;
  TransportMode transport = TransportMode::http;  // needs ws_url unless http
  int priority = 0;  // defaults to the position in the profile, 1-based
  double weight = 1.0;
  std::optional<bool> archival;  // unset: unknown
  std::optional<Quota> rate_limit;
  MethodFilter methods;
  ProviderLimits limits;
  std::int64_t timeout_ms = 10'000;  // per attempt; see attempt_timeout_ms()
  bool timeout_set = false;          // given in the profile: then it wins over the method's default
  std::string fingerprint;           // short hash of the URL; keys state without storing the URL
};

/// Hedged reads (issue 19): when the first attempt of a replay-safe read has not answered after
/// that provider's `quantile` latency for the method (clamped to [min_ms, max_ms]), the next
/// candidate is asked too and the first good answer wins. Extra requests are capped at
/// `max_extra` of the hedgeable requests (a token bucket; see HedgeBudget).
struct HedgeConfig {
  bool enabled = true;  // `hedge: false` under a method override turns a chain's hedging off
  double quantile = 0.9;
  std::int64_t min_ms = 50;
  std::int64_t max_ms = 2'000;
  double max_extra = 0.1;
};

/// A chain's WebSocket subscriptions (issue 18; profile `websocket:` under the chain): after a
/// failover the blocks missed are fetched over HTTP, at most `max_backfill_blocks` of them within
/// `backfill_timeout_ms`; a serving socket with no newHeads for `stall_blocks` block times while
/// the chain's head moves elsewhere is treated as dropped.
struct WsChainConfig {
  std::uint64_t max_backfill_blocks = 128;
  std::int64_t backfill_timeout_ms = 10'000;
  std::int64_t stall_blocks = 3;
  /// A subscription whose provider went and that no provider takes again within this ends: its
  /// clients get a terminal error (issue 18).
  std::int64_t resubscribe_timeout_ms = 30'000;
};

struct Chain {
  std::string name;
  std::uint64_t chain_id = 0;
  std::int64_t block_time_ms = 12'000;
  std::uint64_t max_lag_blocks = 2;
  std::uint64_t archival_threshold = 128;
  std::int64_t lag_trip_ms = 30'000;
  std::optional<HedgeConfig> hedge;  // off unless the profile or `call --hedge` asks
  /// `rewrite_latest: true` (issue 19): a read's `latest` block tag is sent as the chain's
  /// high-water height, so that one client's consecutive reads never go backwards.
  bool rewrite_latest = false;
  WsChainConfig websocket;
  std::vector<Provider> providers;

  [[nodiscard]] const Provider* find_provider(std::string_view id) const;
};

struct MethodPolicy {
  std::optional<Strategy> strategy;
  std::vector<std::string> providers;  // restrict to these ids, in this order of preference
  std::optional<std::int64_t> timeout_ms;
  std::optional<std::uint64_t> max_response_bytes;  // max_response_mb: wins over the provider's
  bool broadcast = false;
  std::optional<HedgeConfig> hedge;  // wins over the chain's
  /// A `null` from a provider behind the height the lookup needs is retried on one at or past it
  /// (issue 19, `retry_empty: false` turns it off for the method).
  bool retry_empty = true;
};

struct MethodOverride {
  std::string pattern;  // method name or glob
  MethodPolicy policy;
};

struct Routing {
  Strategy default_strategy = Strategy::load_balanced;
  std::vector<MethodOverride> method_overrides;
  std::int64_t timeout_ms = 30'000;  // overall deadline of one request
  std::optional<int> max_attempts;
};

struct BreakerConfig {
  int failure_threshold = 5;
  std::int64_t recovery_timeout_ms = 30'000;
  std::int64_t max_recovery_timeout_ms = 600'000;
  int success_threshold = 2;
  int half_open_max_inflight = 1;
  double jitter = 0.05;  // fraction of the recovery timeout added at random
};

struct HealthConfig {
  BreakerConfig circuit_breaker;
  std::int64_t rate_limit_default_ms = 30'000;  // when a 429 says nothing about when to retry
};

struct FastestParams {
  std::int64_t window_ms = 300'000;
  int min_calls = 3;
  double min_success_rate = 0.9;
};

struct LatencyWeightedParams {
  std::int64_t window_ms = 300'000;
  double beta = 3.0;
  double ms_floor = 30.0;
  double explore_floor = 0.05;
  int min_calls = 3;
  double min_success_rate = 0.85;
};

struct StrategyParams {
  FastestParams fastest;
  LatencyWeightedParams latency_weighted;
};

/// `shared_state:` (issue 20): sidecars and commands on many hosts share what they learn through
/// Redis. Empty `redis`: the state file alone (the default).
struct SharedStateConfig {
  std::string redis;  // redis://[user[:password]@]host[:port][/db]; may hold a secret
  std::string prefix = "rpcroute:";
  std::string user;      // an ACL user (Redis 6+); else the URL's
  std::string password;  // usually ${ENV}; else the URL's
  TlsOptions tls;        // rediss:// only: as a provider's tls: (empty: the system CA store)
};

/// The sidecar's answer cache and coalescing of identical in-flight reads (issue 19; `cache:`).
struct CacheConfig {
  std::int64_t max_mb = 32;  // 0: no cache
  bool coalesce = true;
};

/// A loaded, validated, immutable profile.
struct Profile {
  std::string
      name;  // what it is looked up by: the file's stem or the embedded name; keys the state
  std::string title;  // the YAML's `name:`, for display
  std::string description;
  std::string source;  // file path, or "embedded"
  std::vector<Chain> chains;
  Routing routing;
  HealthConfig health;
  StrategyParams strategies;
  SharedStateConfig shared_state;
  CacheConfig cache;
  std::vector<std::string> secrets;  // substituted values; scrubbed from any text we print
  // Each provider URL's path and query ("/v2/KEY?x=1"): scrubbed too, as an upstream that echoes
  // its request line shows them whole, key-looking or not.
  std::vector<std::string> url_paths;

  /// By name or decimal chain id.
  [[nodiscard]] const Chain* find_chain(std::string_view name_or_id) const;
  /// The first override whose pattern matches, merged over defaults.
  [[nodiscard]] MethodPolicy policy_for(std::string_view method) const;
  /// Replaces every secret and URL path in `text` with "***".
  [[nodiscard]] std::string scrub(std::string text) const;
  /// What every command that loads the profile prints on stderr: settings that give up a
  /// guarantee (tls.insecure).
  [[nodiscard]] std::vector<std::string> warnings() const;
};

/// The per-attempt timeout a method gets when neither its override nor the provider sets one:
/// cheap reads 5 s, everything else 10 s, eth_call / eth_estimateGas / eth_getLogs and other heavy
/// reads 20 s, debug_* and trace_* 60 s.
[[nodiscard]] std::int64_t default_method_timeout_ms(std::string_view method);
/// The timeout of one attempt: the method override's, else the provider's when the profile sets
/// it, else the method's default.
[[nodiscard]] std::int64_t attempt_timeout_ms(std::string_view method, const Provider& provider,
                                              const MethodPolicy& policy);

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
[[nodiscard]] EnvLookup process_env();

/// Profiles are a few KiB; a bigger file is refused before it is parsed.
inline constexpr std::size_t kMaxProfileBytes = 1 << 20;

/// Parses and validates a profile. Errors read "source:line:column: message". Refused: more than
/// kMaxProfileBytes, nesting deeper than 64 levels, more than 100 000 nodes or 4 MiB of text once
/// aliases are expanded. A file must be a regular file.
[[nodiscard]] Result<Profile> load_profile_text(std::string_view yaml, const std::string& source,
                                                const EnvLookup& env = process_env());
[[nodiscard]] Result<Profile> load_profile_file(const std::filesystem::path& path,
                                                const EnvLookup& env = process_env());

/// Where a named profile is found.
struct ProfileLocation {
  std::string name;
  std::string source;  // path or "embedded"
};

/// The search path of DESIGN.md section 10, in order.
[[nodiscard]] std::vector<std::filesystem::path> profile_search_path(
    const EnvLookup& env = process_env());
/// Every profile found on the search path (first occurrence of a name wins) plus the embedded ones.
[[nodiscard]] std::vector<ProfileLocation> list_profiles(const EnvLookup& env = process_env());
/// A name is looked up on the search path; anything with a '/' or a .yaml/.yml suffix is a path.
[[nodiscard]] Result<Profile> find_profile(std::string_view name_or_path,
                                           const EnvLookup& env = process_env());

/// The YAML text of an embedded profile, or empty.
[[nodiscard]] std::string_view embedded_profile(std::string_view name);
inline constexpr std::string_view kDefaultProfile = "public";

/// Glob match with '*' and '?'.
[[nodiscard]] bool glob_match(std::string_view pattern, std::string_view text);

/// "https://eth-mainnet.g.alchemy.com/v2/KEY" -> "https://eth-mainnet.g.alchemy.com/***".
/// User info is dropped; a bare origin is shown as is.
[[nodiscard]] std::string redact_url(std::string_view url);

/// A URL path segment or query value that looks like a key: 16 characters or more of letters,
/// digits and -_.~+=%:, with a digit or both cases ("v2", "mainnet", "eth-mainnet-archive" do not).
[[nodiscard]] bool looks_like_credential(std::string_view text);
/// What of a URL is secret, as it may be echoed back (raw and percent-decoded): the user info, and
/// each path segment or query value that looks like a credential or whose parameter name says it
/// is one (apikey=, token=, ...). The loader adds them to Profile::secrets, so a key pasted into a
/// URL is scrubbed like one given as ${VAR}.
///   url_credentials("https://h/v2/abcdef0123456789xyz?apikey=k1") == {"abcdef0123456789xyz", "k1"}
[[nodiscard]] std::vector<std::string> url_credentials(std::string_view url);
/// "https://h/v2/KEY?x=1#f" -> "/v2/KEY?x=1"; empty for "https://h" and "https://h/".
[[nodiscard]] std::string url_path_and_query(std::string_view url);

/// Short, stable, non-reversible fingerprint of a URL (hex).
[[nodiscard]] std::string url_fingerprint(std::string_view url);

}  // namespace rpcroute

#pragma once
// Shared state through Redis (issue 20): the key layout, the values' text form, the merge rules
// that fold what other hosts learned into the local copy, and the Lua scripts that merge on the
// Redis side. Pure functions, unit-tested without a server (the scripts against a real one).
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "rpcroute/config.hpp"
#include "rpcroute/error.hpp"
#include "rpcroute/health/bucket.hpp"
#include "rpcroute/health/model.hpp"

namespace rpcroute::shared {

/// redis://[user[:password]@]host[:port][/db] (rediss:// is TLS).
struct RedisUrl {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string user;
  std::string password;
  bool tls = false;
};
[[nodiscard]] Result<RedisUrl> parse_redis_url(std::string_view url);
/// The URL as it may be shown: no user info, no password ("redis://127.0.0.1:6379/0").
[[nodiscard]] std::string display_url(const RedisUrl& url);

// Keys under a prefix ("rpcroute:" by default, so that one Redis serves several teams):
//   PREFIX p:PROVIDER_KEY   hash: bt b br (breaker), rl (rate-limited until), ht h (height),
//                           ct cv (an operator's cordon, `rpcroute cordon`), lt l (the learned
//                           eth_getLogs block-range limit: its time and blocks)
//   PREFIX q:PROVIDER_KEY   hash: tokens t (the quota bucket, leased out by kQuotaScript)
//   PREFIX qh:PROVIDER_KEY  sorted set: the hosts that leased from it, by Redis time (fair shares)
//   PREFIX c:CHAIN_KEY      hash: b t g (the high-water mark and its reset generation)
//   PREFIX f:FILTER_KEY     string "PROVIDER_ID T" (filter-id affinity)
//   PREFIX trial:PROVIDER_KEY  string: which host probes a half-open provider now
//   PREFIX l:PROVIDER_KEY:WINDOW  hash: latency summary of one time window (kLatencyScript):
//                           "METHOD:I" answered attempts in bucket I, "METHOD:x" unanswered ones
//   PREFIX ev               pub/sub channel: "b KEY" (breaker), "c KEY" (mark), "f KEY ID T"
[[nodiscard]] std::string provider_hash(std::string_view prefix, std::string_view provider_key);
[[nodiscard]] std::string quota_hash(std::string_view prefix, std::string_view provider_key);
[[nodiscard]] std::string quota_hosts(std::string_view prefix, std::string_view provider_key);
[[nodiscard]] std::string chain_hash(std::string_view prefix, std::string_view chain_key);
[[nodiscard]] std::string filter_string(std::string_view prefix, std::string_view filter_key);
[[nodiscard]] std::string trial_string(std::string_view prefix, std::string_view provider_key);
[[nodiscard]] std::string channel(std::string_view prefix);

// Time to live of each kind of key: nothing in Redis outlives its use.
inline constexpr std::int64_t kProviderTtlMs = 24LL * 3600 * 1000;
inline constexpr std::int64_t kChainTtlMs = 7LL * 24 * 3600 * 1000;
inline constexpr std::int64_t kFilterTtlMs = kFilterRetentionMs;
/// A bucket idle for this long is full again whatever it held: the key may go.
[[nodiscard]] std::int64_t quota_ttl_ms(const Quota& quota);

/// A breaker as shared: "STATE OPENED_MS RECOVERY_MS REOPENS" (state 0 closed, 1 open, 2
/// half-open). Counters are local (each host counts its own failures); the reason travels apart.
[[nodiscard]] std::string encode_breaker(const Breaker& b);
[[nodiscard]] bool decode_breaker(std::string_view text, Breaker& out);
/// "BLOCK T_MS".
[[nodiscard]] std::string encode_height(const Height& h);
[[nodiscard]] bool decode_height(std::string_view text, Height& out);

/// A cordon as shared, without its time (field ct): "ON UNTIL_MS REASON" (on 0 or 1, the reason to
/// the end, maybe empty).
[[nodiscard]] std::string encode_cordon(const Cordon& c);
[[nodiscard]] bool decode_cordon(std::string_view text, Cordon& out);

/// One provider's shared fields as read back (HMGET bt b br rl ht h ct cv lt l).
struct RemoteProvider {
  std::int64_t breaker_t = 0;  // when its last transition happened; 0: none shared
  Breaker breaker;
  std::int64_t rate_limited_until_ms = 0;
  Height height;
};

// Latency summaries per provider × method (issue 20): each host counts its attempts in fixed
// log-scale buckets per time window and adds the counts to the window's hash (kLatencyScript);
// every host reads the last kLatencyWindowsRead windows back into a SharedLatency per method.
// Bounded: methods outside the catalogue share one key (catalogue_slot()), a hash holds at most
// kMaxLatencyFields fields (further methods fold into "other"), and it expires after
// kLatencyTtlMs.
inline constexpr std::int64_t kLatencyWindowMs = 60'000;
inline constexpr int kLatencyWindowsRead = 5;  // the current window and the four before it
inline constexpr std::int64_t kLatencyTtlMs = (kLatencyWindowsRead + 1) * kLatencyWindowMs;
/// Bucket 0: under 100 µs; bucket i: [100 µs × 2^((i-1)/2), 100 µs × 2^(i/2)); the last: from
/// ~52 s on. A bucket's middle is within 19 % of any latency in it.
inline constexpr int kLatencyBuckets = 40;
inline constexpr std::int64_t kLatencyMaxFields = 16 * (kLatencyBuckets + 1);

[[nodiscard]] std::string latency_hash(std::string_view prefix, std::string_view provider_key,
                                       std::int64_t window);
[[nodiscard]] int latency_bucket(std::int64_t latency_us);
/// The geometric middle of a bucket, in ms.
[[nodiscard]] double latency_bucket_ms(int bucket);

/// The counts of one method in one or more windows.
struct LatencyCounts {
  std::array<std::uint32_t, kLatencyBuckets> answered{};
  std::uint32_t failed = 0;  // attempts the provider did not answer
  std::int64_t newest_ms = 0;

  void add(const Sample& s);
  [[nodiscard]] bool empty() const;
};
/// "METHOD:I" for bucket I, "METHOD:x" for failures (bucket -1).
[[nodiscard]] std::string latency_field(std::string_view method, int bucket);
/// A field read back: its method (a catalogue method or "other") and bucket (-1: failures). False
/// for anything else (a field this version does not know is ignored).
[[nodiscard]] bool parse_latency_field(std::string_view field, std::string_view& method,
                                       int& bucket);
/// Adds a count read back to `into`, at most kMaxMethodsPerProvider methods (others are ignored).
void add_latency_count(std::map<std::string, LatencyCounts, std::less<>>& into,
                       std::string_view field, std::string_view count, std::int64_t window_end_ms);
/// The summary of the counts: calls, answered, the median bucket's middle.
[[nodiscard]] SharedLatency summarize_counts(const LatencyCounts& c);

// Merge rules: what another host learned replaces the local copy only when it is newer (breaker
// transitions, heights) or larger (rate-limit deadlines, the high-water mark). Each returns whether
// the local copy changed.

/// Adopts the remote breaker when its transition is newer than the last one known here
/// (`known_t`, updated). The local failure counts start again: they belong to the old state.
bool adopt_breaker(Breaker& local, std::int64_t& known_t, const Breaker& remote,
                   std::int64_t remote_t);
/// The later deadline.
bool adopt_rate_limit(std::int64_t& local, std::int64_t remote);
/// The newer observation (as apply_event's HeightEvent).
bool adopt_height(Height& local, const Height& remote);
/// The newer statement of a provider's eth_getLogs range limit (at the same time, the smaller).
bool adopt_log_limit(LogLimit& local, const LogLimit& remote);
/// The high-water mark: raised to a higher remote mark; replaced, even by a lower one, when the
/// remote generation is newer (a host reset it: the chain restarted). `known_gen` is updated.
bool adopt_high_water(Height& local, std::uint64_t& known_gen, const Height& remote,
                      std::uint64_t remote_gen);
/// The local bucket after a draw answered by kQuotaScript: the shared level minus what this host
/// drew since it sent the draw, never below -burst (as apply_event's QuotaEvent).
[[nodiscard]] Bucket adopt_bucket(double remote_tokens, std::int64_t remote_t, double drawn_since,
                                  const Quota& quota);

// Quota leases (issue 20): every host takes tokens out of the shared bucket in small batches (one
// EVALSHA of kQuotaScript, Redis's own clock) and spends only the tokens it holds, so that N hosts
// together spend at most what the one bucket grants: burst + rps × seconds. A lease is sized to
// the host's own recent use over one refresh interval, at least 1 token, at most a fair share of
// burst (burst / the hosts seen asking); a host that runs low asks again at once.

/// Tokens a host asks to hold: its spend rate over one refresh interval, rounded up, within
/// [1, max(1, floor(burst / hosts))].
[[nodiscard]] int lease_target(double rate_per_s, std::int64_t refresh_ms, const Quota& quota,
                               int hosts);
/// What a host holding `held` tokens (negative: a batch overdrew it) says to Redis: ask for the
/// tokens up to `target` when it holds less than half of it (or under 1), give back whole tokens
/// above it (its use fell).
struct LeaseAsk {
  double ask = 0;
  double give_back = 0;
};
[[nodiscard]] LeaseAsk lease_ask(double held, int target);
/// The spend rate (tokens/s) after `spent` tokens in `seconds`: an average that halves the
/// weight of the past each interval.
[[nodiscard]] double spend_rate(double previous, double spent, double seconds);
/// How long a lease lasts without word from Redis; after that the tokens left are the local
/// bucket's, refilling on their own (the fallback when Redis goes away unnoticed).
[[nodiscard]] std::int64_t lease_ttl_ms(std::int64_t refresh_ms);
/// The local bucket of a host holding a lease: `held` tokens (floored at -burst, capped at burst)
/// that do not refill before `until_ms` (bucket_level() refills from t_ms on).
[[nodiscard]] Bucket lease_bucket(double held, std::int64_t until_ms, const Quota& quota);
/// One lease round on the shared bucket, kQuotaScript's arithmetic: refill to `now_ms` (never
/// backwards), add what is given back (capped at burst), take what was spent outside any lease
/// (floored at -burst), then grant min(ask, whole tokens available), maybe 0. `wait_ms`: until the
/// bucket holds a whole token again (0 when it does).
struct LeaseGrant {
  double granted = 0;
  double level = 0;
  std::int64_t wait_ms = 0;
};
[[nodiscard]] LeaseGrant grant_lease(Bucket& shared, std::int64_t now_ms, double take, double ask,
                                     double give_back, const Quota& quota);
/// The wait of a bucket that never refills (rps 0).
inline constexpr std::int64_t kNoRefillWaitMs = 86'400'000;
/// A host counts towards the fair shares while it leased within this time.
inline constexpr std::int64_t kLeaseHostsWindowMs = 5'000;

// The Lua scripts (run with EVALSHA after SCRIPT LOAD at connect). Numbers travel as decimal text.

/// KEYS[1] quota hash, KEYS[2] its hosts' sorted set; ARGV take ask give_back rps burst ttl_ms
/// host window_ms. One lease round as grant_lease() on Redis's clock (TIME: no host clock goes in);
/// a non-empty host is recorded in the set (those older than window_ms leave it). Returns {granted,
/// level, hosts, wait_ms} as text.
extern const std::string_view kQuotaScript;
/// KEYS[1] provider hash; ARGV ttl_ms bt b br rl ht h ct cv lt l (empty: not sent). Breaker,
/// height, cordon and log limit: the newer wins; rl: the larger. Returns 1.
extern const std::string_view kProviderScript;
/// KEYS[1] latency hash; ARGV ttl_ms max_fields, then FIELD COUNT pairs: HINCRBY each, a field
/// that would make more than max_fields folds into "other:BUCKET". Returns the field count.
extern const std::string_view kLatencyScript;
/// KEYS[1] chain hash; ARGV block t reset ttl_ms. Raises the mark; a reset replaces it and bumps
/// the generation. Returns {block, t, generation}.
extern const std::string_view kHighWaterScript;

}  // namespace rpcroute::shared

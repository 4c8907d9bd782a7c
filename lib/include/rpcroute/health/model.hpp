#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "rpcroute/config.hpp"
#include "rpcroute/health/breaker.hpp"
#include "rpcroute/health/bucket.hpp"
#include "rpcroute/outcome.hpp"

namespace rpcroute {

// What rpcroute knows about providers, chains and filters (DESIGN.md section 9), the events that
// change it, and how they apply. Stores (the state file, later Redis) hold and share it.

inline constexpr std::size_t kMaxSamplesPerMethod = 128;
inline constexpr std::int64_t kSampleRetentionMs = 24LL * 3600 * 1000;
inline constexpr std::int64_t kProviderRetentionMs = 30LL * 24 * 3600 * 1000;
inline constexpr std::int64_t kFilterRetentionMs = 15LL * 60 * 1000;

// Bounds on what clients and upstreams can make the state file hold (issue 14, item 13): method
// names become keys only when they look like one, and only so many per provider; filter pins are
// short printable keys, and only so many; upstream text is cut short.
inline constexpr std::size_t kMaxMethodNameBytes = 64;
inline constexpr std::size_t kMaxMethodsPerProvider = 64;
inline constexpr std::string_view kOtherMethod = "other";  // where every other method's samples go
/// Samples taken over a provider's WebSocket are kept apart from its HTTP ones, under the method
/// with this suffix ("eth_call@ws", "other@ws"); HTTP samples keep the bare method (older files
/// read as they are).
inline constexpr std::string_view kWsSuffix = "@ws";
inline constexpr std::string_view kOtherWsMethod = "other@ws";
inline constexpr std::size_t kMaxFilterKeyBytes = 256;
inline constexpr std::size_t kMaxFilters = 4096;
inline constexpr std::size_t kMaxTextBytes = 256;  // client_version, breaker reasons

/// One latency sample of one method on one provider.
struct Sample {
  std::int64_t t_ms = 0;
  std::int64_t latency_us = 0;
  Outcome outcome = Outcome::success;
};

struct Height {
  std::uint64_t block = 0;
  std::int64_t t_ms = 0;
};

/// What the last probe found about a provider (DESIGN.md section 8).
struct ProbeFindings {
  std::int64_t t_ms = 0;         // 0: never probed
  std::uint64_t chain_id = 0;    // 0: unknown
  std::optional<bool> archival;  // state at an early block readable
  std::optional<bool> batch;     // answers JSON-RPC batches
  std::optional<bool> syncing;
  std::string client_version;
};

/// Since when a provider has been seen lagging beyond tolerance (0: it is not), as of t_ms (the
/// time of the height it judged), and by how many blocks then. The judgement stands while that
/// height is fresh and no newer one of the provider came.
struct LagMark {
  std::int64_t behind_since_ms = 0;
  std::int64_t t_ms = 0;
  std::uint64_t blocks = 0;
};

/// Whether a provider serves old state, as learned from answers (not from configuration or probe).
struct ArchivalSeen {
  std::optional<bool> archival;
  std::int64_t t_ms = 0;
};

/// The widest eth_getLogs block range a provider accepts, as its own error message stated it
/// (issue 19: "up to a 2000 block range"); the router splits wider ranges up front. The newest
/// statement wins (a provider may raise or lower its limit). blocks 0: none learned.
struct LogLimit {
  std::uint64_t blocks = 0;
  std::int64_t t_ms = 0;
};

/// An operator took the provider out of routing (`rpcroute cordon`), or put it back. A lifted one
/// is kept too: processes merge cordons by time, the newest word wins (newer_cordon()), so a cordon
/// replayed after a later uncordon never comes back.
struct Cordon {
  std::int64_t t_ms = 0;  // when it was set or lifted; 0: never
  bool on = false;
  std::int64_t until_ms = 0;  // 0: until lifted
  std::string reason;         // clean_cordon_reason()

  [[nodiscard]] bool active(std::int64_t now_ms) const {
    return on && (until_ms == 0 || until_ms > now_ms);
  }
};
inline constexpr std::size_t kMaxCordonReasonBytes = 200;
/// A lifted or expired cordon is forgotten after this long (a late replay older than it is lost).
inline constexpr std::int64_t kCordonMemoryMs = 24LL * 3600 * 1000;

/// Whether `a` wins over `b` when they merge: the later one; at the same millisecond a cordon over
/// a lift, then the later expiry, then the greater reason (a total order: merging commutes).
[[nodiscard]] bool newer_cordon(const Cordon& a, const Cordon& b);
/// An operator's reason as it may be stored and shown: control characters dropped, valid UTF-8,
/// at most kMaxCordonReasonBytes (cut at a character boundary).
[[nodiscard]] std::string clean_cordon_reason(std::string_view reason);

/// What all hosts on one Redis measured of one method on one provider over the last few minutes
/// (issue 20: a summary of fixed latency buckets per time window, not the samples): a prior for
/// ranking where this host has few samples of its own (with_prior(), metrics.hpp).
struct SharedLatency {
  int calls = 0;      // attempts in the windows read
  int answered = 0;   // of which the provider answered
  double p50_ms = 0;  // median latency of the answered ones (a bucket's middle); 0 without any
  std::int64_t newest_ms = 0;  // the end of the newest window with data
};

struct ProviderState {
  std::string profile;
  std::string chain;
  std::string provider;
  std::string fingerprint;
  Breaker breaker;  // the provider's: HTTP exchanges (and probes) drive it
  /// Its WebSocket's, for single requests the sidecar sends over it (transport: ws | auto): a
  /// failing socket sends them back to HTTP without shutting the provider out.
  Breaker ws_breaker;
  std::int64_t rate_limited_until_ms = 0;
  Height height;
  std::int64_t last_used_ms = 0;
  // The last exchange that succeeded and the last that failed as the provider's fault: what
  // /healthz judges liveness by (its last word, and how recent a success vouches for it).
  std::int64_t last_ok_ms = 0;
  std::int64_t last_failed_ms = 0;
  ProbeFindings probe;
  Bucket quota;
  LagMark lag;
  ArchivalSeen archival_seen;
  LogLimit log_limit;
  Cordon cordon;
  std::map<std::string, std::deque<Sample>, std::less<>> methods;  // newest last
  // Read from Redis (shared state): keyed by catalogue_slot(); never in the state file.
  std::map<std::string, SharedLatency, std::less<>> shared_latency;

  [[nodiscard]] bool rate_limited(std::int64_t now_ms) const {
    return rate_limited_until_ms > now_ms;
  }
};

struct ChainState {
  Height high_water;
  std::uint64_t rr_cursor = 0;
  // The highest `safe` and `finalized` blocks a provider has reported (the head poller asks; t_ms
  // 0: none yet), never above that provider's head: the cache keeps numbered reads at or below
  // `finalized`.
  Height safe;
  Height finalized;
};

struct FilterPin {
  std::string provider;
  std::int64_t t_ms = 0;
};

struct State {
  std::map<std::string, ProviderState, std::less<>> providers;  // provider_key()
  std::map<std::string, ChainState, std::less<>> chains;        // chain_key()
  std::map<std::string, FilterPin, std::less<>> filters;        // filter_key()
};

[[nodiscard]] std::string provider_key(std::string_view profile, std::string_view chain,
                                       const Provider& p);
/// provider_key() written into `out` (replacing its contents): lookups reuse one buffer.
void provider_key_into(std::string& out, std::string_view profile, std::string_view chain,
                       const Provider& p);
/// "profile/chain#CHAIN_ID:DIGEST": chain state (high-water mark, cursor) belongs to the chain id
/// and the set of provider URLs (a digest of their fingerprints), not to a file name; a profile
/// whose chain id or providers change starts afresh, and its old entry is pruned.
[[nodiscard]] std::string chain_key(std::string_view profile, const Chain& chain);
/// chain_key() + "/" + the filter id in lower case.
[[nodiscard]] std::string filter_key(std::string_view profile, const Chain& chain,
                                     std::string_view filter_id);

/// Whether `method` has the shape of a JSON-RPC method name: ASCII "namespace_name" of at most
/// kMaxMethodNameBytes ("eth_getLogs", "debug_traceCall", "anvil_mine").
[[nodiscard]] bool known_shaped_method(std::string_view method);
/// The key under which a sample of `method` is kept among `methods`: the method itself when it is
/// known-shaped and there is room (kMaxMethodsPerProvider), else kOtherMethod. A WebSocket sample's
/// method ("eth_call@ws") is judged by its method and falls back to kOtherWsMethod.
[[nodiscard]] std::string_view method_slot(
    const std::map<std::string, std::deque<Sample>, std::less<>>& methods, std::string_view method);
/// The samples key of `method` sent over `transport`: the method itself over HTTP, the method with
/// kWsSuffix over WebSocket (method_slot() bounds both alike).
[[nodiscard]] std::string sample_method(std::string_view method, TransportKind transport);
/// The key under which a method's latency is shared between hosts: the method when the catalogue
/// (methods.hpp) knows it, else kOtherMethod. A finite set, whatever clients send.
[[nodiscard]] std::string_view catalogue_slot(std::string_view method);
/// Whether a filter key may be stored: at most kMaxFilterKeyBytes of valid UTF-8, no control
/// characters.
[[nodiscard]] bool storable_filter_key(std::string_view key);
/// Whether `s` is valid UTF-8 (what simdjson accepts).
[[nodiscard]] bool is_utf8(std::string_view s);
/// At most kMaxTextBytes of `s`, cut at a character boundary.
[[nodiscard]] std::string_view clip(std::string_view s);
/// `text` as valid UTF-8: each byte that is not part of a valid sequence becomes U+FFFD.
[[nodiscard]] std::string valid_utf8(std::string_view text);

// Changes are recorded as events. They are applied to the live state at once and, when the state
// is saved, replayed onto whatever the file holds by then: that is how concurrent writers merge.

/// One exchange with a provider: drives the breaker and the rate-limit mark.
struct AttemptEvent {
  std::string key;
  std::int64_t t_ms = 0;
  OutcomeClass cls = OutcomeClass::success;
  std::string reason;
  std::int64_t retry_after_ms = -1;  // for rate limits; -1 means the default
  double jitter = 0;                 // in [0, 1): drawn once so that replay opens the same way
  bool trip = false;   // open the breaker now, whatever the count (lag beyond lag_trip_ms)
  bool trial = false;  // sent while the breaker was open (a recovery probe or trial request)
  bool ws = false;     // over the provider's WebSocket: drives ws_breaker, not breaker
};
struct SampleEvent {
  std::string key;
  std::string method;
  Sample sample;
};
struct HeightEvent {
  std::string key;
  Height height;
};
struct HighWaterEvent {
  std::string chain_key;
  Height height;
  bool reset = false;  // replace the mark even when lower (it went stale: a restarted chain)
};
/// A chain's `safe` and `finalized` blocks as its providers reported them (block 0 with t_ms 0:
/// that tag was not answered), and the chain's believed head then (judge_finality): a mark above it
/// is not believed, and one already kept above it is dropped.
struct FinalityEvent {
  std::string chain_key;
  Height safe;
  Height finalized;
  std::uint64_t head = 0;
};
struct CursorEvent {
  std::string chain_key;
  std::uint64_t advance = 1;
};
struct FilterEvent {
  std::string key;
  FilterPin pin;
};
struct ProbeEvent {
  std::string key;
  ProbeFindings findings;
};
/// Tokens drawn from a provider's quota bucket.
struct QuotaEvent {
  std::string key;
  std::int64_t t_ms = 0;
  double taken = 1;
  Quota quota;
};
/// A lag judgement on a new height observation.
struct LagEvent {
  std::string key;
  LagMark mark;
};
/// An answer showed the provider does (or does not) serve old state.
struct ArchivalEvent {
  std::string key;
  ArchivalSeen seen;
};
/// A provider's error stated its eth_getLogs block range limit.
struct LogLimitEvent {
  std::string key;
  LogLimit limit;
};
/// An operator cordoned or uncordoned the provider.
struct CordonEvent {
  std::string key;
  Cordon cordon;
};
using Event = std::variant<AttemptEvent, SampleEvent, HeightEvent, HighWaterEvent, CursorEvent,
                           FilterEvent, ProbeEvent, QuotaEvent, LagEvent, ArchivalEvent,
                           CordonEvent, FinalityEvent, LogLimitEvent>;

/// Applies one event; entries are created from their keys when missing. `health` decides breaker
/// thresholds.
void apply_event(State& state, const Event& event, const HealthConfig& health);

/// Drops old samples, filters and providers not seen for long.
void prune(State& state, std::int64_t now_ms);

}  // namespace rpcroute

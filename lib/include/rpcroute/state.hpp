#pragma once
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "rpcroute/clock.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/error.hpp"
#include "rpcroute/outcome.hpp"

namespace rpcroute {

inline constexpr int kStateVersion = 1;
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
inline constexpr std::size_t kMaxFilterKeyBytes = 256;
inline constexpr std::size_t kMaxFilters = 4096;
inline constexpr std::size_t kMaxTextBytes = 256;  // client_version, breaker reasons

/// A writer gives up saving after this long without any other writer finishing (it waits at most
/// kLockGiveUpMs in all): a lock held by a stopped process must not hold up a command.
inline constexpr std::int64_t kLockStallMs = 2'000;
inline constexpr std::int64_t kLockGiveUpMs = 30'000;

/// One latency sample of one method on one provider.
struct Sample {
  std::int64_t t_ms = 0;
  std::int64_t latency_us = 0;
  Outcome outcome = Outcome::success;
};

enum class BreakerState { closed, open, half_open };
[[nodiscard]] std::string_view breaker_state_name(BreakerState s);

/// Circuit breaker of DESIGN.md section 6, stored as data so that other processes can continue it.
struct Breaker {
  BreakerState state = BreakerState::closed;  // as last written; see effective_state()
  int failures = 0;    // consecutive provider-health failures while closed
  int successes = 0;   // consecutive successes while half-open
  int reopens = 0;     // how often it reopened from half-open (doubles the recovery timeout)
  std::int64_t opened_ms = 0;
  std::int64_t recovery_ms = 0;  // with jitter, fixed when it opened
  std::string reason;            // last failure that counted

  /// Open turns half-open once the recovery timeout has passed.
  [[nodiscard]] BreakerState effective_state(std::int64_t now_ms) const;
  /// Milliseconds until an open breaker half-opens (0 when not open).
  [[nodiscard]] std::int64_t retry_in_ms(std::int64_t now_ms) const;
};

struct Height {
  std::uint64_t block = 0;
  std::int64_t t_ms = 0;
};

/// What the last probe found about a provider (DESIGN.md section 8).
struct ProbeFindings {
  std::int64_t t_ms = 0;          // 0: never probed
  std::uint64_t chain_id = 0;     // 0: unknown
  std::optional<bool> archival;   // state at an early block readable
  std::optional<bool> batch;      // answers JSON-RPC batches
  std::optional<bool> syncing;
  std::string client_version;
};

/// A quota token bucket (DESIGN.md section 6) as data, so that processes share it. t_ms 0: never
/// drawn from, i.e. full.
struct Bucket {
  double tokens = 0;
  std::int64_t t_ms = 0;
};

/// Tokens in a bucket at `now_ms`: refilled at `quota.rps` up to `quota.burst`. May be negative when
/// several processes overdrew it; it then refills from below zero.
[[nodiscard]] double bucket_level(const Bucket& b, const Quota& quota, std::int64_t now_ms);
/// Milliseconds until the bucket holds a whole token (0 when it does).
[[nodiscard]] std::int64_t bucket_wait_ms(const Bucket& b, const Quota& quota, std::int64_t now_ms);

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

struct ProviderState {
  std::string profile;
  std::string chain;
  std::string provider;
  std::string fingerprint;
  Breaker breaker;
  std::int64_t rate_limited_until_ms = 0;
  Height height;
  std::int64_t last_used_ms = 0;
  ProbeFindings probe;
  Bucket quota;
  LagMark lag;
  ArchivalSeen archival_seen;
  std::map<std::string, std::deque<Sample>, std::less<>> methods;  // newest last

  [[nodiscard]] bool rate_limited(std::int64_t now_ms) const { return rate_limited_until_ms > now_ms; }
};

struct ChainState {
  Height high_water;
  std::uint64_t rr_cursor = 0;
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

[[nodiscard]] std::string provider_key(std::string_view profile, std::string_view chain, const Provider& p);
/// provider_key() written into `out` (replacing its contents): lookups reuse one buffer.
void provider_key_into(std::string& out, std::string_view profile, std::string_view chain, const Provider& p);
/// "profile/chain#CHAIN_ID:DIGEST": chain state (high-water mark, cursor) belongs to the chain id and
/// the set of provider URLs (a digest of their fingerprints), not to a file name; a profile whose
/// chain id or providers change starts afresh, and its old entry is pruned.
[[nodiscard]] std::string chain_key(std::string_view profile, const Chain& chain);
/// chain_key() + "/" + the filter id in lower case.
[[nodiscard]] std::string filter_key(std::string_view profile, const Chain& chain, std::string_view filter_id);

/// Whether `method` has the shape of a JSON-RPC method name: ASCII "namespace_name" of at most
/// kMaxMethodNameBytes ("eth_getLogs", "debug_traceCall", "anvil_mine").
[[nodiscard]] bool known_shaped_method(std::string_view method);
/// The key under which a sample of `method` is kept among `methods`: the method itself when it is
/// known-shaped and there is room (kMaxMethodsPerProvider), else kOtherMethod.
[[nodiscard]] std::string_view method_slot(const std::map<std::string, std::deque<Sample>, std::less<>>& methods,
                                           std::string_view method);
/// Whether a filter key may be stored: at most kMaxFilterKeyBytes of valid UTF-8, no control characters.
[[nodiscard]] bool storable_filter_key(std::string_view key);
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
  bool trip = false;                 // open the breaker now, whatever the count (lag beyond lag_trip_ms)
  bool trial = false;                // sent while the breaker was open (a recovery probe or trial request)
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
using Event = std::variant<AttemptEvent, SampleEvent, HeightEvent, HighWaterEvent, CursorEvent, FilterEvent, ProbeEvent,
                           QuotaEvent, LagEvent, ArchivalEvent>;

/// Applies one event; entries are created from their keys when missing. `health` decides breaker
/// thresholds.
void apply_event(State& state, const Event& event, const HealthConfig& health);

/// The breaker transition for one exchange (pure; unit-tested without a state file).
void breaker_on_outcome(Breaker& b, OutcomeClass cls, std::int64_t t_ms, std::string_view reason,
                        const BreakerConfig& cfg, double jitter);

/// Opens the breaker at once (a provider lagging longer than lag_trip_ms); reopens a half-open one.
void breaker_trip(Breaker& b, std::int64_t t_ms, std::string_view reason, const BreakerConfig& cfg, double jitter);

/// The outcome of an exchange sent while the breaker was open (the sidecar's recovery probe, or a
/// request let through because no provider was usable): a success closes the breaker at once; a
/// failure leaves it open as it was (no doubling, no new recovery time).
void breaker_on_trial(Breaker& b, OutcomeClass cls, std::int64_t t_ms, std::string_view reason,
                      const BreakerConfig& cfg, double jitter);

/// Failures that open the breaker at once instead of counting toward failure_threshold: a timeout
/// already cost a client the whole attempt timeout, and a hung node costs that on every request.
[[nodiscard]] constexpr bool trips_at_once(Outcome o) { return o == Outcome::timeout; }

/// Drops old samples, filters and providers not seen for long.
void prune(State& state, std::int64_t now_ms);

/// Always valid JSON of valid UTF-8: what parse_state() accepts.
[[nodiscard]] std::string serialize_state(const State& state, std::int64_t now_ms);
/// A state of the current version. Only a file that is not such a state as a whole is an error; an
/// entry that is not readable (or not storable: a badly shaped method name, bytes that are not
/// UTF-8) is dropped and counted in `dropped`.
[[nodiscard]] Result<State> parse_state(std::string_view json, std::size_t* dropped = nullptr);

/// The state file path by DESIGN.md section 9: --state, $RPCROUTE_STATE, $XDG_STATE_HOME, ~/.local/state;
/// without HOME, $XDG_RUNTIME_DIR (private to the user), the home directory of the user's account, and
/// only then /tmp/rpcroute-UID (whose folder the store checks like any other).
[[nodiscard]] std::filesystem::path default_state_path(const EnvLookup& env = process_env());

/// The live state of one process plus its pending changes, loaded from and saved to a file with
/// lock + re-read + replay + fsync + rename. Without a path it is memory-only (--no-state).
class StateStore {
 public:
  using Warn = std::function<void(const std::string&)>;

  StateStore(std::optional<std::filesystem::path> path, const Clock& clock, Warn warn);

  /// Reads the file if there is one. A corrupt or unreadable regular file is moved aside with a
  /// warning. A path that must not be used — a directory, a symbolic link, or in a folder that is
  /// not the user's own or that others may write to — is refused (ExitCode::usage) and the store
  /// stays memory-only, so a caller that ignores the result is still safe.
  Result<void> load();
  /// Merges this process's events into the file. Never loses another writer's data. Waits for the
  /// lock at most kLockStallMs without progress (kLockGiveUpMs in all), then fails, keeping the
  /// changes for a later save.
  [[nodiscard]] Result<void> save();
  /// save() with one non-blocking attempt at the lock: false (nothing written, changes kept) when
  /// another process holds it. For an event loop that must never wait.
  [[nodiscard]] Result<bool> try_save();
  /// Drops everything, in memory and on disk.
  [[nodiscard]] Result<void> reset();

  void record(Event event, const HealthConfig& health);

  [[nodiscard]] State& state() { return state_; }
  [[nodiscard]] const std::optional<std::filesystem::path>& path() const { return path_; }
  [[nodiscard]] bool dirty() const { return pending_.count > 0; }

 private:
  /// This process's changes since the last save, compacted so that a long-running sidecar keeps
  /// bounded memory: only as many samples as the file would keep, the newest attempts per provider
  /// (enough to replay any breaker transition), the newest height, summed cursor moves.
  struct Pending {
    struct PerProvider {
      HealthConfig health;
      std::deque<AttemptEvent> attempts;
      std::map<std::string, std::deque<Sample>, std::less<>> samples;
      std::optional<Height> height;
      std::optional<ProbeFindings> probe;
      std::optional<QuotaEvent> quota;  // tokens summed, at the latest draw
      std::optional<LagMark> lag;
      std::optional<ArchivalSeen> archival;
    };
    std::map<std::string, PerProvider, std::less<>> providers;
    std::map<std::string, HighWaterEvent, std::less<>> high_water;
    std::map<std::string, std::uint64_t, std::less<>> cursors;
    std::map<std::string, FilterPin, std::less<>> filters;
    std::size_t count = 0;
  };
  void add_pending(Event event, const HealthConfig& health);
  void replay_pending(State& onto) const;
  State read_or_move_aside();
  Result<bool> save_waiting(bool wait);
  void warn_dropped(std::size_t dropped);

  std::optional<std::filesystem::path> path_;
  const Clock& clock_;
  Warn warn_;
  State state_;
  Pending pending_;
  bool warned_dropped_ = false;
};

}  // namespace rpcroute

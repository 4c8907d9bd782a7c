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
#include "rpcroute/health/model.hpp"
#include "rpcroute/health/store.hpp"
#include "rpcroute/outcome.hpp"

namespace rpcroute {

inline constexpr int kStateVersion = 1;

/// A writer gives up saving after this long without any other writer finishing (it waits at most
/// kLockGiveUpMs in all): a lock held by a stopped process must not hold up a command.
inline constexpr std::int64_t kLockStallMs = 2'000;
inline constexpr std::int64_t kLockGiveUpMs = 30'000;

/// The journal beside the state file is compacted into it (by whichever writer holds the lock) once
/// an append would make it longer than this. Every reader applies the whole journal on load, and
/// a compaction costs a rewrite with two fsyncs: the bound keeps the first cost to a few hundred
/// microseconds and lets the second come once every ~100 `call`s (docs/DECISIONS.md).
inline constexpr std::size_t kJournalCompactBytes = 32 * 1024;

/// Always valid JSON of valid UTF-8: what parse_state() accepts. `journal`, when not 0, is the
/// generation of the journal that may follow this snapshot (written as "journal": "HEX").
[[nodiscard]] std::string serialize_state(const State& state, std::int64_t now_ms,
                                          std::uint64_t journal = 0);
/// A state of the current version. Only a file that is not such a state as a whole is an error; an
/// entry that is not readable (or not storable: a badly shaped method name, bytes that are not
/// UTF-8) is dropped and counted in `dropped`. `journal` receives the snapshot's journal
/// generation (0 when it names none).
[[nodiscard]] Result<State> parse_state(std::string_view json, std::size_t* dropped = nullptr,
                                        std::uint64_t* journal = nullptr);

/// One process's changes since its last save, compacted so that a long-running sidecar keeps
/// bounded memory: only as many samples as the file would keep, the newest attempts per provider
/// (enough to replay any breaker transition), the newest height, summed cursor moves. This is
/// also what one journal record holds.
struct PendingEvents {
  struct PerProvider {
    HealthConfig health;
    std::deque<AttemptEvent> attempts;
    std::map<std::string, std::deque<Sample>, std::less<>> samples;
    std::optional<Height> height;
    std::optional<ProbeFindings> probe;
    std::optional<QuotaEvent> quota;  // tokens summed, at the latest draw
    std::optional<LagMark> lag;
    std::optional<ArchivalSeen> archival;
    std::optional<LogLimit> log_limit;
    std::optional<Cordon> cordon;  // the newest (newer_cordon)
  };
  std::map<std::string, PerProvider, std::less<>> providers;
  std::map<std::string, HighWaterEvent, std::less<>> high_water;
  // The newest safe/finalized report per chain. Not journaled (one-shot commands do not poll it);
  // saved with the snapshot, so that a save's re-read keeps it.
  std::map<std::string, FinalityEvent, std::less<>> finality;
  std::map<std::string, std::uint64_t, std::less<>> cursors;
  std::map<std::string, FilterPin, std::less<>> filters;
  std::size_t count = 0;  // events added

  void add(Event event, const HealthConfig& health);
  /// Applies these changes to `onto` in the order a save always has (attempts, samples, marks).
  void replay(State& onto) const;
};

/// The state file path by DESIGN.md section 9: --state, $RPCROUTE_STATE, $XDG_STATE_HOME,
/// ~/.local/state; without HOME, $XDG_RUNTIME_DIR (private to the user), the home directory of the
/// user's account, and only then /tmp/rpcroute-UID (whose folder the store checks like any other).
[[nodiscard]] std::filesystem::path default_state_path(const EnvLookup& env = process_env());

/// The live state of one process plus its pending changes, kept in a snapshot file and a journal
/// beside it (`PATH.journal`). One-shot commands append() their changes to the journal; a full
/// save() (the sidecar, bench, and any append that would pass kJournalCompactBytes) compacts:
/// lock, re-read snapshot + journal, replay, fsync, rename, then the journal is dropped. Without a
/// path it is memory-only (--no-state).
class StateStore final : public HealthStore {
 public:
  using Warn = std::function<void(const std::string&)>;

  StateStore(std::optional<std::filesystem::path> path, const Clock& clock, Warn warn);
  ~StateStore() override;
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  /// Reads the snapshot and applies the journal records that belong to it. A corrupt or
  /// unreadable regular snapshot is moved aside with a warning; a torn or corrupt journal tail is
  /// ignored. A path that must not be used — a directory, a symbolic link, or in a folder that is
  /// not the user's own or that others may write to — is refused (ExitCode::usage) and the store
  /// stays memory-only, so a caller that ignores the result is still safe.
  Result<void> load();
  /// Appends this process's events to the journal as one checksummed record, under the lock,
  /// without fsync and without reading the snapshot (unless another writer replaced it since
  /// load()). Compacts instead when the journal would pass kJournalCompactBytes. Lock waits as
  /// save().
  [[nodiscard]] Result<void> append();
  /// Compacts: merges the snapshot, the journal and this process's events into a new snapshot.
  /// Never loses another writer's data. Waits for the lock at most kLockStallMs without progress
  /// (kLockGiveUpMs in all), then fails, keeping the changes for a later save.
  [[nodiscard]] Result<void> save();
  /// save() with one non-blocking attempt at the lock: false (nothing written, changes kept) when
  /// another process holds it. For an event loop that must never wait.
  [[nodiscard]] Result<bool> try_save();
  /// Folds in what other processes wrote since this one last read or wrote the files (a `cordon`
  /// from the CLI, a `call`'s learning): only the journal's new records while the snapshot is the
  /// same, else the whole file with this process's pending changes replayed on it (what a save
  /// would make, without the write). Two stats when nothing changed; never takes the lock. True
  /// when something was read. For a long-running process (the sidecar's timer), not per request.
  Result<bool> refresh();
  /// Drops everything, in memory and on disk (the snapshot and the journal).
  [[nodiscard]] Result<void> reset();

  void record(Event event, const HealthConfig& health) override;

  [[nodiscard]] const ProviderState* provider(std::string_view key) const override {
    return StateView::find(state_.providers, key);
  }
  [[nodiscard]] const ChainState* chain(std::string_view key) const override {
    return StateView::find(state_.chains, key);
  }
  [[nodiscard]] const FilterPin* filter(std::string_view key) const override {
    return StateView::find(state_.filters, key);
  }

  /// The whole state, for what reads all of it (`rpcroute state`, /metrics, tests).
  [[nodiscard]] State& state() { return state_; }
  [[nodiscard]] const State& state() const { return state_; }
  [[nodiscard]] const std::optional<std::filesystem::path>& path() const { return path_; }
  [[nodiscard]] bool dirty() const { return pending_.count > 0; }
  /// Called with the live state each time a save replaced it with the file's (the Redis-backed
  /// store puts back what other hosts taught).
  void set_reload_hook(std::function<void(State&)> hook) { reload_hook_ = std::move(hook); }

 private:
  /// The files as this process last read or wrote them, so that append() can tell whether anyone
  /// replaced the snapshot or touched the journal since, without reading either.
  struct Seen {
    int snapshot_fd = -1;  // held open: its inode cannot be reused, so an id match is exact
    std::uint64_t snapshot_dev = 0;
    std::uint64_t snapshot_ino = 0;  // 0: there was no snapshot
    std::uint64_t generation = 0;    // the snapshot's journal generation
    std::uint64_t journal_dev = 0;
    std::uint64_t journal_ino = 0;
    std::uint64_t journal_end = 0;  // where its last whole record ends; the file's size then
    bool journal_ours = false;      // its header names `generation`, and nothing torn follows
  };
  State read_or_move_aside(std::uint64_t& generation);
  void hold_snapshot(int fd, std::uint64_t dev, std::uint64_t ino, std::uint64_t generation);
  void take_journal(std::string_view bytes, std::uint64_t dev, std::uint64_t ino,
                    std::uint64_t generation, State& onto);
  Result<std::uint64_t> current_generation();
  Result<bool> save_waiting(bool wait);
  Result<void> save_locked();
  Result<void> append_locked();
  Result<bool> reread();
  void warn_dropped(std::size_t dropped);

  std::optional<std::filesystem::path> path_;
  const Clock& clock_;
  Warn warn_;
  State state_;
  PendingEvents pending_;
  Seen seen_;
  bool warned_dropped_ = false;
  std::function<void(State&)> reload_hook_;
};

}  // namespace rpcroute

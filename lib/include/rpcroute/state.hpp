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

/// Always valid JSON of valid UTF-8: what parse_state() accepts.
[[nodiscard]] std::string serialize_state(const State& state, std::int64_t now_ms);
/// A state of the current version. Only a file that is not such a state as a whole is an error; an
/// entry that is not readable (or not storable: a badly shaped method name, bytes that are not
/// UTF-8) is dropped and counted in `dropped`.
[[nodiscard]] Result<State> parse_state(std::string_view json, std::size_t* dropped = nullptr);

/// The state file path by DESIGN.md section 9: --state, $RPCROUTE_STATE, $XDG_STATE_HOME,
/// ~/.local/state; without HOME, $XDG_RUNTIME_DIR (private to the user), the home directory of the
/// user's account, and only then /tmp/rpcroute-UID (whose folder the store checks like any other).
[[nodiscard]] std::filesystem::path default_state_path(const EnvLookup& env = process_env());

/// The live state of one process plus its pending changes, loaded from and saved to a file with
/// lock + re-read + replay + fsync + rename. Without a path it is memory-only (--no-state).
class StateStore final : public HealthStore {
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

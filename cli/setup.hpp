#pragma once
// What every subcommand does before and after its own work, in one place: the profile and chain,
// the state store, the event loop with its HTTP client, and how failures become exit codes.
#include <exception>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tl/expected.hpp>
#include <utility>
#include <vector>

#include "rpcroute/asio_compat.hpp"
#include "rpcroute/clock.hpp"
#include "rpcroute/config.hpp"
#include "rpcroute/error.hpp"
#include "rpcroute/shared/store.hpp"
#include "rpcroute/state.hpp"
#include "rpcroute/transport.hpp"

namespace rpcroute::cli {

[[nodiscard]] constexpr int code_of(ExitCode code) { return static_cast<int>(code); }

/// Prints "rpcroute: error: MESSAGE" and gives the usage exit code: `return usage_error(...)`.
[[nodiscard]] int usage_error(std::string_view message);
/// Prints "rpcroute: error: internal error: ..." for an exception that escaped a command's work
/// and gives the internal exit code (4). An exception that is not a std::exception goes on.
[[nodiscard]] int internal_error(const std::exception_ptr& failure);

/// Clears a command's signal set and ignores its signals from then on. Call it once the command
/// winds down, for its set of stop signals after the first was taken: `timeout`, and a shell's
/// kill of a job, send the signal to the process and again to its group, and a copy arriving after
/// the set is gone would otherwise end the orderly exit with 130. The same for a set that saves or
/// reloads (SIGHUP, SIGUSR1/2 from a supervisor), whose default action also ends the process.
void ignore_from_now(asio::signal_set& signals, std::initializer_list<int> numbers);

/// --profile value, else $RPCROUTE_PROFILE, else the embedded default.
[[nodiscard]] Result<Profile> load_selected_profile(const std::string& flag);
/// The same, with the error printed.
[[nodiscard]] std::optional<Profile> load_profile_flag(const std::string& flag);

/// --chain value (name or id), else the profile's first chain; the error lists the chains.
[[nodiscard]] Result<const Chain*> select_chain(const Profile& profile, const std::string& flag);
/// "a,b" → those providers (unknown ids are an error listing the valid ones); empty → all.
[[nodiscard]] Result<std::vector<const Provider*>> select_providers(const Chain& chain,
                                                                    const std::string& list);

/// --state / --no-state / $RPCROUTE_STATE / XDG rules.
[[nodiscard]] std::optional<std::filesystem::path> resolve_state_path(const std::string& flag,
                                                                      bool no_state);

/// A command's profile, chain, clock, random source and state store. Built in place (the store
/// keeps a reference to the clock), then filled by the steps the command needs; each step prints
/// its own error, so a command only returns the exit code:
///
///   Setup setup;
///   if (!setup.select(options.profile, options.chain)) return code_of(ExitCode::usage);
///   if (!setup.open_state(resolve_state_path(options.state, options.no_state))) return ...;
class Setup {
 public:
  Setup() = default;
  Setup(const Setup&) = delete;
  Setup& operator=(const Setup&) = delete;

  /// Loads the profile (load_profile_flag) and picks the chain: --chain (name or id), else the
  /// profile's first. False: the error is printed (exit 2).
  [[nodiscard]] bool select(const std::string& profile_flag, const std::string& chain_flag);

  /// A state store at `path` (nullopt: memory only), not loaded; warnings go to stderr.
  StateStore& new_store(std::optional<std::filesystem::path> path);
  /// new_store() and load it. False: the file was refused, the error is printed (exit 2).
  [[nodiscard]] bool open_state(std::optional<std::filesystem::path> path);
  /// How a one-shot command writes what it learned: one record appended to the state journal (the
  /// default: microseconds), or a full rewrite of the snapshot (bench: many samples, and a run
  /// that lasts far longer than a rewrite).
  enum class StateWrite { append, rewrite };
  /// Saves the state; a failure is a warning, not an error (what was answered stays answered).
  void save_state(StateWrite how = StateWrite::append);
  /// The command's exit code once its answer is out: stdout is finished and let go first, so a slow
  /// or stuck state lock never holds up the answer, then the state is saved. Lost output turns a
  /// success into exit 4.
  [[nodiscard]] int finish(int code);

  /// The store routing reads and records into: the shared one when open_shared() made it, else
  /// the state store.
  [[nodiscard]] HealthStore& health() {
    return shared ? static_cast<HealthStore&>(*shared) : static_cast<HealthStore&>(*store);
  }
  /// One-shot commands: when --shared-state or the profile's shared_state asks for it, the
  /// Redis-backed store over the state store, on a loop of its own (the command's comes and goes),
  /// warmed up (what other hosts learned, within kSharedWarmUpMs) before the command routes;
  /// finish() writes back what it learned. False: the URL was refused (the error is printed).
  [[nodiscard]] bool open_shared(const std::string& flag);
  static constexpr std::int64_t kSharedWarmUpMs = 300;

  Profile profile;
  const Chain* chain = nullptr;  // into profile
  SystemClock clock;
  Random rng;
  std::optional<StateStore> store;
  std::unique_ptr<asio::io_context> shared_io;  // before `shared`, which uses it
  std::unique_ptr<shared::SharedStore> shared;
};

/// The Redis-backed store over `setup.store` for `serve` (not started): nullptr when neither
/// `flag` nor the profile's shared_state asks for one; nullopt when the URL is refused (the error
/// is printed). Its messages go to stderr.
[[nodiscard]] std::optional<std::unique_ptr<shared::SharedStore>> open_shared_state(
    asio::io_context& io, Setup& setup, const Profile& profile, const std::string& flag,
    bool announce = true);

/// A command's event loop and its HTTP client. One thread does everything (curl's callbacks,
/// timers, signals), so the loop is told so: no locks in its scheduler or reactor.
class EventLoop {
 public:
  EventLoop() : io_(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE), engine_(io_) {}
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  [[nodiscard]] asio::io_context& io() { return io_; }
  [[nodiscard]] Engine& engine() { return engine_; }

  /// When run() returns. `idle`: once nothing is left to do, so that work the command started and
  /// did not wait for (a broadcast's other sends) is still recorded. `done`: as soon as the work is
  /// done; idle keep-alive connections and background loops end with it.
  enum class Until { idle, done };

  /// What run() gives: the work's value, or the exception that escaped it (an internal error: see
  /// internal_error()).
  template <class T>
  using Completion = tl::expected<T, std::exception_ptr>;

  /// Runs `work` on the loop until `until`.
  template <class T>
  [[nodiscard]] Completion<T> run(asio::awaitable<T> work, Until until) {
    Completion<T> out;
    asio::co_spawn(io_, std::move(work), [&](const std::exception_ptr& e, T v) {
      if (e) {
        out = tl::unexpected(e);
      } else {
        out = std::move(v);
      }
      if (until == Until::done) io_.stop();
    });
    io_.run();
    return out;
  }
  /// The same for work without a value; `on_done` is called when it ends.
  [[nodiscard]] Completion<void> run(asio::awaitable<void> work, Until until,
                                     const std::function<void()>& on_done = {});

 private:
  // The Engine (curl's multi handle) goes before the io_context it is registered with.
  asio::io_context io_;
  Engine engine_;
};

}  // namespace rpcroute::cli

#include <fcntl.h>
#include <fmt/format.h>
#include <pwd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>

#include "files.hpp"
#include "journal.hpp"
#include "rpcroute/state.hpp"

namespace rpcroute {

namespace sf = state_files;

std::filesystem::path default_state_path(const EnvLookup& env) {
  if (auto p = env("RPCROUTE_STATE"); p && !p->empty()) return *p;
  if (auto x = env("XDG_STATE_HOME"); x && !x->empty())
    return std::filesystem::path(*x) / "rpcroute" / "state.json";
  if (auto h = env("HOME"); h && !h->empty()) {
    return std::filesystem::path(*h) / ".local" / "state" / "rpcroute" / "state.json";
  }
  // No HOME (a service, `env -i`): a folder of the user's own, never first a guessable /tmp name
  // that someone else could have made (and the store checks whatever folder it gets).
  if (auto r = env("XDG_RUNTIME_DIR"); r && !r->empty() && r->front() == '/') {
    return std::filesystem::path(*r) / "rpcroute" / "state.json";
  }
  if (const passwd* pw = ::getpwuid(::geteuid());
      pw != nullptr && pw->pw_dir != nullptr && pw->pw_dir[0] == '/') {
    return std::filesystem::path(pw->pw_dir) / ".local" / "state" / "rpcroute" / "state.json";
  }
  return std::filesystem::path("/tmp") / fmt::format("rpcroute-{}", ::geteuid()) / "state.json";
}

namespace {

std::filesystem::path journal_path(const std::filesystem::path& path) {
  return sf::beside(path, sf::kJournalSuffix);
}

/// A new journal generation: random, so that no journal of an earlier snapshot (one whose removal
/// a crash prevented, or from before a file was moved aside) can ever match it; never 0 (a snapshot
/// that names no journal) nor `old`.
std::uint64_t fresh_generation(std::uint64_t old) {
  for (std::uint64_t salt = 0;; ++salt) {
    std::uint64_t g = 0;
    if (::getrandom(&g, sizeof g, 0) != static_cast<ssize_t>(sizeof g)) {
      const auto t = std::chrono::system_clock::now().time_since_epoch().count();
      g = (static_cast<std::uint64_t>(t) * 0x9E3779B97F4A7C15ULL) ^
          (static_cast<std::uint64_t>(::getpid()) << 40) ^ salt;
    }
    if (g != 0 && g != old && g != ~std::uint64_t{0}) return g;
  }
}

/// Test hook for the e2e crash tests: RPCROUTE_TEST_STATE_CRASH=POINT kills this process with
/// SIGKILL at that point of a state write — `append` (half a record written), `compact-tmp` (the
/// new snapshot written, not yet renamed), `compact-renamed` (renamed, the old journal not yet
/// removed) — so that what a kill -9 at a random instant may leave is certain to be tested.
bool crash_point(std::string_view point) {
  static const std::string at = [] {
    const char* v = std::getenv("RPCROUTE_TEST_STATE_CRASH");
    return std::string(v != nullptr ? v : "");
  }();
  return !at.empty() && at == point;
}
void crash_at(std::string_view point) {
  if (crash_point(point)) ::raise(SIGKILL);
}

/// Writes `text` to a temporary file beside `path`, fsyncs it, renames it over `path` and fsyncs
/// the folder. Returns the new snapshot, still open.
Result<sf::Opened> replace_snapshot(const std::filesystem::path& path, std::string_view text) {
  const auto tmp = sf::beside(path, fmt::format(".tmp.{}", ::getpid()));
  // O_EXCL | O_NOFOLLOW: never through a link planted at the name, never into an existing file.
  // One left over (by a dead process that had our pid, or planted) is removed, not followed:
  // unlink removes a link itself. We hold the lock and the folder is ours.
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  sf::Fd fd(::open(tmp.c_str(), kFlags, 0600));
  if (!fd.valid() && errno == EEXIST && ::unlink(tmp.c_str()) == 0)
    fd = sf::Fd(::open(tmp.c_str(), kFlags, 0600));
  if (!fd.valid())
    return fail(fmt::format("cannot write {}: {}", tmp.string(), sf::errno_text()),
                ExitCode::internal);
  ::fchmod(fd.get(), 0600);
  if (auto r = sf::write_all(fd.get(), text); !r) {
    ::unlink(tmp.c_str());
    return tl::unexpected(r.error());
  }
  struct stat st {};
  if (::fsync(fd.get()) != 0 || ::fstat(fd.get(), &st) != 0) {
    const auto why = sf::errno_text();
    ::unlink(tmp.c_str());
    return fail(fmt::format("fsync {}: {}", tmp.string(), why), ExitCode::internal);
  }
  crash_at("compact-tmp");
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    auto why = sf::errno_text();
    ::unlink(tmp.c_str());
    return fail(fmt::format("cannot replace {}: {}", path.string(), why), ExitCode::internal);
  }
  sf::Fd dfd(::open(sf::folder_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd.valid()) ::fsync(dfd.get());
  return sf::Opened{std::move(fd), sf::id_of(st)};
}

}  // namespace

StateStore::StateStore(std::optional<std::filesystem::path> path, const Clock& clock, Warn warn)
    : path_(std::move(path)), clock_(clock), warn_(std::move(warn)) {}

StateStore::~StateStore() { hold_snapshot(-1, 0, 0, 0); }

void StateStore::warn_dropped(std::size_t dropped) {
  if (dropped == 0 || warned_dropped_) return;
  warned_dropped_ = true;
  warn_(fmt::format("state file {}: dropped {} unreadable entr{}; the rest is kept",
                    path_->string(), dropped, dropped == 1 ? "y" : "ies"));
}

void StateStore::hold_snapshot(int fd, std::uint64_t dev, std::uint64_t ino,
                               std::uint64_t generation) {
  if (seen_.snapshot_fd >= 0) ::close(seen_.snapshot_fd);
  // What was known of the journal belonged to the snapshot before.
  seen_ = Seen{};
  seen_.snapshot_fd = fd;
  seen_.snapshot_dev = dev;
  seen_.snapshot_ino = ino;
  seen_.generation = generation;
}

void StateStore::take_journal(std::string_view bytes, std::uint64_t dev, std::uint64_t ino,
                              std::uint64_t generation, State& onto) {
  auto scan = journal::scan(bytes, true);
  // A journal of another generation is stale: the snapshot already holds its records (a crash
  // came between a compaction's rename and the journal's removal), or they belong to a snapshot
  // that is gone. Either way none of them is applied.
  const bool ours = scan.header_ok && scan.generation == generation;
  seen_.journal_dev = dev;
  seen_.journal_ino = ino;
  seen_.journal_end = scan.valid_end;
  seen_.journal_ours = ours && !scan.torn;
  if (!ours) return;
  for (const auto& r : scan.records) r.replay(onto);
  warn_dropped(scan.undecodable);
}

State StateStore::read_or_move_aside(std::uint64_t& generation) {
  generation = 0;
  std::string text;
  std::string why;
  sf::Opened opened;
  auto status = sf::read_file(*path_, text, why, &opened);
  if (status == sf::ReadStatus::missing || status == sf::ReadStatus::not_regular) {
    hold_snapshot(-1, 0, 0, 0);
    return {};
  }
  if (status == sf::ReadStatus::ok) {
    if (text.empty()) {
      why = "empty file";
    } else {
      std::size_t dropped = 0;
      auto parsed = parse_state(text, &dropped, &generation);
      if (parsed) {
        warn_dropped(dropped);
        hold_snapshot(opened.fd.release(), opened.id.dev, opened.id.ino, generation);
        return std::move(*parsed);
      }
      why = parsed.error().message;
    }
  }
  generation = 0;
  hold_snapshot(-1, 0, 0, 0);
  // Only a regular file is moved aside (read_file said so; rename never follows a link).
  auto aside = *path_;
  aside += fmt::format(".corrupt-{}", clock_.now_ms());
  std::error_code ec;
  std::filesystem::rename(*path_, aside, ec);
  if (ec) {
    warn_(fmt::format(
        "state file {} is unusable ({}) and could not be moved aside: {}; starting fresh",
        path_->string(), why, ec.message()));
  } else {
    warn_(fmt::format("state file {} is unusable ({}); moved it to {} and started fresh",
                      path_->string(), why, aside.string()));
  }
  return {};
}

Result<void> StateStore::load() {
  if (!path_) return {};
  if (auto odd = sf::odd_file_type(*path_); !odd.empty()) {
    // Never read, move or replace it: `--state /dev/null` must not rename /dev/null.
    warn_(fmt::format("state path {} is {}, not a state file; running without saved state",
                      path_->string(), odd));
    path_.reset();
    return {};
  }
  if (auto why = sf::refusal(*path_); !why.empty()) {
    path_.reset();
    return fail(why, ExitCode::usage);
  }
  // The journal before the snapshot: a compaction between the two reads then shows as a
  // generation mismatch (the new snapshot holds what the journal had), never as records lost.
  std::string journal_bytes;
  std::string why;
  sf::Opened journal;
  sf::read_file(journal_path(*path_), journal_bytes, why, &journal);
  std::string text;
  sf::Opened snapshot;
  auto status = sf::read_file(*path_, text, why, &snapshot);
  std::uint64_t generation = 0;
  bool usable = status == sf::ReadStatus::missing || status == sf::ReadStatus::not_regular;
  if (status == sf::ReadStatus::ok && !text.empty()) {
    std::size_t dropped = 0;
    if (auto parsed = parse_state(text, &dropped, &generation)) {
      state_ = std::move(*parsed);
      warn_dropped(dropped);
      hold_snapshot(snapshot.fd.release(), snapshot.id.dev, snapshot.id.ino, generation);
      usable = true;
    }
  }
  if (!usable) {
    // Unusable: look again under the lock (a writer may have been mid-rename), then move it aside.
    auto lock = sf::lock_or_fail(*path_);
    if (!lock) {
      warn_(fmt::format("state file {}: {}; running without saved state", path_->string(),
                        lock.error().message));
      return {};
    }
    state_ = read_or_move_aside(generation);
    journal = sf::Opened{};
    journal_bytes.clear();
    sf::read_file(journal_path(*path_), journal_bytes, why, &journal);
  }
  take_journal(journal_bytes, journal.id.dev, journal.id.ino, generation, state_);
  return {};
}

void StateStore::record(Event event, const HealthConfig& health) {
  apply_event(state_, event, health);
  if (path_) pending_.add(std::move(event), health);
}

Result<void> StateStore::save() {
  auto saved = save_waiting(true);
  if (!saved) return tl::unexpected(saved.error());
  if (!*saved) return fail(sf::still_locked(*path_), ExitCode::internal);
  return {};
}

Result<bool> StateStore::try_save() { return save_waiting(false); }

Result<bool> StateStore::save_waiting(bool wait) {
  if (!path_ || pending_.count == 0) return true;
  if (auto r = sf::ensure_dir(path_->parent_path()); !r) return tl::unexpected(r.error());
  if (auto why = sf::refusal(*path_); !why.empty()) return fail(why, ExitCode::usage);
  auto lock = sf::lock_exclusive(*path_, wait);
  if (!lock) return tl::unexpected(lock.error());
  if (!*lock) return false;
  if (auto odd = sf::odd_file_type(*path_); !odd.empty()) {
    return fail(fmt::format("state path {} is {}; not replaced", path_->string(), odd),
                ExitCode::internal);
  }
  if (auto r = save_locked(); !r) return tl::unexpected(r.error());
  return true;
}

Result<void> StateStore::save_locked() {
  sf::remove_orphan_temporaries(*path_);
  std::uint64_t generation = 0;
  State merged = read_or_move_aside(generation);
  const auto jpath = journal_path(*path_);
  std::string journal_bytes;
  std::string why;
  if (sf::read_file(jpath, journal_bytes, why) == sf::ReadStatus::ok)
    take_journal(journal_bytes, 0, 0, generation, merged);
  pending_.replay(merged);
  auto now = clock_.now_ms();
  prune(merged, now);
  const auto next = fresh_generation(generation);
  auto written = replace_snapshot(*path_, serialize_state(merged, now, next));
  if (!written) return tl::unexpected(written.error());
  // The snapshot that holds the journal's records is durable and names a new generation: the old
  // journal is stale from its rename on, and removed now (a crash before this leaves it to be
  // ignored by readers and restarted by the next appender).
  crash_at("compact-renamed");
  struct stat st {};
  if (::lstat(jpath.c_str(), &st) == 0 && S_ISREG(st.st_mode)) ::unlink(jpath.c_str());
  hold_snapshot(written->fd.release(), written->id.dev, written->id.ino, next);
  state_ = std::move(merged);
  pending_ = PendingEvents{};
  if (reload_hook_) reload_hook_(state_);
  return {};
}

Result<void> StateStore::append() {
  if (!path_ || pending_.count == 0) return {};
  if (auto r = sf::ensure_dir(path_->parent_path()); !r) return tl::unexpected(r.error());
  if (auto why = sf::refusal(*path_); !why.empty()) return fail(why, ExitCode::usage);
  auto lock = sf::lock_or_fail(*path_);
  if (!lock) return tl::unexpected(lock.error());
  if (auto odd = sf::odd_file_type(*path_); !odd.empty()) {
    return fail(fmt::format("state path {} is {}; not written", path_->string(), odd),
                ExitCode::internal);
  }
  return append_locked();
}

/// The generation of the snapshot now at the path (0: there is none). Read only when another
/// writer replaced the snapshot since this process last looked: the one it read is held open, so
/// the same file id means the same file.
Result<std::uint64_t> StateStore::current_generation() {
  struct stat st {};
  if (::lstat(path_->c_str(), &st) != 0) {
    if (errno != ENOENT)
      return fail(fmt::format("cannot stat {}: {}", path_->string(), sf::errno_text()),
                  ExitCode::internal);
    if (seen_.snapshot_ino != 0) hold_snapshot(-1, 0, 0, 0);
    return 0;
  }
  if (seen_.snapshot_ino != 0 &&
      sf::id_of(st) == sf::FileId{seen_.snapshot_dev, seen_.snapshot_ino})
    return seen_.generation;
  std::uint64_t generation = 0;
  (void)read_or_move_aside(generation);
  return generation;
}

Result<void> StateStore::append_locked() {
  auto generation = current_generation();
  if (!generation) return tl::unexpected(generation.error());
  // No snapshot yet (a first run, or one moved aside as unusable): this save writes it, so that
  // the state file exists, fresh and valid, after any command that learned something. Entries
  // were dropped as unreadable: a rewrite heals the file, so the warning is not repeated by every
  // reader until the next compaction.
  if (seen_.snapshot_ino == 0 || warned_dropped_) return save_locked();
  const auto jpath = journal_path(*path_);
  constexpr int kFlags = O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
  sf::Fd fd(::open(jpath.c_str(), kFlags, 0600));
  if (!fd.valid()) {
    const auto why = errno == ELOOP ? std::string("it is a symbolic link") : sf::errno_text();
    return fail(fmt::format("cannot open {}: {}", jpath.string(), why), ExitCode::internal);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return fail(fmt::format("state journal {} is not a regular file; not written", jpath.string()),
                ExitCode::internal);
  }
  if ((st.st_mode & 07777) != 0600) ::fchmod(fd.get(), 0600);
  const auto size = static_cast<std::size_t>(st.st_size);
  const auto id = sf::id_of(st);
  // Where the good records of this snapshot's journal end; 0: start it afresh. Known without a
  // read when nothing changed since load() (the common case: no other writer in between).
  std::size_t end = 0;
  if (seen_.journal_ours && *generation == seen_.generation && size == seen_.journal_end &&
      id == sf::FileId{seen_.journal_dev, seen_.journal_ino}) {
    end = size;
  } else if (size > 0) {
    auto bytes = sf::read_fd(fd.get(), size);
    if (!bytes)
      return fail(fmt::format("cannot read {}: {}", jpath.string(), bytes.error().message),
                  ExitCode::internal);
    auto scan = journal::scan(*bytes, false);
    if (scan.header_ok && scan.generation == *generation) end = scan.valid_end;
  }
  std::string out = end == 0 ? journal::header(*generation) : std::string();
  out += journal::record(*generation, pending_);
  if (end + out.size() > kJournalCompactBytes) return save_locked();
  // What no reader would take — a stale journal, a torn tail — is cut: a record must follow good
  // ones. We hold the lock, so no writer is mid-append.
  if (end < size && ::ftruncate(fd.get(), static_cast<off_t>(end)) != 0) {
    return fail(fmt::format("cannot truncate {}: {}", jpath.string(), sf::errno_text()),
                ExitCode::internal);
  }
  // One write, no fsync (docs/DECISIONS.md: a power loss may lose the last calls' learning, never
  // tear what is there). A short write (a full disk) leaves a torn tail: ignored, then cut.
  if (crash_point("append")) {
    (void)sf::write_all(fd.get(), std::string_view(out).substr(0, out.size() / 2));
    ::raise(SIGKILL);
  }
  if (auto r = sf::write_all(fd.get(), out); !r) {
    return fail(fmt::format("cannot append to {}: {}", jpath.string(), r.error().message),
                ExitCode::internal);
  }
  seen_.journal_dev = id.dev;
  seen_.journal_ino = id.ino;
  seen_.journal_end = end + out.size();
  seen_.journal_ours = true;
  pending_ = PendingEvents{};
  return {};
}

Result<bool> StateStore::refresh() {
  if (!path_) return false;
  struct stat st {};
  const bool snapshot = ::lstat(path_->c_str(), &st) == 0 && S_ISREG(st.st_mode);
  const bool same_snapshot =
      snapshot ? seen_.snapshot_ino != 0 &&
                     sf::id_of(st) == sf::FileId{seen_.snapshot_dev, seen_.snapshot_ino}
               : seen_.snapshot_ino == 0;
  if (!same_snapshot) return reread();
  const auto jpath = journal_path(*path_);
  if (::lstat(jpath.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  const auto size = static_cast<std::size_t>(st.st_size);
  const auto id = sf::id_of(st);
  const bool known = id == sf::FileId{seen_.journal_dev, seen_.journal_ino};
  if (known && size == seen_.journal_end) return false;  // the common case: nothing new
  // Records appended to the journal this process read are new alone: its header followed by the
  // new bytes is a journal of the same generation (a record's checksum covers its generation and
  // bytes, not its offset). A journal that was not there at the last look is new as a whole.
  const bool none_before = seen_.journal_ino == 0 && seen_.journal_dev == 0;
  if (none_before || (known && seen_.journal_ours && size > seen_.journal_end)) {
    sf::Fd fd(::open(jpath.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd.valid()) return false;
    auto bytes = sf::read_fd(fd.get(), size);
    const std::size_t end = none_before ? 0 : seen_.journal_end;
    if (!bytes || bytes->size() < end) return false;
    std::string view = none_before ? std::string() : journal::header(seen_.generation);
    view.append(*bytes, end, std::string::npos);
    auto scan = journal::scan(view, true);
    // Another generation's journal (a compaction came between the two looks), or bytes that are
    // not records of ours: read everything again.
    if (!scan.header_ok || scan.generation != seen_.generation ||
        (scan.torn && scan.records.empty()))
      return reread();
    for (const auto& r : scan.records) r.replay(state_);
    warn_dropped(scan.undecodable);
    seen_.journal_dev = id.dev;
    seen_.journal_ino = id.ino;
    seen_.journal_end = end + scan.valid_end - (none_before ? 0 : journal::kHeaderBytes);
    // A torn tail is a record being written (or one the next appender cuts at this offset).
    seen_.journal_ours = true;
    if (reload_hook_) reload_hook_(state_);
    return true;
  }
  return reread();
}

/// The whole file read again, as load() does but without moving an unusable one aside (the next
/// save does that under the lock), with this process's pending changes replayed on it.
Result<bool> StateStore::reread() {
  std::string journal_bytes;
  std::string why;
  sf::Opened journal;
  sf::read_file(journal_path(*path_), journal_bytes, why, &journal);
  std::string text;
  sf::Opened snapshot;
  const auto status = sf::read_file(*path_, text, why, &snapshot);
  State merged;
  std::uint64_t generation = 0;
  if (status == sf::ReadStatus::ok) {
    std::size_t dropped = 0;
    auto parsed = parse_state(text, &dropped, &generation);
    if (!parsed) return false;
    merged = std::move(*parsed);
    warn_dropped(dropped);
    hold_snapshot(snapshot.fd.release(), snapshot.id.dev, snapshot.id.ino, generation);
  } else if (status == sf::ReadStatus::missing) {
    hold_snapshot(-1, 0, 0, 0);  // reset by `state reset`: what is left is ours
  } else {
    return false;
  }
  take_journal(journal_bytes, journal.id.dev, journal.id.ino, generation, merged);
  pending_.replay(merged);
  state_ = std::move(merged);
  if (reload_hook_) reload_hook_(state_);
  return true;
}

Result<void> StateStore::reset() {
  state_ = State{};
  pending_ = PendingEvents{};
  hold_snapshot(-1, 0, 0, 0);
  if (!path_) return {};
  if (auto why = sf::refusal(*path_); !why.empty()) return fail(why, ExitCode::usage);
  const auto jpath = journal_path(*path_);
  const std::filesystem::path* const files[] = {&jpath, &*path_};
  bool any = false;
  for (const auto* p : files) {
    struct stat st {};
    if (::lstat(p->c_str(), &st) != 0) continue;
    if (!S_ISREG(st.st_mode))
      return fail(fmt::format("state path {} is not a regular file; not removed", p->string()));
    any = true;
  }
  if (!any) return {};
  auto lock = sf::lock_or_fail(*path_);
  if (!lock) return tl::unexpected(lock.error());
  // The journal first: a crash between the two leaves a snapshot without it (reset again), never a
  // journal that would apply to no snapshot.
  for (const auto* p : files) {
    if (::unlink(p->c_str()) != 0 && errno != ENOENT) {
      return fail(fmt::format("cannot remove {}: {}", p->string(), sf::errno_text()),
                  ExitCode::internal);
    }
  }
  return {};
}

}  // namespace rpcroute
